"""Whether a turn can take a set of approval decisions, checked before anything changes, and
how they are recorded.

Only requests the turn itself issued can be decided: an unknown call, a call that is not
waiting, a second answer for the same call, an answer while the turn is being stopped or
after its end is refused with a ``RejectCode`` and a message for people. A tool that names
its ``approvers`` lets only them decide its calls: a decision whose principal (the
response's ``by``, else its batch's) is not one of them, or that names nobody, is refused
``not_allowed`` (a ``deny_rest`` decides every call still undecided, so it must be allowed
for each of them). A refused batch changes nothing: every call stays as it was. Pure: it
reads (``refusal``) or updates (``record``) the turn's state.
"""

from __future__ import annotations

from collections.abc import Sequence

from messages import CallState, RejectCode, ToolApprovalResponse, TurnState

from .calls import answered_before

__all__ = ["ended_by", "record", "refusal"]

Refusal = tuple[RejectCode, str]


def refusal(
    state: TurnState, responses: Sequence[ToolApprovalResponse], deny_rest: bool, by: str | None = None
) -> Refusal | None:
    """Why ``state`` cannot take these decisions, sent by ``by``, or None when it can."""
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
        if r.by is not None and by is not None and r.by != by:
            why = f"the response for call {r.call_id!r} is by {r.by!r}, its batch by {by!r}: one principal decides"
            return "invalid", why
        cs = s.call(r.call_id)
        if cs is None:
            if answered_before(s.messages, r.call_id):
                return "not_waiting", f"call {r.call_id!r} is not waiting for approval"
            return "unknown_call", f"no approval was requested for call {r.call_id!r} in turn {s.turn_id}"
        if cs.status != "pending_approval":
            if cs.decision is not None:
                return "duplicate", f"call {r.call_id!r} was already {cs.decision}"
            return "not_waiting", f"call {r.call_id!r} is not waiting for approval"
        refused = _not_allowed(s, cs, r.by or by)
        if refused is not None:
            return refused
    rest = (s.batch or []) if deny_rest else []
    for cs in rest:
        if cs.status == "pending_approval" and cs.call.id not in seen:
            refused = _not_allowed(s, cs, by)
            if refused is not None:
                return refused
    return None


def _not_allowed(state: TurnState, cs: CallState, by: str | None) -> Refusal | None:
    """``not_allowed`` when the call's tool names its approvers and ``by`` is not one of them."""
    approvers = next((t.approvers for t in state.tools if t.name == cs.call.name), None)
    if approvers is None or by in approvers:
        return None
    who = f"{by!r} may not" if by is not None else "this decision names nobody (by)"
    return "not_allowed", f"call {cs.call.id!r} of {cs.call.name} may be decided only by {', '.join(approvers)}: {who}"


def record(
    state: TurnState,
    responses: Sequence[ToolApprovalResponse],
    deny_rest: bool,
    deny_reason: str | None,
    by: str | None,
) -> None:
    """Record decisions ``refusal`` accepted: each call ``decided``, with who decided it."""
    for r in responses:
        cs = state.call(r.call_id)
        assert cs is not None
        cs.status, cs.decision, cs.decision_reason = "decided", "approved" if r.approved else "denied", r.reason
        cs.decided_by = r.by or by
    rest = (state.batch or []) if deny_rest else []
    for cs in rest:
        if cs.status == "pending_approval":
            cs.status, cs.decision, cs.decision_reason, cs.decided_by = "decided", "denied", deny_reason, by


def ended_by(cs: CallState) -> str | None:
    """Who ended the call by a command (``ToolFinished.by``): who stopped it, else who denied it."""
    return cs.stopped_by or (cs.decided_by if cs.decision == "denied" else None)
