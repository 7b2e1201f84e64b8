"""The approval part of a turn's rules: deciding pending calls, committing the decisions.

Only requests the turn itself issued can be decided: an unknown call, a call that is not
waiting, a second answer for the same call or an answer after the end is refused with a
``ControlReply(ok=False, code=...)`` and changes nothing. Once no call is undecided the
decisions commit in a timer after ``approval_window``: approved calls run, denied ones get
``Rejected: {reason}`` (``Rejected: User denied`` only when no reason was given at all).
``approval_timeout`` denies what is still undecided with ``Rejected: Approval timed out``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from messages import ToolApprovalResponse

from .decisions import Decision, Persist, SetTimer

if TYPE_CHECKING:
    from .rules import TurnRules

__all__ = ["ApprovalRules"]


class ApprovalRules:
    """Mixed into ``TurnRules``."""

    def _on_approvals(
        self: TurnRules,
        responses: list[ToolApprovalResponse],
        deny_rest: bool,
        deny_reason: str | None,
        command: Any,
    ) -> list[Decision]:
        s = self.state
        refusal = self._approval_refusal(responses, deny_rest)
        if refusal is not None:
            return self._reply(command, False, refusal[0], refusal[1])
        for r in responses:
            cs = s.call(r.call_id)
            assert cs is not None
            cs.status = "decided"
            cs.decision = "approved" if r.approved else "denied"
            cs.decision_reason = r.reason
        if deny_rest:
            for cs in s.batch or ():
                if cs.status == "pending_approval":
                    cs.status, cs.decision, cs.decision_reason = "decided", "denied", deny_reason
        out: list[Decision] = [Persist("approval_decision")]
        resumes_at = None
        if not s.pending_approvals and not s.commit_pending:
            s.commit_pending = True
            resumes_at = s.next_seq if s.paused else None
            out.append(SetTimer("commit", s.options.approval_window, s.round))
        return out + self._reply(command, True, None, "recorded", resumes_at)

    def _approval_refusal(
        self: TurnRules, responses: list[ToolApprovalResponse], deny_rest: bool
    ) -> tuple[str, str] | None:
        """Why these decisions cannot be taken, or None; checked before anything changes."""
        s = self.state
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
                if self._answered_before(r.call_id):
                    return "not_waiting", f"call {r.call_id!r} is not waiting for approval"
                return "unknown_call", f"no approval was requested for call {r.call_id!r} in turn {s.turn_id}"
            if cs.status != "pending_approval":
                if cs.decision is not None:
                    return "duplicate", f"call {r.call_id!r} was already {cs.decision}"
                return "not_waiting", f"call {r.call_id!r} is not waiting for approval"
        return None

    def _commit(self: TurnRules) -> list[Decision]:
        """Approval-resume: run approved calls, answer denied ones."""
        s = self.state
        s.commit_pending = False
        out: list[Decision] = [Persist("approvals_committed")]
        s.phase = "tools"
        for cs in s.batch or ():
            if cs.status != "decided":
                continue
            if cs.decision == "approved":
                out.extend(self._spawn(cs, self._specs[cs.call.name]))
            else:
                reason = "User denied" if cs.decision_reason is None else cs.decision_reason
                out.extend(self._done(cs, "denied", f"Rejected: {reason}"))
        return out

    def _on_approval_timeout(self: TurnRules) -> list[Decision]:
        s = self.state
        if not s.pending_approvals:
            return []
        for cs in s.batch or ():
            if cs.status == "pending_approval":
                cs.status, cs.decision, cs.decision_reason = "decided", "denied", "Approval timed out"
        s.commit_pending = True
        return [Persist("approval_decision")] + self._advance(commit_due=True)
