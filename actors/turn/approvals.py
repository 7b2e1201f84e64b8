"""Whether a turn can take a set of approval decisions, checked before anything changes.

Only requests the turn itself issued can be decided: an unknown call, a call that is not
waiting, a second answer for the same call, an answer while the turn is being stopped or
after its end is refused with a ``RejectCode`` and a message for people. Pure: it reads the
turn's state.
"""

from __future__ import annotations

from collections.abc import Sequence

from messages import RejectCode, ToolApprovalResponse, TurnState

from .calls import answered_before

__all__ = ["refusal"]


def refusal(
    state: TurnState, responses: Sequence[ToolApprovalResponse], deny_rest: bool
) -> tuple[RejectCode, str] | None:
    """Why ``state`` cannot take these decisions, or None when it can."""
    s = state
    if s.phase == "finished":
        return "turn_finished", f"turn {s.turn_id} has finished ({s.finish_reason}); nothing can be approved"
    if s.stop is not None or s.cancel is not None:
        return "not_waiting", f"turn {s.turn_id} is being {'stopped' if s.stop else 'cancelled'}"
    if not responses and not deny_rest:
        return "invalid", "an approval response needs at least one decision or deny_rest"
    seen: set[str] = set()
    for r in responses:
        if r.call_id in seen:
            return "duplicate", f"two responses for call {r.call_id!r} in one message"
        seen.add(r.call_id)
        cs = s.call(r.call_id)
        if cs is None:
            if answered_before(s.messages, r.call_id):
                return "not_waiting", f"call {r.call_id!r} is not waiting for approval"
            return "unknown_call", f"no approval was requested for call {r.call_id!r} in turn {s.turn_id}"
        if cs.status != "pending_approval":
            if cs.decision is not None:
                return "duplicate", f"call {r.call_id!r} was already {cs.decision}"
            return "not_waiting", f"call {r.call_id!r} is not waiting for approval"
    return None
