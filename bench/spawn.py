"""A ToolActor ready for a call: from the host's RunTool to the tool's first line.

Measured from inside an actor that drives a real ``ToolPool`` as a TurnHost does:

- **pooled**: a tool process already lent to the host; the ToolActor is created in it when
  ``RunTool`` arrives (what every call of a turn takes by default);
- **fresh process**: a tool process forked for the call (``@tool(isolate=True)``, and what
  every call cost before the pool);

beside an actor -> actor round trip and a loopback socket ping-pong (the floor), measured
in the same run. The tool returns ``time.monotonic()`` at its first line, a clock shared
by every process of the machine.

    python bench/spawn.py [--n 300]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from thespian.actors import ActorExitRequest, ActorTypeDispatcher  # noqa: E402

from actors import Runtime, tool  # noqa: E402
from actors.tools.definition import tool_specs  # noqa: E402
from actors.tools.pool import ToolPool  # noqa: E402
from actors.wire.protocol import LeaseWorkers, PoolConfig, WorkerResult, WorkersLeased  # noqa: E402
from bench.common import against_floor, save, table  # noqa: E402
from bench.stop_latency import ping_pong  # noqa: E402
from messages import RunTool, ToolCall  # noqa: E402


@tool
def entered() -> float:
    """The moment the tool started."""
    return time.monotonic()


class Echo(ActorTypeDispatcher):
    def receiveMsg_str(self, msg: str, sender: Any) -> None:
        self.send(sender, msg)


class Prober(ActorTypeDispatcher):
    """Plays a TurnHost against its own ToolPool; answers its asker with the timings."""

    def receiveMsg_tuple(self, msg: tuple[str, int, Any], sender: Any) -> None:
        self.what, self.n, self.echo = msg
        self.boss, self.ready, self.total = sender, [], []
        self.spec = tool_specs([entered])[0]
        self.worker: Any = None
        if self.what == "echo":
            return self._next()
        self.pool = self.createActor(ToolPool)
        self.send(self.pool, PoolConfig(spares=2, recycle_after=0, directory=None, node="bench"))
        self.send(self.pool, LeaseWorkers(1))  # a process to warm up with, then lent for good

    def _next(self) -> None:
        if len(self.total) == self.n:
            return self.send(self.boss, (self.ready, self.total))
        self.t0 = time.monotonic()
        if self.what == "echo":
            self.send(self.echo, "ping")
        elif self.what == "fresh":
            self.send(self.pool, LeaseWorkers(1, isolate=True))
        else:
            self._run()

    def _run(self) -> None:
        call = ToolCall(id="c", name="entered", arguments="{}")
        self.send(
            self.worker,
            RunTool(turn_id="t", root_turn_id="t", call=call, spec=self.spec, arguments={}, idempotency_key="t:c"),
        )

    def receiveMsg_WorkersLeased(self, msg: WorkersLeased, sender: Any) -> None:
        first = self.worker is None
        self.worker = msg.workers[0]
        if first:  # the warm-up call: the first ToolActor imports what later ones reuse
            self.warming = True
            return self._run()
        self._run()

    def receiveMsg_WorkerResult(self, msg: WorkerResult, sender: Any) -> None:
        now = time.monotonic()
        if getattr(self, "warming", False):
            self.warming = False
            return self._next()
        self.ready.append(json.loads(msg.result.content)["data"] - self.t0)
        self.total.append(now - self.t0)
        if self.what == "fresh":
            self.send(sender, ActorExitRequest())
        self._next()

    def receiveMsg_str(self, msg: str, sender: Any) -> None:
        self.total.append(time.monotonic() - self.t0)
        self._next()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    args = parser.parse_args()
    floor = ping_pong(args.n * 5)
    with Runtime(hosts=1, tool_processes=1) as rt:
        asys = rt.actor_system
        echo = asys.createActor(Echo)
        _, actor_rt = asys.ask(asys.createActor(Prober), ("echo", args.n, echo), 300)
        pooled_ready, pooled_total = asys.ask(asys.createActor(Prober), ("pooled", args.n, echo), 300)
        fresh_ready, fresh_total = asys.ask(asys.createActor(Prober), ("fresh", max(20, args.n // 5), echo), 600)
    rows, results = against_floor(
        [
            ("pooled: RunTool -> tool's first line", pooled_ready),
            ("pooled: RunTool -> result back", pooled_total),
            ("fresh process: lease -> tool's first line", fresh_ready),
            ("fresh process: lease -> result back", fresh_total),
            ("actor -> actor round trip", actor_rt),
            ("floor: loopback socket ping-pong", floor),
        ],
        floor,
    )
    print(f"a ToolActor ready for a call, {args.n} calls pooled, {len(fresh_total)} in fresh processes")
    print(table(rows, ["", "p50 ms", "p99 ms", "x floor (p50)"]))
    print("saved", save("spawn", {"n": args.n, "results": results}))


if __name__ == "__main__":
    main()
