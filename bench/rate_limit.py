"""A provider's rate limit: how close the requests that reach the provider keep to it, shared by
two host processes on one store, against the same two hosts without a store (each counts alone).

One Runtime, ``hosts=2``, one-round turns (a short text), all started at once, placed on both
hosts. The provider (the scripted one, on 127.0.0.1) records when each request arrived. Two
ratios to the limit, each from those times:

- worst window: the most requests in any window of the limit's length (a sliding window that
  starts at each request), divided by the limit: at most 1.00 means the limit held;
- used: the requests of each whole fixed window after the first (the first holds the burst
  the limit allows at once), on average, divided by the limit: how much of the limit the
  hosts used.

Cases: ``store`` (a SQLite file beside the run: both hosts hold one count in its
``rate_limits`` row), ``postgres`` with ``--postgres`` (a throwaway server on 127.0.0.1),
``per process`` (no store: each host process its own count, so up to twice the limit).
``RateLimit(requests_per_minute=LIMIT, window=WINDOW)``: the rules of a minute, on a window of
a few seconds (the same code).

    python bench/rate_limit.py [--limit 30] [--window 3] [--windows 5] [--postgres]

Saves bench/results/rate_limit.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors import RateLimit, Runtime  # noqa: E402
from actors.placement import rendezvous  # noqa: E402
from actors.testing import ScriptedProvider, say  # noqa: E402
from bench.common import save, table  # noqa: E402


def worst_window(times: list[float], window: float) -> int:
    times = sorted(times)
    return max(sum(1 for t in times[i:] if t < start + window) for i, start in enumerate(times))


def used(times: list[float], window: float) -> list[int]:
    """The requests of each whole fixed window after the first, from the first request on."""
    start, end = min(times), max(times)
    whole = int((end - start) // window)
    return [sum(1 for t in times if start + k * window <= t < start + (k + 1) * window) for k in range(1, whole)]


def one(limit: RateLimit, turns: int, store: str | None) -> list[float]:
    with ScriptedProvider(responder=lambda r: say("ok")) as p:
        with Runtime(p.provider(rate_limit=limit), hosts=2, tool_processes=1, store=store) as rt:
            hosts = rt.placeable()
            ids, n = [], 0
            while len(ids) < turns:  # half on each host
                n += 1
                if rendezvous(f"r{n}", hosts) == hosts[len(ids) % 2]:
                    ids.append(f"r{n}")
            handles = [rt.run("go", turn_id=tid) for tid in ids]
            for h in handles:
                assert h.result(60 + 4 * turns * limit.window / (limit.requests_per_minute or 1)).text == "ok"
            return [r.received_at for r in p.requests]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=30, help="requests per window")
    ap.add_argument("--window", type=float, default=3.0, help="seconds")
    ap.add_argument("--windows", type=int, default=5, help="turns: this many windows' worth")
    ap.add_argument("--postgres", action="store_true", help="also on a throwaway PostgreSQL on 127.0.0.1")
    args = ap.parse_args()
    limit = RateLimit(requests_per_minute=args.limit, window=args.window)
    turns = args.limit * args.windows
    rows: list[list[Any]] = []
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cases: list[tuple[str, str | None]] = [("store (SQLite)", f"{tmp}/turns.db"), ("per process", None)]
        pg = None
        if args.postgres:
            from actors.testing.postgres import ThrowawayPostgres

            pg = ThrowawayPostgres().__enter__()
            cases.insert(1, ("store (PostgreSQL)", pg.url()))
        try:
            for label, store in cases:
                times = one(limit, turns, store)
                worst, per = worst_window(times, args.window), used(times, args.window)
                mean = sum(per) / len(per) if per else float("nan")
                results[label] = {"requests": len(times), "worst_window": worst, "used_per_window": per}
                rows.append([label, len(times), worst, worst / args.limit, mean / args.limit])
        finally:
            if pg is not None:
                pg.__exit__(None, None, None)
    print(f"RateLimit(requests_per_minute={args.limit}, window={args.window:g}), 2 hosts, {turns} turns")
    print(table(rows, ["case", "requests", "worst window", "worst / limit", "used / limit"]))
    print("saved", save("rate_limit", {"limit": args.limit, "window": args.window, "turns": turns, "results": results}))


if __name__ == "__main__":
    main()
