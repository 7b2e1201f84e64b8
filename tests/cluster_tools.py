"""Tools for the multi-node tests and bench/cluster.py. Module level, so every node imports them by path."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from actors import ToolContext, tool


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


@tool
def side_effect(path: str) -> str:
    """A call that is not safe to run twice: append this call's idempotency key to ``path``
    (the side effect: one line per run), report where it runs, then wait until the file
    ``path``.release exists (it returns) or the call is stopped (an on_stop callback appends
    the key to ``path``.stopped)."""
    ctx = ToolContext.current()
    stopped = threading.Event()

    def on_stop() -> None:
        _append(path + ".stopped", ctx.idempotency_key)
        stopped.set()

    ctx.cancellation.on_stop(on_stop)
    _append(path, ctx.idempotency_key)
    ctx.report_progress({"pid": os.getpid(), "netns": os.readlink("/proc/self/ns/net")})
    release = Path(path + ".release")
    while not release.exists():
        if stopped.wait(0.05):  # polling a file another process creates: there is nothing to block on
            return "stopped"
    return "released"


@tool
def side_effect_timed(path: str) -> str:
    """``side_effect``, saying when: the run appends ``KEY START_TIME`` to ``path``, its
    on_stop callback ``KEY TIME`` to ``path``.stopped, and its end ``KEY TIME`` to
    ``path``.ended just before it returns (``time.time()``)."""
    ctx = ToolContext.current()
    stopped = threading.Event()

    def on_stop() -> None:
        _append(path + ".stopped", f"{ctx.idempotency_key} {time.time()!r}")
        stopped.set()

    ctx.cancellation.on_stop(on_stop)
    _append(path, f"{ctx.idempotency_key} {time.time()!r}")
    ctx.report_progress({"pid": os.getpid(), "netns": os.readlink("/proc/self/ns/net")})
    release = Path(path + ".release")
    while not release.exists() and not stopped.wait(0.05):
        pass
    _append(path + ".ended", f"{ctx.idempotency_key} {time.time()!r}")
    return "stopped" if stopped.is_set() else "released"


@tool(requires={"tools": True})
def placed_lookup(key: str) -> dict[str, Any]:
    """Look a key up on a node that advertises ``tools``; say where it ran."""
    return {"key": key, "value": len(key), "netns": os.readlink("/proc/self/ns/net")}


@tool
def lookup(key: str) -> dict[str, Any]:
    """Look a key up wherever the turn runs; say where it ran."""
    return {"key": key, "value": len(key), "netns": os.readlink("/proc/self/ns/net"), "at": time.time()}
