"""Run every benchmark in turn (``make bench``); each prints its table and saves JSON under
bench/results/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [
    "spawn.py",
    "turn_overhead.py",
    "stop_latency.py",
    "steer_latency.py",
    "streaming.py",
    "scale.py",
    "approval_window.py",
    "transport.py",
    "async_stall.py",
    "held_events.py",
    "close_cycles.py",
    "mcp_guard.py",
    "admission.py",
]

if __name__ == "__main__":
    failed = []
    for name in BENCHES:
        print(f"\n=== {name}", flush=True)
        if subprocess.run(
            [sys.executable, str(HERE / name), *sys.argv[1:]]
            if name == "scale.py"
            else [sys.executable, str(HERE / name)]
        ).returncode:
            failed.append(name)
    sys.exit(1 if failed else 0)
