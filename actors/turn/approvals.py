"""Approvals: whether a turn can take a set of decisions, the decisions, and their commit.

Only requests the turn itself issued can be decided: an unknown call, a call that is not
waiting, a second answer for the same call, an answer while the turn is being stopped or
after its end is refused with a ``RejectCode`` and a message for people (``refusal``, pure:
it reads the turn's state), and changes nothing; so are edited arguments that do not fit
the tool's parameters (``invalid``, with the check's message: the call stays undecided).
A tool that names its ``approvers`` lets only them decide its calls: a decision whose
principal (the response's ``by``, else its batch's) is not one of them, or that names
nobody, is refused ``not_allowed`` (a ``deny_rest`` decides every call still undecided, so
it must be allowed for each of them). A refused batch changes nothing: every call stays as
it was. An approved call with edited arguments runs with them, and its tool message names
them. Decisions are recorded at once (``record``, with who decided) and commit in a timer
after ``approval_window`` once every pending call has one, so a cancel already queued wins
(``commit``: approved calls run, denied ones are answered). The handlers are free functions
``(rules, message) -> decisions`` over a turn's ``Rules`` (``core``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from messages import CallState, RejectCode, RespondToApprovals, ToolApprovalResponse, TurnState

from .calls import answered_before
from .core import Rules
from .decisions import Decision, Persist, SetTimer
from .running import done, spawn
from .sanitize import TooDeep, safe_json

__all__ = ["commit", "on_approval", "on_approvals", "record", "refusal"]

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


def on_approval(rules: Rules, msg: ToolApprovalResponse) -> list[Decision]:
    return _decide(rules, [msg], False, None, msg)


def on_approvals(rules: Rules, msg: RespondToApprovals) -> list[Decision]:
    return _decide(rules, msg.responses, msg.deny_rest, msg.deny_reason, msg)


def _decide(
    rules: Rules,
    responses: Sequence[ToolApprovalResponse],
    deny_rest: bool,
    deny_reason: str | None,
    command: ToolApprovalResponse | RespondToApprovals,
) -> list[Decision]:
    s = rules.state
    refused = refusal(s, responses, deny_rest, command.by)
    edits: dict[str, dict[str, Any]] = {}
    if refused is None:
        refused = _misfit(rules, responses, edits)
    if refused is not None:
        return rules.reply(command, False, *refused)
    record(s, responses, deny_rest, deny_reason, command.by)
    for call_id, arguments in edits.items():
        cs = s.call(call_id)
        assert cs is not None
        cs.arguments, cs.edited = arguments, True
    out: list[Decision] = [Persist("approval_decision")]
    resumes_at = None
    if not s.pending_approvals and not s.commit_pending:
        s.commit_pending = True
        resumes_at = s.next_seq if s.paused else None
        out.append(SetTimer("commit", s.options.approval_window, s.round))
    return out + rules.reply(command, True, None, "recorded", resumes_at)


def _misfit(
    rules: Rules, responses: Sequence[ToolApprovalResponse], edits: dict[str, dict[str, Any]]
) -> Refusal | None:
    """Why an edit of these decisions cannot be taken (``invalid``), or None; the edits that
    can go in ``edits``, by call id, made safe."""
    for r in responses:
        if r.arguments is None:
            continue
        if not r.approved:
            return "invalid", f"call {r.call_id!r}: arguments are edited to approve a call, not to deny it"
        cs = rules.state.call(r.call_id)
        assert cs is not None  # refusal() has checked it
        try:
            arguments = safe_json(r.arguments)
        except TooDeep as exc:
            return "invalid", f"the edited arguments of call {r.call_id!r}: {exc}"
        problem = rules.check_arguments(rules.specs[cs.call.name], arguments)
        if problem is not None:
            return "invalid", f"the edited arguments of call {r.call_id!r} do not fit tool '{cs.call.name}': {problem}"
        edits[r.call_id] = arguments
    return None


def commit(rules: Rules) -> list[Decision]:
    """Approval-resume: run approved calls, answer denied ones."""
    s = rules.state
    s.commit_pending = False
    s.phase = "tools"
    out: list[Decision] = [Persist("approvals_committed")]
    for cs in s.batch or ():
        if cs.status != "decided":
            continue
        if cs.decision == "approved":
            out.extend(spawn(rules, cs, rules.specs[cs.call.name]))
        else:
            reason = "User denied" if cs.decision_reason is None else cs.decision_reason
            out.extend(done(rules, cs, "denied", f"Rejected: {reason}"))
    return out
