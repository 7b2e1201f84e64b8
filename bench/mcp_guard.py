"""The cost of starting an MCP stdio server through the guard that ties it to its host
(``processes.dies_with_parent``: one extra ``python -I -S`` start before the exec), against
starting the same program directly, in the same run.

    python bench/mcp_guard.py [--n 100]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.lifecycle.processes import dies_with_parent  # noqa: E402
from bench.common import against_floor, save, summary_ms, table  # noqa: E402


def starts(command: list[str], n: int) -> list[float]:
    """Seconds from start to exit of ``command``, ``n`` times."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(command, check=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100)
    args = parser.parse_args()
    program = shutil.which("true") or "/bin/true"
    starts([program], 10)  # warm up
    plain = starts([program], args.n)
    guarded = starts(dies_with_parent([program]), args.n)
    rows, results = against_floor([("through the guard", guarded)], plain)
    base = summary_ms(plain)
    rows.insert(0, ["directly (baseline)", base["p50_ms"], base["p99_ms"], 1.0])
    print(f"starting `true` and waiting for it to exit, {args.n} times each")
    print(table(rows, ["", "p50 ms", "p99 ms", "x baseline (p50)"]))
    print("saved", save("mcp_guard", {"n": args.n, "directly": base, **results}))


if __name__ == "__main__":
    main()
