"""Spawn and round trips: a ToolActor spawned (and answering its first message), an
actor-to-actor round trip and an external ask round trip, beside the floor, a raw loopback
socket ping-pong, all measured in the same run.

    python bench/spawn.py [--n 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from thespian.actors import ActorExitRequest, ActorTypeDispatcher  # noqa: E402

from actors import Runtime, ToolActor  # noqa: E402
from actors.scripted_provider import ScriptedProvider  # noqa: E402
from actors.tools import tool_specs  # noqa: E402
from bench.common import against_floor, save, table  # noqa: E402
from bench.stop_latency import ping_pong  # noqa: E402
from bench.turn_overhead import lookup  # noqa: E402
from messages import RunTool, ToolCall, ToolResult  # noqa: E402


class Echo(ActorTypeDispatcher):
    def receiveMsg_str(self, msg: str, sender: Any) -> None:
        self.send(sender, msg)


class Prober(ActorTypeDispatcher):
    """Measures from inside an actor: spawn a ToolActor and run one call; echo round trips."""

    def receiveMsg_tuple(self, msg: tuple, sender: Any) -> None:
        what, n, echo = msg
        self.boss, self.what, self.n, self.echo, self.times = sender, what, n, echo, []
        self._next()

    def _next(self) -> None:
        if len(self.times) == self.n:
            return self.send(self.boss, self.times)
        self.t0 = time.perf_counter()
        if self.what == "spawn":
            spec = tool_specs([lookup])[0]
            child = self.createActor(ToolActor)
            self.send(
                child,
                RunTool(
                    turn_id="t",
                    root_turn_id="t",
                    call=ToolCall(id="c", name="lookup", arguments="{}"),
                    spec=spec,
                    arguments={"key": "k"},
                    idempotency_key="t:c",
                ),
            )
        else:
            self.send(self.echo, "ping")

    def receiveMsg_ToolResult(self, msg: ToolResult, sender: Any) -> None:
        self.times.append(time.perf_counter() - self.t0)
        self.send(sender, ActorExitRequest())
        self._next()

    def receiveMsg_str(self, msg: str, sender: Any) -> None:
        self.times.append(time.perf_counter() - self.t0)
        self._next()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    floor = ping_pong(args.n * 5)
    with ScriptedProvider() as provider, Runtime(provider.provider()) as rt:
        asys = rt.actor_system
        echo, prober = asys.createActor(Echo), asys.createActor(Prober)
        spawn = asys.ask(prober, ("spawn", args.n, echo), 300)
        actor_rt = asys.ask(prober, ("echo", args.n, echo), 300)
        external = []
        for _ in range(args.n):
            t0 = time.perf_counter()
            asys.ask(echo, "x", 10)
            external.append(time.perf_counter() - t0)
    rows, results = against_floor(
        [
            ("ToolActor spawn -> first call answered", spawn),
            ("actor -> actor round trip", actor_rt),
            ("external ask round trip", external),
            ("floor: loopback socket ping-pong", floor),
        ],
        floor,
    )
    print(f"spawn and round trips, {args.n} each")
    print(table(rows, ["", "p50 ms", "p99 ms", "x floor (p50)"]))
    print("saved", save("spawn", {"n": args.n, "results": results}))


if __name__ == "__main__":
    main()
