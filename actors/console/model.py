"""What the console shows of a turn, as plain JSON-ready data, computed from its events.

A turn is known by its events (each with the time it happened, or None) and, when a store
holds it, by its last snapshot. From them:

- ``row(...)``: one line of the list: status, round, pending approvals, waiting since,
  parent and children;
- ``view(...)``: the page of one turn: the row, its history (as of its latest ``Finish``, or
  the snapshot's), the calls waiting for a decision (its own and its descendants', each
  with the turn that must decide it), the calls running now, and its timeline;
- ``event_json(...)``: an event as JSON with its time (``at``).

Everything here is data: model text, tool arguments and reasons stay strings, which the
page puts in text nodes, never in markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from messages import (
    Finish,
    RateLimited,
    ToolApprovalRequest,
    ToolCallStarted,
    ToolFinished,
    ToolProgress,
    TurnEvent,
    TurnStarted,
    TurnState,
    whole_history,
)

from .timeline import Timed, timeline

__all__ = ["child_events", "event_json", "pending_from_events", "row", "running_calls", "view"]


def event_json(event: TurnEvent, at: float | None) -> dict[str, Any]:
    """The event's fields (JSON mode) and ``at``."""
    data = event.model_dump(mode="json")
    data["at"] = at
    return data


def _last_finish(events: Sequence[Timed]) -> tuple[Finish, float | None] | None:
    for event, at in reversed(events):
        if isinstance(event, Finish):
            return event, at
    return None


def _status(events: Sequence[Timed]) -> tuple[str, str | None, float | None]:
    """(status, finish reason, waiting since) from the events alone."""
    last = _last_finish(events)
    if events and isinstance(events[-1][0], RateLimited):  # its model request waits for the limit
        return "rate_limited", None, None
    if last is None:
        return "running", None, None
    finish, at = last
    if finish.terminal:
        return "finished", finish.finish_reason, None
    if events[-1][0] is finish:
        return ("paused" if finish.finish_reason == "paused" else "awaiting_approval"), None, at
    return "running", None, None


def child_events(events: Iterable[Timed]) -> dict[str, list[Timed]]:
    """The events of child turns, as their parent's ``ToolProgress`` carried them, by child id."""
    from pydantic import TypeAdapter, ValidationError

    from messages.events import TurnEventUnion

    adapter: TypeAdapter[Any] = TypeAdapter(TurnEventUnion)
    out: dict[str, list[Timed]] = {}
    for event, at in events:
        data = event.data if isinstance(event, ToolProgress) else None
        if not isinstance(data, dict) or "child_turn_id" not in data or not isinstance(data.get("event"), dict):
            continue
        try:
            child = adapter.validate_python(data["event"])
        except ValidationError:
            continue
        seen = out.setdefault(str(data["child_turn_id"]), [])
        if not seen or child.seq > seen[-1][0].seq:
            seen.append((child, at))
    return out


def pending_from_events(events: Sequence[Timed]) -> list[dict[str, Any]]:
    """Approval requests not yet answered by a start or a result, the turn's own and those
    its descendants sent up (``turn_id`` says which turn decides each)."""
    status, _, _ = _status(events)
    if status == "finished" or not events:
        return []
    own = events[0][0].turn_id
    answered_by_child: dict[str, set[str]] = {
        child: {e.call_id for e, _ in evs if isinstance(e, (ToolCallStarted, ToolFinished))}
        for child, evs in child_events(events).items()
    }
    answered = {e.call_id for e, _ in events if isinstance(e, (ToolCallStarted, ToolFinished))}
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for event, at in events:
        if not isinstance(event, ToolApprovalRequest):
            continue
        target = event.child_turn_id or own
        done = answered if event.child_turn_id is None else answered_by_child.get(target, set())
        if event.call_id in done:
            continue
        out[(target, event.call_id)] = _request(event, target, at)
    return list(out.values())


def _request(event: ToolApprovalRequest, target: str, at: float | None) -> dict[str, Any]:
    return {
        "turn_id": target,
        "call_id": event.call_id,
        "name": event.name,
        "arguments": event.arguments,
        "description": event.description,
        "approvers": event.approvers,
        "asked_at": at,
        "decision": None,
        "decided_by": None,
    }


def pending_from_state(state: TurnState, events: Sequence[Timed]) -> list[dict[str, Any]]:
    """The turn's own calls waiting for a decision, from its snapshot (decided ones included,
    with their decision, until the round goes on)."""
    if state.phase == "finished":
        return []
    requests = {
        e.call_id: (e, at) for e, at in events if isinstance(e, ToolApprovalRequest) and e.child_turn_id is None
    }
    out = []
    for c in state.batch or ():
        if c.call.id not in requests or c.status not in ("pending_approval", "decided"):
            continue
        event, at = requests[c.call.id]
        item = _request(event, state.turn_id, at)
        item["decision"], item["decided_by"] = c.decision, c.decided_by
        out.append(item)
    return out


def running_calls(events: Sequence[Timed]) -> list[dict[str, Any]]:
    """Calls started and not finished, in the order they started."""
    started: dict[str, dict[str, Any]] = {}
    for event, at in events:
        if isinstance(event, ToolCallStarted):
            started[event.call_id] = {
                "call_id": event.call_id, "name": event.name, "arguments": event.arguments, "started_at": at,
                "approved_by": event.by,
            }  # fmt: skip
        elif isinstance(event, ToolFinished):
            started.pop(event.call_id, None)
    if _status(events)[0] == "finished":
        return []
    return list(started.values())


def row(
    turn_id: str,
    events: Sequence[Timed],
    *,
    children: Sequence[str] = (),
    pending: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One line of the list, from the turn's events (a turn that only a store holds has its
    line from ``SQLiteStore.summaries``)."""
    status, reason, waiting = _status(events)
    last = _last_finish(events)
    round_ = last[0].round if last is not None else 0
    for event, _ in events:
        if isinstance(event, ToolCallStarted):
            round_ = max(round_, event.round)
    asked = pending if pending is not None else pending_from_events(events)
    first = events[0][0] if events else None
    return {
        "turn_id": turn_id,
        "status": status,
        "finish_reason": reason,
        "round": round_,
        "created_at": events[0][1] if events else None,
        "updated_at": events[-1][1] if events else None,
        "waiting_since": waiting,
        "pending_approvals": [p["call_id"] for p in asked if p["turn_id"] == turn_id],
        "parent_turn_id": first.parent_turn_id if first is not None else None,
        "children": list(children),
        "error": None,
    }


def history(events: Sequence[Timed], state: TurnState | None) -> list[dict[str, Any]]:
    """The turn's messages: the snapshot's when there is one, else the history its ``Finish``
    events make (each carries what is new since the previous one)."""
    messages = state.messages if state is not None else whole_history(e for e, _ in events)
    return [m.model_dump(mode="json", exclude={"kind"}, exclude_none=True) for m in messages]


def view(
    turn_id: str,
    events: Sequence[Timed],
    *,
    line: dict[str, Any],
    pending: list[dict[str, Any]],
    state: TurnState | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The page of one turn, but its events (sent on their own as they come)."""
    usage = _last_finish(events)
    picture = timeline(events, now)
    for marker in (state.stop, state.cancel) if state is not None and picture["start"] is not None else ():
        if marker is not None:  # when it was asked for; its Error says where it landed
            at = marker.at - picture["start"]
            mark = {"at": at, "kind": f"{marker.kind}_requested", "cause": marker.cause, "label": marker.reason}
            picture["marks"].append({**mark, "by": marker.by})
    return {
        "turn": line,
        "history": history(events, state),
        "pending": pending,
        "running": running_calls(events),
        "timeline": picture,
        "usage": usage[0].usage.model_dump(mode="json", exclude={"kind"}) if usage is not None else None,
        "stop": _marker(state.stop) if state is not None else None,
        "cancel": _marker(state.cancel) if state is not None else None,
        "forked_from": _forked_from(events, state),
    }


def _forked_from(events: Sequence[Timed], state: TurnState | None) -> dict[str, Any] | None:
    """Where the turn was forked from (``ForkOrigin``): its snapshot's, else its ``TurnStarted``'s."""
    origin = state.forked_from if state is not None else None
    if origin is None and events and isinstance(events[0][0], TurnStarted):
        origin = events[0][0].forked_from
    return origin.model_dump(mode="json", exclude={"kind"}) if origin is not None else None


def _marker(marker: Any) -> dict[str, Any] | None:
    if marker is None:
        return None
    return {"reason": marker.reason, "at": marker.at, "cause": marker.cause, "grace": marker.grace, "by": marker.by}
