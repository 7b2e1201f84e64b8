"""The rules of a turn: what each message does, and what the turn does next, as plain code.

``TurnRules`` holds a ``TurnState`` and turns every input (a command, a stream message, a
tool result, a timer) into a list of *decisions* (``decisions``): events to emit, a stream
to start or abort, calls to run or interrupt, a step to take, a timer to set, a snapshot to
persist, a reply to send. It performs no I/O, reads time only through the clock it is given
and knows nothing of actors, so tests drive it directly; the ``TurnActor`` carries the
decisions out. It alone numbers the turn's events (``emit``). The handlers are free
functions ``(rules, message) -> decisions`` in a module per concern, over the ``Rules`` it
is (``core``): the model's stream (``stream``), the calls as they run (``running``), the
approvals (``approvals``), stop and cancel (``stopping``), new input, pause and resume
(``steering``); the parts that need no state of their own are pure functions beside them
(``assembly``, ``budget``, ``calls``, ``priority``).

Every handler records what its input changed, then asks ``priority.next_action`` what the
turn does next (the table there is the whole priority: cancel > approval-resume >
max-rounds > the next LLM call, with a stop acting at once). Guarantees, each tested:

- every tool call of an assistant message ends with exactly one ``ToolFinished`` and one
  tool message, appended in the order of ``tool_calls`` once the whole batch has ended;
- every run of events ends with exactly one ``Finish``; a terminal one is the last event;
- a stream's messages are applied in ``seq`` order; duplicates and messages of a stream the
  turn no longer waits for change nothing; deltas become ``TextDelta`` events; a failed or
  lost stream keeps the text it had produced;
- stop and cancel are idempotent: the first request decides the finish reason, its text and
  its cause, and every decision derived from it (abort, interrupts, synthesized tool
  messages, ``Error``) carries the same ones; a later stop still acts at once;
- a stop interrupts every running call at once, and ends the turn once each has reported its end
  (or its backstop has closed it, saying so); ``StopTool`` and a time limit alike, for their call;
- approvals commit in a timer after ``approval_window``, so a cancel already queued wins;
- new input enters the history just before a model call, once, with its ``InputAccepted``;
  a paused turn ends its run with ``Finish(paused)`` and does nothing until resumed;
- a spent budget ends the turn as a stop does, ``Finish(budget_exceeded)``;
- an input that changes nothing returns no decision and touches nothing, not even a time;
  a refused command returns only its ``Reply``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from messages import (
    TURN_COMMANDS, CancelTurn, Error, Finish, LLMCompleted, LLMDeltas, LLMFailed, LLMRateLimited, LLMRetrying,
    LLMUsage, Marker, PauseTurn, RejectCode, ReportProgress, RespondToApprovals, ResumeTurn, SendInput, StartTurn, StopCause, StopTool,
    StopTurn, ToolApprovalResponse, ToolResult, ToolSpec, TurnEvent, TurnStarted, TurnRetrying, TurnState, reply_for,
)  # fmt: skip
from messages.events import FinishReason

from . import approvals, running, steering, stopping, stream
from .assembly import StreamAssembly
from .calls import CheckArguments, NeedsApproval, timer_call
from .decisions import (
    Decision, Done, Emit, Persist, Reply, ScheduleStep, SetTimer, StoreFailed, StreamLost, TakeStep, TimerFired,
    ToolLost,
)  # fmt: skip
from .history import opening_problems
from .priority import next_action, situation
from .results import RECOVERED, Recovery, interrupted_content, unreported_note
from .running import STOP_CONFIRM_MARGIN
from .sanitize import safe_command

__all__ = ["STOP_CONFIRM_MARGIN", "CheckArguments", "NeedsApproval", "Recovery", "TurnRules"]


def _static_approval(spec: ToolSpec, arguments: dict[str, Any]) -> bool:
    return spec.approval != "never"


def _any_arguments(spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
    return None  # where the tools cannot be loaded, their own process checks the arguments


ANSWERS = 64  # the replies a turn keeps, by request id, so that a command sent again is applied once


class TurnRules:
    """One turn's rules over its ``state``. Not thread-safe; one owner at a time."""

    def __init__(
        self,
        state: TurnState,
        *,
        needs_approval: NeedsApproval = _static_approval,
        check_arguments: CheckArguments = _any_arguments,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.needs_approval = needs_approval
        self.check_arguments = check_arguments
        self._clock = clock
        self.specs = {t.name: t for t in state.tools}
        self.assembly: StreamAssembly | None = None  # the stream in flight, if any
        self.alive: dict[str, float] = {}  # when each running call last reported, by call id

    @classmethod
    def from_start(
        cls,
        start: StartTurn,
        *,
        needs_approval: NeedsApproval = _static_approval,
        check_arguments: CheckArguments = _any_arguments,
        clock: Callable[[], float] = time.time,
    ) -> TurnRules:
        """A new turn for ``start``; call ``start()`` for its first decisions."""
        now = clock()
        state = TurnState(
            turn_id=start.turn_id,
            parent_turn_id=start.parent_turn_id,
            root_turn_id=start.root_turn_id or start.turn_id,
            provider=start.provider,
            tools=list(start.tools),
            options=start.options,
            requires=dict(start.requires),
            messages=list(start.messages),
            forked_from=start.forked_from,
            created_at=now,
            updated_at=now,
        )
        return cls(state, needs_approval=needs_approval, check_arguments=check_arguments, clock=clock)

    # -- opening and recovery -------------------------------------------------------------

    def start(self) -> list[Decision]:
        """The decisions that open the turn: ``TurnStarted``, then the first step."""
        s = self.state
        s.phase = "idle"
        opening = len(s.messages) if any(m.role == "assistant" for m in s.messages) else None
        out: list[Decision] = [self.emit(TurnStarted, forked_from=s.forked_from, opening=opening)]
        problems = opening_problems(s.messages, s.tools)
        if problems:
            return out + self.end("error", ("invalid_turn", "; ".join(problems)))
        return out + [Persist("started"), ScheduleStep()]

    def recover(self, why: Recovery = "restart") -> list[Decision]:
        """Carry on a turn loaded from the store: after a restart, on the host that took it
        over from a lost one (``takeover``), or on the host that claimed it back once its
        store answered again (``store``); each says so in what follows.

        A stop marker ends the turn stopped; a stream that died is asked for again (its
        partial text was streamed, not kept: a ``TurnRetrying`` says to drop it); a call that
        was running is closed as interrupted, or run again with the same idempotency key if
        its tool is ``retry_safe``; recorded results never run again; a wait for approvals
        and a pause stay as they were (their ``Finish`` is not repeated), queued input stays
        queued, and an approval timeout keeps its deadline.
        """
        s = self.state
        if s.phase in ("finished", "created"):
            return self.start() if s.phase == "created" else []
        what, reason = RECOVERED[why]
        out: list[Decision] = []
        if s.phase == "streaming":
            s.phase, s.stream_id = "idle", None
            if s.stop is None:
                out.append(self.emit(TurnRetrying, attempt=1, delay=0.0, reason=f"{reason}: asking the model again"))
        for cs in s.batch or ():
            if cs.status == "stopping" and s.stop is None:  # it was stopped alone: its end is known
                out.extend(running.done(self, cs, *running.unreported(cs, unreported_note(why))))
            if cs.status != "running" or s.stop is not None:
                continue
            spec = self.specs.get(cs.call.name)
            if spec is not None and spec.retry_safe and s.cancel is None:
                out.extend(running.spawn(self, cs, spec))
            else:
                out.extend(running.done(self, cs, "interrupted", interrupted_content(what, reason)))
        if s.commit_pending:
            out.append(SetTimer("commit", s.options.approval_window, s.round))
        if s.pending_approvals and s.approval_deadline is not None:
            out.append(SetTimer("approval_timeout", max(0.0, s.approval_deadline - self._clock()), s.round))
        if s.stop is not None:  # stopped, but the process died before the end was written
            return out + self.end(stopping.end_reason(self))
        return out + [Persist("recovered")] + self.advance()

    def stop_work(self, reason: str, cause: StopCause = "user", grace: float | None = None) -> list[Decision]:
        """What stops the turn's work now without ending it or changing it: an ``Abort`` of
        its stream in flight and a stop of every running call. The TurnActor's one path to
        stop a turn's work on its host, whatever the reason (another host took the turn, its
        store did not answer in time, the runtime is closing, the store refused its write); a
        stop or cancel of the turn itself stops the same work in ``stopping.halt``, then ends
        the turn once its calls have. ``grace``: the calls end within it, if it is shorter
        than their ``stop_grace`` (a host whose lease lapses has that long before another may claim)."""
        return stopping.stop_work(self, reason, cause, grace)

    # -- dispatch -------------------------------------------------------------------------

    def handle(self, msg: Any) -> list[Decision]:
        """Apply one input and return what to do. An input that changes nothing returns [];
        a refused command returns only its ``Reply`` and changes nothing, not even a time. A
        command whose ``request_id`` the turn has answered before, with a change, is not
        applied again: it gets the same answer (``TurnState.answered``)."""
        if isinstance(msg, TURN_COMMANDS):
            rid = getattr(msg, "request_id", None)
            known = self.state.answered.get(rid) if rid is not None else None
            if known is not None and known.command == msg.kind:
                return [Reply(known)]
            msg = safe_command(msg)  # a reason becomes history and events: it must be valid text
        handler = _HANDLERS.get(type(msg))
        out = handler(self, msg) if handler is not None else []
        if any(not isinstance(d, Reply) for d in out):
            self.state.updated_at = self._clock()
        if any(isinstance(d, Persist) for d in out):
            self._remember_answers(out)
        return out

    def _remember_answers(self, out: list[Decision]) -> None:
        """The replies to commands that changed the turn, kept with it (the last ``ANSWERS``)."""
        kept = self.state.answered
        kept.update((d.reply.request_id, d.reply) for d in out if isinstance(d, Reply) and d.reply.ok and d.reply.request_id)
        for rid in list(kept)[: max(0, len(kept) - ANSWERS)]:
            del kept[rid]

    def _on_step(self, msg: TakeStep) -> list[Decision]:
        return self.advance(at_step=True)

    def _on_timer(self, msg: TimerFired) -> list[Decision]:
        s = self.state
        if s.phase == "finished":
            return []
        if msg.name == "cancel_grace":
            if s.stop is not None:
                return []
            s.stop = Marker(kind="stop", reason="cancel grace period expired", at=self._clock(), cause="grace_expired")
            return self.advance()
        if msg.name == stream.IDLE:
            return stream.on_idle(self, msg.token)
        if msg.token != s.round or s.batch is None:
            return []  # a timer of a batch that has ended
        if msg.name == "commit" and s.commit_pending:
            return self.advance(commit_due=True)
        if msg.name.startswith(("tool_timeout:", "stop_backstop:", "idle:")):
            return running.on_call_timer(self, *timer_call(msg.name))
        if msg.name == "approval_timeout" and s.pending_approvals:
            for cs in s.batch:
                if cs.status == "pending_approval":
                    cs.status, cs.decision, cs.decision_reason = "decided", "denied", "Approval timed out"
            s.commit_pending = True
            return [Persist("approval_decision")] + self.advance(commit_due=True)
        return []

    # -- what next ------------------------------------------------------------------------

    def advance(self, *, at_step: bool = False, commit_due: bool = False, answered: str | None = None) -> list[Decision]:
        """Carry out ``next_action`` until the turn waits (see ``priority``)."""
        out: list[Decision] = []
        while True:
            facts = situation(self.state, at_step=at_step, commit_due=commit_due, answered=answered is not None)
            action = next_action(facts)
            if action == "wait":
                return out
            if action == "step":
                return out + [ScheduleStep()]
            if action == "halt":
                out += stopping.halt(self)
                continue
            if action == "stop":
                return out + self.end(stopping.end_reason(self))
            if action == "cancel":
                return out + self.end("cancelled")
            if action == "answer":
                return out + self.end("length" if answered == "length" else "stop")
            if action == "max_rounds":
                return out + self.end("max_rounds")
            if action == "stream":
                return out + steering.take_inputs(self) + stream.start_stream(self)
            if action == "interrupt":
                out += steering.interrupt_stream(self)
            elif action == "hold":
                out += steering.hold(self)
            elif action == "resume":
                out += approvals.commit(self)
                commit_due = False
            elif action == "collect":
                running.append_tool_messages(self.state)
                self.state.round += 1
                self.state.phase = "idle"
                out.append(Persist("tools_done"))
                at_step = False
            elif action == "await":
                out += self._await()

    def _await(self) -> list[Decision]:
        s = self.state
        s.paused, s.phase, s.waiting_since = True, "awaiting_approval", self._clock()
        return [self.finish("awaiting_approval", pending_approvals=s.pending_approvals), Persist("paused")]

    def finish(self, reason: FinishReason, **fields: Any) -> Emit:
        """The run's ``Finish``: the history since the previous one (or all of it, if asked)."""
        s = self.state
        start = 0 if s.options.finish_history == "full" else s.finish_mark
        s.finish_mark = len(s.messages)
        cost = s.cost if s.provider.priced or s.cost > 0 else None
        return self.emit(
            Finish,
            finish_reason=reason,
            usage=s.usage,
            subagent_usage=s.subagent_usage,
            cost=cost,
            round=s.round,
            messages=s.messages[start:],
            history_from=start,
            **fields,
        )

    def end(self, reason: FinishReason, error: tuple[str, str] | None = None) -> list[Decision]:
        """End the turn: close every open call, then ``Error`` if any, then ``Finish``."""
        s = self.state
        out: list[Decision] = []
        cause, why = stopping.first_request(self)
        if s.batch is not None:
            what = {
                "stopped": "the turn was stopped", "cancelled": "the turn was cancelled",
                "budget_exceeded": "the turn's budget was spent",
            }.get(reason, "the turn ended")  # fmt: skip
            for cs in s.batch:
                if cs.status != "done":
                    out.extend(running.done(self, cs, "interrupted", interrupted_content(what, why or reason)))
            running.append_tool_messages(s)
        if reason in ("stopped", "cancelled"):
            message = "Agent run stopped" if reason == "stopped" else "Agent run cancelled"
            by = getattr(s.cancel or s.stop, "by", None)  # who sent the first request
            out.append(self.emit(Error, error_type=reason, message=message, detail=why, cause=cause, by=by))
        elif reason == "budget_exceeded":
            out.append(self.emit(Error, error_type=reason, message=why, cause="budget"))
        elif error is not None:
            out.append(self.emit(Error, error_type=error[0], message=error[1]))
        s.phase, s.finish_reason = "finished", reason
        s.inputs, s.hold = [], None  # input that never entered, a pause never resumed: the turn has ended
        return out + [self.finish(reason), Persist("finished"), Done()]

    # -- the verbs every handler uses (``core.Rules``) ------------------------------------

    def now(self) -> float:
        return self._clock()

    def emit(self, cls: type[TurnEvent], **fields: Any) -> Emit:
        s = self.state
        event = cls(
            turn_id=s.turn_id, seq=s.next_seq, parent_turn_id=s.parent_turn_id, root_turn_id=s.root_turn_id, **fields
        )
        s.next_seq += 1
        return Emit(event)

    def reply(
        self, command: Any, ok: bool, code: RejectCode | None, message: str, resumes_at: int | None = None
    ) -> list[Decision]:
        """A reply to the command's sender: always for a refusal, for success only if asked."""
        if ok and getattr(command, "request_id", None) is None:
            return []
        return [Reply(reply_for(command, ok, code, message, turn_id=self.state.turn_id, resumes_at=resumes_at))]


_HANDLERS: dict[type, Callable[[TurnRules, Any], list[Decision]]] = {
    TakeStep: TurnRules._on_step,
    TimerFired: TurnRules._on_timer,
    LLMDeltas: stream.on_stream_message,
    LLMRetrying: stream.on_stream_message,
    LLMRateLimited: stream.on_stream_message,
    LLMCompleted: stream.on_stream_message,
    LLMFailed: stream.on_stream_message,
    LLMUsage: stream.on_stream_message,
    StreamLost: stream.on_stream_lost,
    ToolResult: running.on_tool_result,
    ToolLost: running.on_tool_lost,
    ReportProgress: running.on_progress,
    StoreFailed: stopping.on_store_failed,
    ToolApprovalResponse: approvals.on_approval,
    RespondToApprovals: approvals.on_approvals,
    StopTurn: stopping.on_stop,
    CancelTurn: stopping.on_cancel,
    StopTool: stopping.on_stop_tool,
    SendInput: steering.on_send_input,
    PauseTurn: steering.on_pause,
    ResumeTurn: steering.on_resume,
}
"""Which handler takes each input: every message the rules know, in one place."""
