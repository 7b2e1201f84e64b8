"""Small helpers for reading turns in tests."""

from __future__ import annotations

import json
import time
from typing import Any

from actors.lifecycle.processes import alive
from messages import Finish, TextDelta, ToolFinished, TurnEvent


def summary(events: list[TurnEvent]) -> list[tuple[Any, ...]]:
    """Events as short tuples, consecutive text deltas merged (their batching varies)."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        if isinstance(e, TextDelta):
            if out and out[-1][0] == "text":
                out[-1] = ("text", out[-1][1] + e.text)
            else:
                out.append(("text", e.text))
        elif e.kind in ("tool_call_started", "tool_approval_request", "tool_progress"):
            out.append((e.kind, e.call_id))  # type: ignore[attr-defined]
        elif isinstance(e, ToolFinished):
            out.append((e.kind, e.call_id, e.outcome))
        elif isinstance(e, Finish):
            out.append((e.kind, e.finish_reason))
        elif e.kind == "error":
            out.append((e.kind, e.error_type, e.message))  # type: ignore[attr-defined]
        elif e.kind == "rate_limited":
            out.append((e.kind, e.reason))  # type: ignore[attr-defined]
        else:
            out.append((e.kind,))
    return out


def ok(data: Any) -> str:
    return json.dumps({"ok": True, "data": data})


def err(message: str) -> str:
    return json.dumps({"ok": False, "error": message, "data": None})


def assert_seq(events: list[TurnEvent]) -> None:
    """Events are numbered 0, 1, 2, ... and exactly one terminal Finish ends them."""
    assert [e.seq for e in events] == list(range(len(events)))
    finishes = [i for i, e in enumerate(events) if isinstance(e, Finish) and e.terminal]
    assert finishes == [len(events) - 1]


def wait_until(predicate: Any, timeout: float = 30.0) -> bool:
    """Poll a condition that has no event to wait on (a process table, a file) until it
    holds or ``timeout`` passes; return whether it holds. The default is generous (the
    machine may be loaded): it bounds a failing test, it is not a claim about speed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())


def pid_alive(pid: int) -> bool:
    """True until ``pid`` has exited completely."""
    return alive(pid)
