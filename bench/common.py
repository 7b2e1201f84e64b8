"""Shared helpers for the benchmark scripts: statistics, tables, JSON results, the machine."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def summary_ms(values_s: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values_s]
    return {"n": len(ms), "p50_ms": statistics.median(ms), "p99_ms": pct(ms, 99), "mean_ms": statistics.fmean(ms)}


def machine() -> dict[str, Any]:
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) // 1024
    except OSError:
        pass
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "mem_mib": mem,
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def against_floor(series: list[tuple[str, list[float]]], floor: list[float]) -> tuple[list[list[Any]], dict[str, Any]]:
    """Table rows ``[label, p50 ms, p99 ms, p50 / floor p50]`` and their summaries by label."""
    base = summary_ms(floor)["p50_ms"]
    rows, results = [], {}
    for label, values in series:
        s = summary_ms(values)
        results[label] = s
        rows.append([label, s["p50_ms"], s["p99_ms"], s["p50_ms"] / base])
    return rows, results


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[f"{c:.2f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def save(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    data = {"bench": name, "at": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine(), **data}
    path.write_text(json.dumps(data, indent=2))
    return path
