"""Tools the fault-injection suite offers to turns. Module level, so tool processes import them by path.

Every tool here that has a side effect appends its call's idempotency key to a file, one
line per run, so a harness can count how often a call really ran: a key written twice by
a tool that is not ``retry_safe`` is a duplicate side effect. Every tool that a harness may
want to kill reports ``{"worker": os.getpid()}`` (the process it runs in) as progress first.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from actors import ToolContext, tool


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _record(path: str) -> str:
    """Append this call's idempotency key to ``path``; return the key."""
    key = ToolContext.current().idempotency_key
    _append(path, key)
    return key


@tool
def effect(path: str, seconds: float = 0.0) -> str:
    """Record this call's key in ``path`` (a side effect), then work ``seconds`` without looking at the stop flag.

    Args:
        path: The file that collects idempotency keys.
        seconds: How long the call blocks after its side effect.
    """
    ctx = ToolContext.current()
    key = _record(path)
    ctx.report_progress({"worker": os.getpid()})
    time.sleep(seconds)  # the tool's own blocking work: it ignores its stop flag on purpose
    return f"recorded {key}"


@tool(requires_approval=True)
def gated_effect(path: str) -> str:
    """Record this call's key in ``path``; every call needs a human decision first.

    Args:
        path: The file that collects idempotency keys.
    """
    ToolContext.current().report_progress({"worker": os.getpid()})
    return f"recorded {_record(path)}"


@tool
def block(seconds: float) -> str:
    """Block for ``seconds`` in a plain sleep, deaf to stop and cancel (its process is the only way out).

    Args:
        seconds: How long to block.
    """
    ToolContext.current().report_progress({"worker": os.getpid()})
    time.sleep(seconds)  # the tool's own blocking work
    return f"blocked {seconds:g} s"


@tool
def echo(text: str) -> dict[str, Any]:
    """Return ``text`` as it arrived, with its length.

    Args:
        text: Any text.
    """
    return {"text": text, "length": len(text)}


def _held(path: str) -> bool:
    """A durable scenario holds its side-effect tool while the file ``<path>.hold`` exists."""
    return os.path.exists(path + ".hold")


def _record_and_hold(path: str) -> str:
    ctx = ToolContext.current()
    key = _record(path)
    if _held(path):
        ctx.report_progress({"worker": os.getpid(), "recorded": key})
        released = threading.Event()
        while _held(path) and not released.wait(0.05):  # polling a file: nothing to wait on
            ctx.cancellation.throw_if_requested()
    return f"recorded {key} on attempt {ctx.attempt}"


@tool
def held_effect(path: str) -> str:
    """Record this call's key in ``path``, then wait while ``<path>.hold`` exists (its owner is killed there).

    Args:
        path: The file that collects idempotency keys.
    """
    return _record_and_hold(path)


@tool(retry_safe=True)
def held_effect_safely(path: str) -> str:
    """``held_effect``, declared safe to run again with the same idempotency key.

    Args:
        path: The file that collects idempotency keys.
    """
    return _record_and_hold(path)


@tool(requires_approval=True)
def gated_held_effect(path: str) -> str:
    """``held_effect`` behind a human decision.

    Args:
        path: The file that collects idempotency keys.
    """
    return _record_and_hold(path)
