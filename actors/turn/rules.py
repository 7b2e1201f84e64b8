"""The rules of a turn: what each message does, and what the turn does next, as plain code.

``TurnRules`` holds a ``TurnState`` and turns every input (a command, a stream message, a
tool result, a timer) into a list of *decisions* (``decisions``): events to emit, a stream
to start or abort, calls to run or interrupt, a step to take, a timer to set, a snapshot to
persist, a reply to send. It performs no I/O and knows nothing of actors, so tests drive it
directly; the ``TurnActor`` carries the decisions out.

Every handler records what its input changed, then asks ``priority.next_action`` what the
turn does next (the table there is the whole priority: cancel > approval-resume >
max-rounds > the next LLM call, with a stop acting at once). Guarantees, each tested:

- every tool call of an assistant message ends with exactly one ``ToolFinished`` and one
  tool message, appended in the order of ``tool_calls`` once the whole batch has ended;
- every run of events ends with exactly one ``Finish``; a terminal one is the last event;
- stop and cancel are idempotent: the first request decides the finish reason, its text and
  its cause, and every decision derived from it (abort, interrupts, synthesized tool
  messages, ``Error``) carries the same ones; a later stop still acts at once;
- an input that changes nothing returns no decision and touches nothing, not even a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from messages import (
    CancelTurn,
    Error,
    Finish,
    LLMCompleted,
    LLMDeltas,
    LLMFailed,
    LLMRetrying,
    Marker,
    RespondToApprovals,
    StartTurn,
    StopTool,
    StopTurn,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolProgress,
    ToolResult,
    ToolSpec,
    TurnEvent,
    TurnRetrying,
    TurnStarted,
    TurnState,
    reply_for,
)
from messages.tool import ReportProgress

from ..tools.definition import error_result
from .answers import AnswerRules
from .approvals import ApprovalRules
from .calls import CallRules
from .decisions import (
    Decision,
    Done,
    Emit,
    Persist,
    Reply,
    ScheduleStep,
    SetTimer,
    StoreFailed,
    StreamLost,
    TakeStep,
    TimerFired,
    ToolLost,
    interrupted_content,
)
from .history import history_problems
from .priority import next_action, situation
from .sanitize import safe_command, safe_text
from .stopping import StopRules

__all__ = ["TurnRules"]

NeedsApproval = Callable[[ToolSpec, dict[str, Any]], bool]
_COMMANDS = (StopTurn, CancelTurn, StopTool, ToolApprovalResponse, RespondToApprovals)


def _static_approval(spec: ToolSpec, arguments: dict[str, Any]) -> bool:
    return spec.approval != "never"


class TurnRules(AnswerRules, CallRules, ApprovalRules, StopRules):
    """One turn's rules over its ``state``. Not thread-safe; one owner at a time."""

    def __init__(
        self,
        state: TurnState,
        *,
        needs_approval: NeedsApproval = _static_approval,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self._needs_approval = needs_approval
        self._clock = clock
        self._specs = {t.name: t for t in state.tools}
        # The stream in flight: its text so far and out-of-order messages by seq.
        self._text = ""
        self._next_seq = 0
        self._early: dict[int, Any] = {}

    @classmethod
    def from_start(cls, start: StartTurn, **kw: Any) -> TurnRules:
        """A new turn for ``start``; call ``start()`` for its first decisions."""
        now = kw.get("clock", time.time)()
        state = TurnState(
            turn_id=start.turn_id,
            parent_turn_id=start.parent_turn_id,
            root_turn_id=start.root_turn_id or start.turn_id,
            provider=start.provider,
            tools=list(start.tools),
            options=start.options,
            messages=list(start.messages),
            created_at=now,
            updated_at=now,
        )
        return cls(state, **kw)

    # -- opening and recovery -------------------------------------------------------------

    def start(self) -> list[Decision]:
        """The decisions that open the turn: ``TurnStarted``, then the first step."""
        s = self.state
        s.phase = "idle"
        out: list[Decision] = [self._emit(TurnStarted)]
        problems = self._start_problems()
        if problems:
            return out + self._end("error", ("invalid_turn", "; ".join(problems)))
        return out + [Persist("started"), ScheduleStep()]

    def _start_problems(self) -> list[str]:
        s = self.state
        problems: list[str] = []
        if not s.messages:
            problems.append("a turn needs at least one message")
        names = [t.name for t in s.tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            problems.append(f"tool names must be unique: {', '.join(dupes)}")
        problems.extend(history_problems(s.messages))
        return problems

    def recover(self) -> list[Decision]:
        """Carry on a turn loaded from the store after a restart.

        A stop marker ends the turn stopped; a stream that died is asked for again; a call
        that was running is closed as interrupted, or run again with the same idempotency
        key if its tool is ``retry_safe``; recorded results never run again; a pause stays a
        pause (its ``Finish`` is not repeated) and its approval timeout keeps its deadline.
        """
        s = self.state
        if s.phase in ("finished", "created"):
            return self.start() if s.phase == "created" else []
        out: list[Decision] = []
        if s.phase == "streaming" and s.stop is None:
            s.phase, s.stream_id = "idle", None
            reason = "recovered after a restart: asking the model again"
            out.append(self._emit(TurnRetrying, attempt=1, delay=0.0, reason=reason))
        elif s.phase == "streaming":
            s.phase, s.stream_id = "idle", None
        for cs in s.batch or ():
            if cs.status != "running" or s.stop is not None:
                continue
            spec = self._specs.get(cs.call.name)
            if spec is not None and spec.retry_safe and s.cancel is None:
                out.extend(self._spawn(cs, spec))
            else:
                why = interrupted_content("the runtime stopped while the call ran", "recovered after a restart")
                out.extend(self._done(cs, "interrupted", why))
        if s.commit_pending:
            out.append(SetTimer("commit", s.options.approval_window, s.round))
        if s.pending_approvals and s.approval_deadline is not None:
            out.append(SetTimer("approval_timeout", max(0.0, s.approval_deadline - self._clock()), s.round))
        if s.stop is not None:  # stopped, but the process died before the end was written
            return out + self._end("cancelled" if s.cancel is not None else "stopped")
        return out + [Persist("recovered")] + self._advance()

    # -- dispatch -------------------------------------------------------------------------

    def handle(self, msg: Any) -> list[Decision]:
        """Apply one input and return what to do. An input that changes nothing returns []."""
        if isinstance(msg, _COMMANDS):
            msg = safe_command(msg)  # a reason becomes history and events: it must be valid text
        out = self._dispatch(msg)
        if out:
            self.state.updated_at = self._clock()
        return out

    def _dispatch(self, msg: Any) -> list[Decision]:
        s = self.state
        if isinstance(msg, TakeStep):
            return self._advance(at_step=True)
        if isinstance(msg, (LLMDeltas, LLMRetrying, LLMCompleted, LLMFailed)):
            return self._on_stream_message(msg)
        if isinstance(msg, ToolResult):
            return self._on_tool_result(msg.call_id, msg.outcome, safe_text(msg.content))
        if isinstance(msg, ToolLost):
            return self._on_tool_result(msg.call_id, "failed", error_result(msg.message))
        if isinstance(msg, StreamLost):
            if msg.stream_id != s.stream_id or s.phase != "streaming":
                return []
            return self._on_stream_failed("stream_lost", f"LLM stream lost: {msg.detail}")
        if isinstance(msg, StoreFailed):
            return self._on_store_failed(msg.detail)
        if isinstance(msg, ReportProgress):
            cs = s.call(msg.call_id)
            if cs is None or cs.status != "running" or s.phase == "finished":
                return []
            if msg.approval is not None:  # a child turn's call waits for a human: say so here
                a = msg.approval
                fields = dict(name=a["name"], arguments=a.get("arguments"), description=a.get("description", ""))
                return [self._emit(ToolApprovalRequest, call_id=a["call_id"], child_turn_id=a["turn_id"], **fields)]
            return [self._emit(ToolProgress, call_id=msg.call_id, data=msg.data)]
        if isinstance(msg, ToolApprovalResponse):
            return self._on_approvals([msg], False, None, msg)
        if isinstance(msg, RespondToApprovals):
            return self._on_approvals(msg.responses, msg.deny_rest, msg.deny_reason, msg)
        if isinstance(msg, StopTurn):
            return self._on_stop(msg)
        if isinstance(msg, CancelTurn):
            return self._on_cancel(msg)
        if isinstance(msg, StopTool):
            return self._on_stop_tool(msg)
        if isinstance(msg, TimerFired):
            return self._on_timer(msg.name, msg.token)
        return []

    # -- what next ------------------------------------------------------------------------

    def _advance(
        self, *, at_step: bool = False, commit_due: bool = False, answered: str | None = None
    ) -> list[Decision]:
        """Carry out ``next_action`` until the turn waits (see ``priority``)."""
        out: list[Decision] = []
        while True:
            facts = situation(self.state, at_step=at_step, commit_due=commit_due, answered=answered is not None)
            action = next_action(facts)
            if action == "wait":
                return out
            if action == "step":
                return out + [ScheduleStep()]
            if action == "stop":
                return out + self._halt()
            if action == "cancel":
                return out + self._end("cancelled")
            if action == "answer":
                return out + self._end("length" if answered == "length" else "stop")
            if action == "max_rounds":
                return out + self._end("max_rounds")
            if action == "stream":
                return out + self._start_stream()
            if action == "resume":
                out += self._commit()
                commit_due = False
            elif action == "collect":
                out += self._complete_batch()
                at_step = False
            elif action == "pause":
                out += self._pause()

    def _pause(self) -> list[Decision]:
        s = self.state
        s.paused = True
        s.phase = "awaiting_approval"
        s.waiting_since = self._clock()
        finish = self._emit(
            Finish,
            finish_reason="awaiting_approval",
            usage=s.usage,
            round=s.round,
            messages=list(s.messages),
            pending_approvals=s.pending_approvals,
        )
        return [finish, Persist("paused")]

    def _complete_batch(self) -> list[Decision]:
        s = self.state
        self._append_tool_messages()
        s.round += 1
        s.phase = "idle"
        return [Persist("tools_done")]

    # -- timers -------------------------------------------------------------------------

    def _on_timer(self, name: str, token: int) -> list[Decision]:
        s = self.state
        if s.phase == "finished":
            return []
        if name == "cancel_grace":
            if s.stop is not None:
                return []
            s.stop = Marker(kind="stop", reason="cancel grace period expired", at=self._clock(), cause="grace_expired")
            return self._advance()
        if token != s.round or s.batch is None:
            return []  # a timer of a batch that has ended
        if name == "commit" and s.commit_pending:
            return self._advance(commit_due=True)
        if name == "approval_timeout":
            return self._on_approval_timeout()
        return []

    # -- the end --------------------------------------------------------------------------

    def _end(self, reason: str, error: tuple[str, str] | None = None) -> list[Decision]:
        """End the turn: close every open call, then ``Error`` if any, then ``Finish``."""
        s = self.state
        out: list[Decision] = []
        cause, why = self._reason()
        if s.batch is not None:
            what = {"stopped": "the turn was stopped", "cancelled": "the turn was cancelled"}.get(
                reason, "the turn ended"
            )
            for cs in s.batch:
                if cs.status != "done":
                    out.extend(self._done(cs, "interrupted", interrupted_content(what, why or reason)))
            self._append_tool_messages()
        if reason in ("stopped", "cancelled"):
            message = "Agent run stopped" if reason == "stopped" else "Agent run cancelled"
            out.append(self._emit(Error, error_type=reason, message=message, detail=why, cause=cause))
        elif error is not None:
            out.append(self._emit(Error, error_type=error[0], message=error[1]))
        s.phase = "finished"
        s.finish_reason = reason  # type: ignore[assignment]
        out.append(self._emit(Finish, finish_reason=reason, usage=s.usage, round=s.round, messages=list(s.messages)))
        return out + [Persist("finished"), Done()]

    # -- helpers --------------------------------------------------------------------------

    def _emit(self, cls: type[TurnEvent], **fields: Any) -> Emit:
        s = self.state
        event = cls(
            turn_id=s.turn_id, seq=s.next_seq, parent_turn_id=s.parent_turn_id, root_turn_id=s.root_turn_id, **fields
        )
        s.next_seq += 1
        return Emit(event)

    def _reply(
        self, command: Any, ok: bool, code: str | None, message: str, resumes_at: int | None = None
    ) -> list[Decision]:
        """A reply to the command's sender: always for a refusal, for success only if asked."""
        if ok and getattr(command, "request_id", None) is None:
            return []
        reply = reply_for(command, ok, code, message, turn_id=self.state.turn_id, resumes_at=resumes_at)  # type: ignore[arg-type]
        return [Reply(reply)]
