"""The numbers the metrics report (``telemetry.metrics``), computed from what the console sees.

Named as the metrics are: ``greenroom.turns.live``, ``greenroom.turns.waiting`` and the
age of the oldest wait, ``gen_ai.client.token.usage`` (summed over the turns' final usage),
``gen_ai.execute_tool.duration`` (count and mean per tool and outcome),
``greenroom.turn.interruptions`` (stops and cancels by cause). Counts over the turns listed;
tokens, calls and interruptions over the ``RECENT`` most recent turns (their events are read).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from messages import Error, Finish, ToolCallStarted, ToolFinished

from .timeline import Timed

__all__ = ["RECENT", "numbers"]

RECENT = 100


def numbers(rows: Sequence[dict[str, Any]], events_of: Callable[[str], list[Timed]], now: float) -> dict[str, Any]:
    """See the module docstring; ``events_of(turn_id)`` reads a turn's events."""
    live = [r for r in rows if r["status"] in ("running", "awaiting_approval", "paused")]
    waiting = [r["waiting_since"] for r in rows if r["status"] == "awaiting_approval" and r.get("waiting_since")]
    tokens = {"input": 0, "output": 0}
    tools: dict[tuple[str, str], list[float]] = {}
    interruptions: dict[tuple[str, str], int] = {}
    for r in rows[:RECENT]:
        try:
            events = events_of(r["turn_id"])
        except LookupError:
            continue
        started: dict[str, float | None] = {}
        last: Finish | None = None
        for event, at in events:
            if isinstance(event, Finish):
                last = event
            elif isinstance(event, ToolCallStarted):
                started[event.call_id] = at
            elif isinstance(event, ToolFinished) and event.call_id in started:
                begun = started.pop(event.call_id)
                if begun is not None and at is not None:
                    tools.setdefault((event.name, event.outcome), []).append(at - begun)
            elif isinstance(event, Error) and event.error_type in ("stopped", "cancelled"):
                key = ("stop" if event.error_type == "stopped" else "cancel", event.cause or "user")
                interruptions[key] = interruptions.get(key, 0) + 1
        if last is not None:
            tokens["input"] += last.usage.prompt_tokens
            tokens["output"] += last.usage.completion_tokens
    return {
        "greenroom.turns.live": len(live),
        "greenroom.turns.waiting": len(waiting),
        "greenroom.approval.oldest_wait": max((now - w for w in waiting), default=0.0),
        "gen_ai.client.token.usage": tokens,
        "gen_ai.execute_tool.duration": [
            {"tool": name, "outcome": outcome, "count": len(d), "mean": sum(d) / len(d)}
            for (name, outcome), d in sorted(tools.items())
        ],
        "greenroom.turn.interruptions": [
            {"kind": kind, "cause": cause, "count": n} for (kind, cause), n in sorted(interruptions.items())
        ],
    }
