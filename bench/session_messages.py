"""A session's message against a bare turn: what the session's owner costs, from the call to
the model's request, on a durable store (the same turns, the same host, the same run).

One host, a SQLite store, one-round turns (a short text answer), each started when the one
before has ended:

- bare: ``runtime.run(history + [text])``, the caller carrying the history by hand;
- session: ``session.run(text)``: the decision (one transaction on the session's row, which
  first settles the turn before) and the turn's start on the session's history.

Each is measured from the call to the request arriving at the provider.

    python bench/session_messages.py [--turns 40] [--rounds 3]

Prints p50 and p99 of each and their ratio to the bare p50; saves bench/results/session_messages.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors import Runtime, TurnHandle  # noqa: E402
from actors.testing import ScriptedProvider, say  # noqa: E402
from bench.common import against_floor, save, table  # noqa: E402
from messages import ChatMessage  # noqa: E402


def bare(turns: int, store: str) -> list[float]:
    with ScriptedProvider(responder=lambda r: say("ok")) as p:
        with Runtime(p.provider(), store=store, hosts=1, tool_processes=1) as rt:
            history: list[ChatMessage] = []
            out = []
            for n in range(turns):
                t0 = time.monotonic()
                h = rt.run([*history, ChatMessage.user(f"b{n}")])
                history = h.result(60).messages
                out.append(p.requests[-1].received_at - t0)
            return out


def session(turns: int, store: str) -> list[float]:
    with ScriptedProvider(responder=lambda r: say("ok")) as p:
        with Runtime(p.provider(), store=store, hosts=1, tool_processes=1) as rt:
            chat = rt.session()
            out = []
            for n in range(turns):
                t0 = time.monotonic()
                h = chat.run(f"s{n}")
                assert isinstance(h, TurnHandle)
                h.result(60)
                out.append(p.requests[-1].received_at - t0)
            return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    b: list[float] = []
    s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as tmp:
        for r in range(args.rounds):  # interleaved, so that the machine's noise falls on both
            b += bare(args.turns, f"{tmp}/bare{r}.db")[1:]  # the first: the host warming up
            s += session(args.turns, f"{tmp}/session{r}.db")[1:]
    rows, results = against_floor([("bare: run() -> request", b), ("session: session.run() -> request", s)], b)
    print(table(rows, ["from the call", "p50 ms", "p99 ms", "x bare p50"]))
    print("saved", save("session_messages", {"turns": args.turns, "rounds": args.rounds, "results": results}))


if __name__ == "__main__":
    main()
