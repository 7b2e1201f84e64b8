"""Admission: from a freed slot to the next queued turn's start, against a caller that starts
each turn when the one before has finished (the same turns, the same host, the same run).

One host, one-round turns (a short text answer). Each gap is measured at the provider: from
the last text part written for turn k to the request of turn k+1 arriving.

- queued: ``max_running=1``; every turn is started at once, all but the first wait in the
  host's queue; turn k's end frees the slot and the host starts turn k+1 itself;
- caller: no limit; the caller starts turn k+1 when ``result()`` of turn k returns (what a
  caller does without admission);
- fresh: from ``run()`` to the request arriving, with a free slot (for scale).

    python bench/admission.py [--turns 60] [--rounds 3]

Prints p50 and p99 of each and their ratio to the caller's p50; saves bench/results/admission.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors import Runtime  # noqa: E402
from actors.testing import Request, ScriptedProvider, say  # noqa: E402
from bench.common import against_floor, save, table  # noqa: E402


def _gaps(requests: list[Request]) -> list[float]:
    ordered = sorted(requests, key=lambda r: r.received_at)
    return [b.received_at - a.written[-1][1] for a, b in zip(ordered, ordered[1:]) if a.written]


def queued(turns: int) -> list[float]:
    with ScriptedProvider(responder=lambda r: say("ok")) as p:
        with Runtime(p.provider(), hosts=1, tool_processes=1, max_running=1, max_queued=turns) as rt:
            handles = [rt.run(f"q{n}") for n in range(turns)]
            for h in handles:
                h.result(60)
            return _gaps(p.requests)


def caller(turns: int) -> tuple[list[float], list[float]]:
    with ScriptedProvider(responder=lambda r: say("ok")) as p:
        with Runtime(p.provider(), hosts=1, tool_processes=1) as rt:
            fresh = []
            for n in range(turns):
                t0 = time.monotonic()
                h = rt.run(f"c{n}")
                h.result(60)
                fresh.append(p.requests[-1].received_at - t0)
            return _gaps(p.requests), fresh


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    q: list[float] = []
    c: list[float] = []
    f: list[float] = []
    for _ in range(args.rounds):  # interleaved, so that the machine's noise falls on both
        q += queued(args.turns)[1:]  # the first gap: the host warming up
        gaps, fresh = caller(args.turns)
        c += gaps[1:]
        f += fresh[1:]
    rows, results = against_floor([("queued: slot freed -> next start", q), ("caller: end -> next start", c),
                                   ("fresh: run() -> start", f)], c)  # fmt: skip
    print(table(rows, ["gap", "p50 ms", "p99 ms", "x caller p50"]))
    print("saved", save("admission", {"turns": args.turns, "rounds": args.rounds, "results": results}))


if __name__ == "__main__":
    main()
