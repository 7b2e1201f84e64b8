"""Durable mode: what a store costs a turn, in time and in bytes written, against no store.

Three Runtimes in turn (one host each): without a store (the baseline, measured in the same
run), on a SQLite file, and on a throwaway PostgreSQL server (when its binaries are here).

- **Time**: ``--turns`` two-round turns (a tool call, then an answer of 50 deltas), one after
  the other; the median turn, and its ratio to the baseline's.
- **Bytes**: one streamed answer of 1,000 and of 4,000 deltas (5 characters each). On
  SQLite, the bytes the tree's processes passed to ``write`` (``/proc/PID/io`` ``wchar``)
  beyond what the same turn costs without a store; on PostgreSQL, the WAL the server wrote
  (``pg_current_wal_lsn``). Per delta, per turn, and the ratio of the two lengths (4.0 is
  linear).

    python bench/durable.py [--turns 30] [--no-postgres]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors import Runtime  # noqa: E402
from actors.lifecycle.processes import descendants, session_processes  # noqa: E402
from actors.testing import Reply, ScriptedProvider, Text, call, use_tools  # noqa: E402
from actors.testing.postgres import ThrowawayPostgres, binaries  # noqa: E402
from bench.common import save, table  # noqa: E402
from messages import RetryPolicy  # noqa: E402
from tests import tools_for_tests as T  # noqa: E402

LENGTHS = (1000, 4000)


def answer(deltas: int) -> Reply:
    return Reply(parts=tuple(Text(f"w{i % 1000:03d} ") for i in range(deltas)), usage=None)


def wchar(rt: Runtime) -> int:
    """Bytes every process of the runtime's tree has passed to write-like calls so far."""
    pids = set(session_processes(rt.admin_sid)) if rt.admin_sid is not None else set()
    for pid in list(pids):
        pids.update(descendants(pid))
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/io") as io:
                total += next(int(line.split()[1]) for line in io if line.startswith("wchar:"))
        except (OSError, StopIteration):
            continue
    return total


def wal_position(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')").fetchone()
    return int(row[0]) if row else 0


@contextmanager
def runtime(provider: ScriptedProvider, store: str | None) -> Iterator[Runtime]:
    with Runtime(provider.provider(retry=RetryPolicy(max_attempts=1)), store=store, hosts=1, tool_processes=1) as rt:
        rt.run("warm up").result(60)  # the host's first turn pays its imports
        yield rt


def two_round_times(provider: ScriptedProvider, rt: Runtime, turns: int) -> list[float]:
    times = []
    for _ in range(turns):
        provider.add(use_tools(call("add", {"a": 2, "b": 3})), answer(50))
        t0 = time.monotonic()
        assert rt.run("add them", tools=[T.add]).result(60).finish_reason == "stop"
        times.append(time.monotonic() - t0)
    return times


def bytes_for(provider: ScriptedProvider, rt: Runtime, deltas: int, measure: Callable[[], int]) -> int:
    provider.add(answer(deltas))
    before = measure()
    result = rt.run("say a lot").result(120)
    assert result.finish_reason == "stop" and result.text.count("w") == deltas
    time.sleep(0.5)  # the tree's last writes (a linger, a lease) land in the figure of this turn only
    return measure() - before


FLUSH = 11.0  # seconds: an idle PostgreSQL backend reports its statistics within 10 s


def server_counts(url: str) -> tuple[int, int]:
    """The database's committed transactions so far, and the connections open to it (this one aside)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit, (SELECT count(*) - 1 FROM pg_stat_activity WHERE datname = current_database())"
            " FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def mode(provider: ScriptedProvider, store: str | None, turns: int, url: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with runtime(provider, store) as rt:
        if url is not None:  # the host's lease ticks alone, for as long a time as the turns take below
            time.sleep(FLUSH)
            before, quiet_from = server_counts(url), time.monotonic()
            time.sleep(FLUSH)
            idle, quiet = server_counts(url), time.monotonic() - quiet_from
        times = two_round_times(provider, rt, turns)
        if url is not None:
            busy = sum(times)
            time.sleep(FLUSH)
            after, busy = server_counts(url), busy + FLUSH
            ticks = (idle[0] - before[0]) / quiet * busy  # over the turns and the flush wait
            out["transactions_per_turn"] = (after[0] - idle[0] - ticks) / turns
            out["connections"] = after[1]  # one host and the Runtime
        measure = (lambda: wal_position(url)) if url is not None else (lambda: wchar(rt))
        written = {n: bytes_for(provider, rt, n, measure) for n in LENGTHS}
    return {"p50_s": statistics.median(times), "times": times, "bytes": written, **out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with ScriptedProvider() as provider, tempfile.TemporaryDirectory(prefix="durable-") as tmp:
        results["none"] = mode(provider, None, args.turns, None)
        results["sqlite"] = mode(provider, str(Path(tmp) / "turns.db"), args.turns, None)
        if not args.no_postgres and binaries() is not None:
            with ThrowawayPostgres() as pg:
                results["postgres"] = mode(provider, pg.url(), args.turns, pg.url())
    base = results["none"]
    rows = []
    for name, r in results.items():
        extra = {n: r["bytes"][n] - (base["bytes"][n] if name == "sqlite" else 0) for n in LENGTHS}
        per_delta = extra[LENGTHS[-1]] / LENGTHS[-1]
        linear = extra[LENGTHS[-1]] / extra[LENGTHS[0]] if extra[LENGTHS[0]] > 0 else float("nan")
        r["extra_bytes"], r["bytes_per_delta"], r["linear_ratio"] = extra, per_delta, linear
        r["x_none"] = r["p50_s"] / base["p50_s"]
        rows.append(
            [name, r["p50_s"] * 1000, r["x_none"]]
            + ([per_delta, extra[LENGTHS[-1]] / 1024, linear] if name != "none" else ["", "", ""])
        )
    header = ["store", "two-round turn p50 ms", "x no store", "bytes / delta", "KiB / 4,000-delta turn", "4,000 / 1,000"]
    print(table(rows, header))
    print("bytes: SQLite = wchar of the tree beyond the same turn without a store; PostgreSQL = WAL written")
    if "postgres" in results:
        pg = results["postgres"]
        print(f"PostgreSQL: {pg['transactions_per_turn']:.1f} transactions per two-round turn (xact_commit, net of"
              f" the lease ticks); {pg['connections']} connections open with one host")
    save("durable", {"turns": args.turns, "lengths": LENGTHS, "results": results})


if __name__ == "__main__":
    main()
