"""A leader runtime driven by JSON lines on stdin, for the multi-host tests.

    GREENROOM_KEY=... python -m tests.cluster_leader HOST PORT

Each line is a command ({"op": ...}); each answer is one JSON line on stdout.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from actors import Runtime
from actors.scripted_provider import Reply, ScriptedProvider, call, say, use_tools
from messages import RetryPolicy, StopTurn, ToolProgress

from . import tools_for_tests as T


def reply_of(spec: dict[str, Any]) -> Reply:
    if "say" in spec:
        return say(spec["say"])
    return use_tools(*[call(name, args) for name, args in spec["tools"]])


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    model = ScriptedProvider().start()
    rt = Runtime(
        model.provider(retry=RetryPolicy(max_attempts=1)),
        host=host,
        admin_port=port,
        key=os.environ["GREENROOM_KEY"].encode(),
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
                turns[cmd["turn_id"]] = rt.run(
                    cmd["prompt"], tools=[getattr(T, t) for t in cmd["tools"]], turn_id=cmd["turn_id"]
                )
                out = {"turn_id": cmd["turn_id"]}
            elif op == "wait_progress":
                event = turns[cmd["turn_id"]].wait_for(
                    lambda e: isinstance(e, ToolProgress), timeout=cmd.get("timeout", 30)
                )
                out = {"data": event.data}
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
