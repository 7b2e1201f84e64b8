"""Tools for the reproductions of issue 23. Module level, so tool processes import them by path."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

from actors import ToolContext, tool


@tool(inline=True)
async def progress_burst(count: int) -> int:
    """Report ``count`` progress events from the host's event loop (an event each), then return."""
    ctx = ToolContext.current()
    for i in range(count):
        ctx.report_progress(i)
    return count


@tool
def huge_result(mib: int) -> str:
    """A result of ``mib`` MiB of text."""
    return "x" * (mib << 20)


@tool
def child_and_blocking_on_stop(seconds: float) -> str:
    """Start a child process, register an ``on_stop`` callback that blocks ``seconds`` (a slow
    cleanup), report the child's pid, then wait to be stopped."""
    ctx = ToolContext.current()
    child = subprocess.Popen(["sleep", "300"])
    ctx.cancellation.on_stop(lambda: time.sleep(seconds))  # the callback's own slow work
    ctx.report_progress({"child": child.pid})
    threading.Event().wait(300)
    return "never"


@tool(inline=True)
async def inline_blocking_on_stop(seconds: float) -> str:
    """On the host's loop: register an ``on_stop`` callback that blocks ``seconds``, then wait."""
    ctx = ToolContext.current()
    ctx.cancellation.on_stop(lambda: time.sleep(seconds))  # the callback's own slow work
    ctx.report_progress("registered")
    await asyncio.sleep(300)
    return "never"


@tool(inline=True)
async def inline_exit_on_stop() -> str:
    """On the host's loop: register an ``on_stop`` callback that raises ``SystemExit``, then wait."""
    ctx = ToolContext.current()
    ctx.cancellation.on_stop(lambda: sys.exit("the callback gave up"))
    ctx.report_progress("registered")
    await asyncio.sleep(300)
    return "never"


@tool(requires_approval=True)
def gated_wait(path: str) -> str:
    """Needs approval; once running, reports progress and returns when ``path`` exists."""
    ToolContext.current().report_progress({"pid": os.getpid()})
    while not os.path.exists(path):
        time.sleep(0.01)  # the test has not released the call yet
    return "released"
