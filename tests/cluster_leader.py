"""A leader runtime driven by JSON lines on stdin, for the multi-host tests and bench/cluster.py.

    GREENROOM_KEY=... python -m tests.cluster_leader HOST PORT [--trace] [--provider URL]
        [--store URL] [--hosts N] [--tool-processes N] [--capability NAME[=VALUE]]...
        [--rate-limit REQUESTS/SECONDS]

With ``--trace`` the runtime traces into an in-memory exporter, which ``{"op": "spans"}`` reads.
With ``--provider`` (an OpenAI-style base URL, ``http://10.251.7.1:PORT/v1``) turns use that
server, which every node reaches (``tests.cluster_harness`` serves replies by prompt there);
without it the leader runs its own ``ScriptedProvider`` on its loopback, fed by the
``replies`` of each ``run``.

Each line is a command ({"op": ...}); each answer is one JSON line on stdout, ``{"error": ...}``
when the command raised. Events are given as ``[seq, kind, ...]`` (``tests.helpers.summary``
of each event alone, after its seq).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from actors import Overloaded, Runtime
from actors.cluster.node import parse_capability
from actors.testing import Reply, ScriptedProvider, call, say, use_tools
from messages import Error, Finish, ProviderConfig, RateLimit, RetryPolicy, StopTurn, TurnEvent

from . import cluster_tools as C
from . import otel_tools as O
from . import tools_for_tests as T
from .helpers import summary

ONCE = RetryPolicy(max_attempts=1)


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


def event_json(event: TurnEvent) -> list[Any]:
    return [event.seq, *summary([event])[0]]


def tool_of(name: str) -> Any:
    for module in (C, T, O):
        if hasattr(module, name):
            return getattr(module, name)
    raise KeyError(f"no tool named {name}")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster_leader")
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--provider", default=None, help="an OpenAI-style base URL every node reaches")
    parser.add_argument("--store", default=None)
    parser.add_argument("--hosts", type=int, default=None)
    parser.add_argument("--tool-processes", type=int, default=None)
    parser.add_argument("--capability", action="append", default=[])
    parser.add_argument("--rate-limit", default=None, help="REQUESTS/SECONDS: the provider's RateLimit")
    return parser.parse_args(argv)


class Leader:
    """The runtime, its turns by id, and one method per op."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.exporter, tracing = traced() if args.trace else (None, {})
        self.model = None if args.provider else ScriptedProvider(host=args.host).start()  # every node reaches it
        limited: dict[str, Any] = {}
        if args.rate_limit:
            requests, _, seconds = args.rate_limit.partition("/")
            limited["rate_limit"] = RateLimit(requests_per_minute=int(requests), window=float(seconds))
            limited["retry"] = RetryPolicy(max_attempts=3, initial_delay=0.0, jitter=0)  # a 429 is tried again
        if args.provider:
            provider = ProviderConfig(
                api="openai", base_url=args.provider, model="scripted-model", **{"retry": ONCE, **limited}
            )
        else:
            assert self.model is not None
            provider = self.model.provider(**{"retry": ONCE, **limited})
        options: dict[str, Any] = {"store": args.store} if args.store else {}
        if args.hosts is not None:
            options["hosts"] = args.hosts
        if args.tool_processes is not None:
            options["tool_processes"] = args.tool_processes
        capabilities = dict(parse_capability(c) for c in args.capability)
        if capabilities:
            options["capabilities"] = capabilities
        self.rt = Runtime(
            provider,
            host=args.host,
            admin_port=args.port,
            key=os.environ["GREENROOM_KEY"].encode(),
            **options,
            **tracing,
        ).start()
        self.turns: dict[str, Any] = {}

    def close(self) -> None:
        self.rt.close()
        if self.model is not None:
            self.model.close()

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        return getattr(self, f"op_{cmd.pop('op')}")(**cmd)  # type: ignore[no-any-return]

    # -- the cluster -----------------------------------------------------------------------

    def op_wait_node(self, caps: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
        return {"node": self.rt.wait_for_node(caps, timeout)}

    def op_placeable(self, caps: dict[str, Any] | None = None, timeout: float = 60) -> dict[str, Any]:
        """Wait until a node with ``caps`` is in the Runtime's table; the ids of the hosts a turn
        that requires ``caps`` may be placed on."""
        if caps:
            self.rt.wait_for_node(caps, timeout)
        return {"hosts": self.rt.placeable(caps)}

    def op_nodes(self) -> dict[str, Any]:
        return {"nodes": [n.model_dump() for n in self.rt.nodes()]}

    def op_membership(self) -> dict[str, Any]:
        return {"membership": [[m.node, m.joined] for m in self.rt.membership]}

    def op_spans(self) -> dict[str, Any]:
        return {"spans": [span_json(s) for s in self.exporter.get_finished_spans()] if self.exporter else []}

    def op_turns(self) -> dict[str, Any]:
        return {"turns": [s.model_dump(mode="json") for s in self.rt.turns()]}

    # -- turns -----------------------------------------------------------------------------

    def _start(self, turn_id: str, prompt: str, tools: list[str], requires: dict[str, Any] | None) -> Any:
        extra = {"requires": requires} if requires is not None else {}  # only where the interface has it
        return self.rt.run(prompt, tools=[tool_of(t) for t in tools], turn_id=turn_id, **extra)

    def op_run(
        self,
        turn_id: str,
        prompt: str,
        tools: list[str] = [],  # noqa: B006 - read only
        replies: list[dict[str, Any]] | None = None,
        requires: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if replies is not None:
            assert self.model is not None, "replies go to the harness's provider when the leader has --provider"
            self.model.add(*[reply_of(r) for r in replies])
        self.turns[turn_id] = self._start(turn_id, prompt, tools, requires)
        return {"turn_id": turn_id}

    def op_run_many(
        self,
        prefix: str,
        count: int,
        prompt: str,
        tools: list[str] = [],  # noqa: B006 - read only
        requires: dict[str, Any] | None = None,
        timeout: float = 300,
    ) -> dict[str, Any]:
        """Start ``count`` turns at once, wait for every one; how long it took, and each one's end."""
        started = time.perf_counter()
        handles = [self._start(f"{prefix}{i}", prompt, tools, requires) for i in range(count)]
        ends = {h.turn_id: h.result(timeout, final=True).finish_reason for h in handles}
        kinds = {h.turn_id: [e.kind for e in h.all_events] for h in handles}
        took = time.perf_counter() - started
        hosts = {h.turn_id: getattr(h, "host", None) for h in handles}
        return {"seconds": took, "finish": ends, "hosts": hosts, "kinds": kinds}

    def op_flood(
        self, turns: list[list[Any]], requires: dict[str, Any] | None = None, timeout: float = 300
    ) -> dict[str, Any]:
        """Start each of ``turns`` (``[prompt, tenant, priority]``), one after the other, in
        order (``run()`` waits for an answer only when the host may queue or refuse; ``timeout``:
        the harness's wait); the handles kept by prompt. Which were refused (``Overloaded``),
        the first refusal's words, the slowest refusal, and each accepted turn's status."""
        refused: list[str] = []
        words, slowest = "", 0.0
        for prompt, tenant, priority in turns:
            t0 = time.perf_counter()
            try:
                self.turns[prompt] = self.rt.run(prompt, tenant=tenant, priority=priority, requires=requires)
            except Overloaded as exc:
                slowest = max(slowest, time.perf_counter() - t0)
                refused.append(prompt)
                words = words or str(exc)
        statuses = {p: self.turns[p].status for p, _, _ in turns if p not in refused}
        return {"refused": refused, "words": words, "slowest": slowest, "statuses": statuses}

    def op_finishes(self, prompts: list[str], timeout: float = 120) -> dict[str, Any]:
        """Each turn's finish reason, waited for (the turns ``flood`` started)."""
        return {p: self.turns[p].result(timeout, final=True).finish_reason for p in prompts}

    def op_start_many(
        self, prefix: str, count: int, prompt: str, tools: list[str], requires: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Start ``count`` turns at once, without waiting for them (``op_run`` each)."""
        for i in range(count):
            self.turns[f"{prefix}{i}"] = self._start(f"{prefix}{i}", prompt, tools, requires)
        return {"started": count}

    def op_attach(self, turn_id: str, since: int = 0, timeout: float = 30) -> dict[str, Any]:
        self.turns[turn_id] = self.rt.attach(turn_id, since, timeout)
        return {"turn_id": turn_id}

    def op_host(self, turn_id: str) -> dict[str, Any]:
        return {"host": self.turns[turn_id].host}

    def op_wait_event(self, turn_id: str, kind: str, timeout: float = 60) -> dict[str, Any]:
        handle = self.turns[turn_id]
        event = handle.wait_for(lambda e: e.kind == kind, timeout=timeout)
        at = handle.received_at(event.seq)  # time.monotonic(): the same clock in every process here
        return {"event": event_json(event), "data": getattr(event, "data", None), "at": at}

    def op_wait_progress(self, turn_id: str, timeout: float = 30) -> dict[str, Any]:
        return {"data": self.op_wait_event(turn_id, "tool_progress", timeout)["data"]}

    def op_events(self, turn_id: str) -> dict[str, Any]:
        return {"events": [event_json(e) for e in self.turns[turn_id].all_events]}

    def op_errors(self, turn_id: str) -> dict[str, Any]:
        """The turn's ``Error`` events: type, message and detail of each."""
        errors = [e for e in self.turns[turn_id].all_events if isinstance(e, Error)]
        return {"errors": [[e.error_type, e.message, e.detail] for e in errors]}

    def op_stop(self, turn_id: str, reason: str = "stop") -> dict[str, Any]:
        """By turn id, through the runtime's routing, as any caller would."""
        reply = self.rt.control(StopTurn(turn_id=turn_id, reason=reason))
        return {"ok": reply.ok, "code": reply.code, "message": reply.message}

    def op_approve(self, turn_id: str, call_id: str, approved: bool = True) -> dict[str, Any]:
        handle = self.turns[turn_id]
        (handle.approve if approved else handle.deny)(call_id)
        return {"ok": True}

    def op_result(self, turn_id: str, timeout: float = 60) -> dict[str, Any]:
        handle = self.turns[turn_id]
        result = handle.result(timeout, final=True)
        finishes = [e for e in handle.all_events if isinstance(e, Finish)]
        return {
            "finish_reason": result.finish_reason,
            "messages": [m.model_dump(mode="json") for m in result.messages],
            "events": [event_json(e) for e in handle.all_events],
            "terminal": [f.terminal for f in finishes],
        }


def main() -> None:
    args = parse(sys.argv[1:])
    leader = Leader(args)
    ready = {"ready": True, "sid": leader.rt.admin_sid, "netns": os.readlink("/proc/self/ns/net"), "pid": os.getpid()}
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        try:
            out = leader.handle(cmd)
        except Exception as exc:  # reported to the test, which fails with it
            out = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out), flush=True)
    leader.close()


if __name__ == "__main__":
    main()
