"""Open, run one turn, close: N cycles. How long ``close()`` takes, at most, and what is left.

Each cycle starts a Runtime (its own actor system), runs a two-round turn to its end,
leaves the ``with`` block, and checks that no process of the runtime's session is left.
The baseline, measured in the same run, is starting and ending a bare Python interpreter
(``python -c pass``), the least a process tree can cost.

    python bench/close_cycles.py [--cycles 200]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors import Runtime  # noqa: E402
from actors.lifecycle.processes import session_processes  # noqa: E402
from actors.testing import ScriptedProvider  # noqa: E402
from bench.common import save, summary_ms, table  # noqa: E402
from bench.turn_overhead import lookup, responder  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles", type=int, default=200)
    args = parser.parse_args()
    base = []
    for _ in range(20):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        base.append(time.perf_counter() - t0)
    opens, closes, left = [], [], 0
    with ScriptedProvider(responder=responder) as provider:
        for _ in range(args.cycles):
            t0 = time.perf_counter()
            rt = Runtime(provider.provider()).start()
            t1 = time.perf_counter()
            try:
                assert rt.run("look alpha up", tools=[lookup]).result(30).finish_reason == "stop"
            finally:
                t2 = time.perf_counter()
                rt.close()
                t3 = time.perf_counter()
            opens.append(t1 - t0)
            closes.append(t3 - t2)
            left += len(session_processes(rt.admin_sid or 0))
    b, o, c = summary_ms(base), summary_ms(opens), summary_ms(closes)
    rows = [
        ["baseline: start and end python -c pass", b["p50_ms"], b["p99_ms"], max(base) * 1000, 1.0],
        [
            "Runtime start (admin, directory, hosts, pool)",
            o["p50_ms"],
            o["p99_ms"],
            max(opens) * 1000,
            o["p50_ms"] / b["p50_ms"],
        ],
        ["Runtime close, after one turn", c["p50_ms"], c["p99_ms"], max(closes) * 1000, c["p50_ms"] / b["p50_ms"]],
    ]
    print(f"{args.cycles} cycles of open, run one turn, close")
    print(table(rows, ["", "p50 ms", "p99 ms", "max ms", "x baseline (p50)"]))
    print(f"processes left after close, all cycles: {left}")
    save(
        "close_cycles",
        {"cycles": args.cycles, "baseline": b, "open": o, "close": c, "max_close_ms": max(closes) * 1000, "left": left},
    )


if __name__ == "__main__":
    main()
