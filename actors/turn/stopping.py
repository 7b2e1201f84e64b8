"""The stop and cancel part of a turn's rules, as the seeds define them.

- ``StopTurn`` acts at once: the stream is aborted (its partial text kept), every running
  call is interrupted (its ``on_stop`` callbacks run), the turn ends ``stopped``;
- ``CancelTurn`` is cooperative: running calls see their flag, the current response
  completes, and the turn ends ``cancelled`` at its next step; after ``grace`` seconds it
  becomes a stop (cause ``grace_expired``), still ending ``cancelled``;
- both are idempotent and the first request decides the reason and its cause; a request
  after the end has no effect and is not an error;
- ``StopTool`` ends one call as interrupted; its siblings and the turn go on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from messages import CancelTurn, InterruptTool, Marker, StopTool, StopTurn
from messages.control import StopCause

from .decisions import Abort, Decision, Interrupt, Persist, SetTimer, interrupted_content

if TYPE_CHECKING:
    from .rules import TurnRules

__all__ = ["StopRules"]


class StopRules:
    """Mixed into ``TurnRules``."""

    def _reason(self: TurnRules) -> tuple[StopCause, str]:
        """The cause and text of the first stop or cancel request: what every consequence says."""
        s = self.state
        first = s.cancel or s.stop
        return (first.cause, first.reason) if first is not None else ("user", "")

    def _on_stop(self: TurnRules, msg: StopTurn) -> list[Decision]:
        s = self.state
        if s.phase == "finished" or s.stop is not None:
            return self._reply(msg, True, None, "no effect")
        resumes_at = s.next_seq if s.paused else None
        s.stop = Marker(kind="stop", reason=msg.reason, at=self._clock(), cause=msg.cause)
        return self._advance() + self._reply(msg, True, None, "", resumes_at)

    def _halt(self: TurnRules) -> list[Decision]:
        """Stop now: abort the stream, interrupt every running call, end the turn."""
        s = self.state
        cause, why = self._reason()
        out: list[Decision] = [Persist("stop_marker")]
        if s.phase == "streaming" and s.stream_id is not None:
            out.append(Abort(s.stream_id, why, cause))
            self._keep_partial_text()
        for cs in s.batch or ():
            if cs.status == "running":
                interrupt = InterruptTool(turn_id=s.turn_id, call_id=cs.call.id, mode="stop", reason=why, cause=cause)
                out.append(Interrupt(interrupt))
        return out + self._end("cancelled" if s.cancel is not None else "stopped")

    def _on_cancel(self: TurnRules, msg: CancelTurn) -> list[Decision]:
        s = self.state
        if s.phase == "finished" or s.cancel is not None or s.stop is not None:
            return self._reply(msg, True, None, "no effect")
        ok = self._reply(msg, True, None, "", s.next_seq if s.paused else None)
        s.cancel = Marker(kind="cancel", reason=msg.reason, at=self._clock(), grace=msg.grace, cause=msg.cause)
        out: list[Decision] = [Persist("cancel_marker")]
        for cs in s.batch or ():
            if cs.status == "running":
                interrupt = InterruptTool(
                    turn_id=s.turn_id, call_id=cs.call.id, mode="cancel", reason=msg.reason, cause=msg.cause
                )
                out.append(Interrupt(interrupt))
        if msg.grace is not None:
            out.append(SetTimer("cancel_grace", msg.grace, 0))
        return out + self._advance() + ok

    def _on_stop_tool(self: TurnRules, msg: StopTool) -> list[Decision]:
        s = self.state
        if s.phase == "finished":
            return self._reply(msg, False, "turn_finished", f"turn {s.turn_id} has finished ({s.finish_reason})")
        cs = s.call(msg.call_id)
        if cs is None and self._answered_before(msg.call_id):
            return self._reply(msg, False, "not_waiting", f"call {msg.call_id!r} has already finished")
        if cs is None:
            return self._reply(msg, False, "unknown_call", f"call {msg.call_id!r} is not running in turn {s.turn_id}")
        if cs.status == "done":
            return self._reply(msg, False, "not_waiting", f"call {msg.call_id!r} has already finished")
        out: list[Decision] = []
        resumes_at = s.next_seq if s.paused else None  # ending the last waiting call resumes the turn
        if cs.status == "running":
            out.append(Interrupt(InterruptTool(turn_id=s.turn_id, call_id=msg.call_id, mode="stop", reason=msg.reason)))
        out += self._done(cs, "interrupted", interrupted_content("the call was stopped", msg.reason))
        out += [Persist("tool_result")] + self._advance()
        return out + self._reply(msg, True, None, "", resumes_at if not s.paused else None)

    def _on_store_failed(self: TurnRules, detail: str) -> list[Decision]:
        s = self.state
        if s.phase == "finished":
            return []
        out: list[Decision] = []
        if s.phase == "streaming" and s.stream_id is not None:
            out.append(Abort(s.stream_id, "the store failed"))
            self._keep_partial_text()
        for cs in s.batch or ():
            if cs.status == "running":
                interrupt = InterruptTool(turn_id=s.turn_id, call_id=cs.call.id, mode="stop", reason="the store failed")
                out.append(Interrupt(interrupt))
        return out + self._end("error", ("store_error", f"the turn store failed: {detail}"))
