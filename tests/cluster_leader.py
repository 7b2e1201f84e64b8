"""A leader runtime driven by JSON lines on stdin, for the multi-host tests.

    GREENROOM_KEY=... python -m tests.cluster_leader HOST PORT [--trace]

With ``--trace`` the runtime traces into an in-memory exporter, which ``{"op": "spans"}`` reads.

Each line is a command ({"op": ...}); each answer is one JSON line on stdout.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from actors import Runtime
from actors.testing import Reply, ScriptedProvider, call, say, use_tools
from messages import RetryPolicy, StopTurn, ToolProgress

from . import otel_tools as O
from . import tools_for_tests as T


def reply_of(spec: dict[str, Any]) -> Reply:
    if "say" in spec:
        return say(spec["say"])
    return use_tools(*[call(name, args) for name, args in spec["tools"]])


def traced() -> tuple[Any, dict[str, Any]]:
    """An in-memory exporter, and the Runtime argument that traces into it."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, {"tracer_provider": provider}


def span_json(span: Any) -> dict[str, Any]:
    return {
        "name": span.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "attributes": dict(span.attributes or {}),
    }


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    exporter, tracing = traced() if "--trace" in sys.argv[3:] else (None, {})
    model = ScriptedProvider(host=host).start()  # every node reaches it: turns run on members too
    rt = Runtime(
        model.provider(retry=RetryPolicy(max_attempts=1)),
        host=host,
        admin_port=port,
        key=os.environ["GREENROOM_KEY"].encode(),
        **tracing,
    ).start()
    turns: dict[str, Any] = {}
    print(json.dumps({"ready": True, "sid": rt.admin_sid, "netns": os.readlink("/proc/self/ns/net")}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "quit":
                break
            if op == "wait_node":
                out: dict[str, Any] = {"node": rt.wait_for_node(cmd["caps"], cmd.get("timeout", 30))}
            elif op == "nodes":
                out = {"nodes": [n.model_dump() for n in rt.nodes()]}
            elif op == "membership":
                out = {"membership": [[m.node, m.joined] for m in rt.membership]}
            elif op == "run":
                model.add(*[reply_of(r) for r in cmd["replies"]])
                tools = [getattr(T, t, None) or getattr(O, t) for t in cmd["tools"]]
                turns[cmd["turn_id"]] = rt.run(cmd["prompt"], tools=tools, turn_id=cmd["turn_id"])
                out = {"turn_id": cmd["turn_id"]}
            elif op == "wait_progress":
                event = turns[cmd["turn_id"]].wait_for(
                    lambda e: isinstance(e, ToolProgress), timeout=cmd.get("timeout", 30)
                )
                out = {"data": event.data}
            elif op == "spans":
                out = {"spans": [span_json(s) for s in exporter.get_finished_spans()] if exporter else []}
            elif op == "stop":  # by turn id, through the directory, as any actor would
                reply = rt.control(StopTurn(turn_id=cmd["turn_id"], reason=cmd.get("reason", "stop")))
                out = {"ok": reply.ok}
            elif op == "result":
                result = turns[cmd["turn_id"]].result(cmd.get("timeout", 60), final=True)
                out = {
                    "finish_reason": result.finish_reason,
                    "messages": [m.model_dump(mode="json") for m in result.messages],
                }
            else:
                out = {"error": f"unknown op {op}"}
        except Exception as exc:  # reported to the test, which fails with it
            out = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out), flush=True)
    rt.close()
    model.close()


if __name__ == "__main__":
    main()
