"""How many CPUs this process may use: the default number of TurnHosts of a node.

``os.cpu_count()`` counts the machine's CPUs; a process in a container or pinned to a few
cores may use fewer. ``usable_cpus()`` is the least of: the CPUs of the process's affinity
(``os.sched_getaffinity``), and the CPU quota of its cgroup (v2: ``cpu.max`` of its cgroup
and of each ancestor, ``quota / period`` rounded up), and never less than 1. A machine
without either (macOS, cgroup v1, no quota: ``max``) is sized from what remains.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["cgroup_quota", "usable_cpus"]


def usable_cpus(cgroup_root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> int:
    """The CPUs this process may use (see the module docstring)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cgroup_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        cpus = min(cpus, quota)
    return max(1, cpus)


def cgroup_quota(cgroup_root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> int | None:
    """The CPU quota of this process's cgroup v2 (the tightest along its path to the root),
    in whole CPUs rounded up; None when there is none, or no cgroup v2."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    path = next((line[3:] for line in lines if line.startswith("0::")), None)  # the v2 entry: "0::/path"
    if path is None:
        return None
    root = Path(cgroup_root)
    here = root / path.strip("/")
    best: int | None = None
    while True:
        limit = _cpu_max(here / "cpu.max")
        if limit is not None:
            best = limit if best is None else min(best, limit)
        if here == root or root not in here.parents:
            return best
        here = here.parent


def _cpu_max(file: Path) -> int | None:
    """``cpu.max`` (``"$MAX $PERIOD"``, ``$MAX`` being ``max`` for no limit) in whole CPUs."""
    try:
        quota, _, period = file.read_text().strip().partition(" ")
    except OSError:
        return None
    if quota == "max" or not quota.isdigit() or not period.isdigit() or int(period) == 0:
        return None
    return max(1, math.ceil(int(quota) / int(period)))
