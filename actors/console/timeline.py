"""A turn's timeline as plain data, for the page to draw: rounds, calls, waits, stops.

``timeline(events)`` reads a turn's events with the time each happened (``time.time()``;
``None`` where no time is known, which is then taken from the event before it) and
returns times in seconds from the turn's first event:

- ``model``: the spans in which the turn waited on the model (from its start, or from the
  moment the last call of a round ended with no approval outstanding, to the next call,
  approval request or ``Finish``), numbered ``n`` from 1;
- ``calls``: one bar per tool call, from ``ToolCallStarted`` to ``ToolFinished`` (``end``
  None while it runs), with its outcome; calls of one round that ran at the same time
  overlap;
- ``waits``: the spans between a ``Finish(awaiting_approval)`` and the next event (``end``
  None while the turn still waits);
- ``marks``: where a stop, a cancel or an error landed (its ``Error`` event), with its cause
  and who sent it (``by``).

Nothing here renders anything: the page draws the picture from this data, as text nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from messages import Error, Finish, ToolApprovalRequest, ToolCallStarted, ToolFinished, TurnEvent

__all__ = ["timeline"]

Timed = tuple[TurnEvent, float | None]


def _times(events: Sequence[Timed]) -> list[float]:
    """Each event's time; an unknown one is its predecessor's (0.0 for the first)."""
    out: list[float] = []
    last = 0.0
    for _, at in events:
        last = at if at is not None else last
        out.append(last)
    return out


def timeline(events: Sequence[Timed], now: float | None = None) -> dict[str, Any]:
    """The timeline of one turn (see the module docstring); ``now`` ends what is still open."""
    if not events:
        return {"start": None, "end": 0.0, "open": False, "model": [], "calls": [], "waits": [], "marks": []}
    times = _times(events)
    t0 = times[0]
    model: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    waits: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    running: set[str] = set()
    asked: set[str] = set()  # approval requests not yet answered by a start or a result
    model_from: float | None = 0.0  # the model span open now, if any
    finished = False

    def close_model(at: float) -> None:
        nonlocal model_from
        if model_from is not None and at > model_from:
            model.append({"n": len(model) + 1, "start": model_from, "end": at})
        model_from = None

    for (event, _), at in zip(events, times, strict=True):
        t = at - t0
        if waits and waits[-1]["end"] is None:  # the first event after a pause ends the wait
            waits[-1]["end"] = t
        if isinstance(event, ToolCallStarted):
            close_model(t)
            running.add(event.call_id)
            asked.discard(event.call_id)
            calls[event.call_id] = _bar(event.call_id, event.name, event.round, t)
        elif isinstance(event, ToolApprovalRequest):
            close_model(t)
            if event.child_turn_id is None:
                asked.add(event.call_id)
        elif isinstance(event, ToolFinished):
            close_model(t)
            bar = calls.setdefault(event.call_id, _bar(event.call_id, event.name, None, t))  # denied: no length
            bar["end"], bar["outcome"] = t, event.outcome
            running.discard(event.call_id)
            asked.discard(event.call_id)
            if not running and not asked:  # the round's results go back to the model
                model_from = t
        elif isinstance(event, Error):
            mark = {"at": t, "kind": event.error_type, "cause": event.cause, "label": event.message}
            marks.append({**mark, "by": event.by})
        elif isinstance(event, Finish):
            close_model(t)
            if event.terminal:
                finished = True
            else:
                waits.append({"start": t, "end": None})
    end = times[-1] - t0
    if not finished:
        if now is not None:
            end = max(end, now - t0)
        if model_from is not None:
            model.append({"n": len(model) + 1, "start": model_from, "end": None})
    return {
        "start": t0,
        "end": end,
        "open": not finished,
        "model": model,
        "calls": list(calls.values()),
        "waits": waits,
        "marks": marks,
    }


def _bar(call_id: str, name: str, round_: int | None, start: float) -> dict[str, Any]:
    return {"call_id": call_id, "name": name, "round": round_, "start": start, "end": None, "outcome": None}
