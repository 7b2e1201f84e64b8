"""The rules of a turn: what each message does, and what the turn does next, as plain code.

``TurnRules`` holds a ``TurnState`` and turns every input (a command, a stream message, a
tool result, a timer) into a list of *decisions* (``decisions``): events to emit, a stream
to start or abort, calls to run or interrupt, a step to take, a timer to set, a snapshot to
persist, a reply to send. It performs no I/O, reads time only through the clock it is given
and knows nothing of actors, so tests drive it directly; the ``TurnActor`` carries the
decisions out. It alone changes the turn's state and numbers its events; the parts that
need no state of their own are pure functions beside it (``assembly``, ``calls``,
``approvals``, ``priority``).

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
- an input that changes nothing returns no decision and touches nothing, not even a time;
  a refused command returns only its ``Reply``.

Why one module of about 660 lines: these handlers share the one mutable state and each
ends by asking ``next_action``; split by idea, they could not be built or tested apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from messages import (
    TURN_COMMANDS, CallState, CancelTurn, ChatMessage, Error, Finish, InterruptTool, LLMCompleted, LLMDeltas,
    LLMFailed, LLMRetrying, Marker, RejectCode, ReportProgress, RespondToApprovals, StartTurn, StopCause, StopTool,
    StopTurn, StreamChat, TextDelta, ToolApprovalRequest, ToolApprovalResponse, ToolCallStarted, ToolFinished,
    ToolOutcome, ToolProgress, ToolResult, ToolSpec, TurnEvent, TurnRetrying, TurnStarted, TurnState, reply_for,
)  # fmt: skip
from messages.events import FinishReason

from .approvals import ended_by, record, refusal
from .assembly import StreamAssembly, StreamMessage
from .calls import Fails, NeedsApproval, Runs, answered_before, classify, run_message, timer_call
from .decisions import (
    Abort, Decision, Done, Emit, Interrupt, Persist, Reply, ScheduleStep, SetTimer, Spawn, StoreFailed, Stream,
    StreamLost, TakeStep, TimerFired, ToolLost,
)  # fmt: skip
from .history import opening_problems
from .priority import next_action, situation
from .results import RECOVERED, Recovery, error_result, interrupted_content, with_note
from .sanitize import safe_command, safe_message, safe_text

__all__ = ["STOP_CONFIRM_MARGIN", "NeedsApproval", "Recovery", "TurnRules"]

STOP_CONFIRM_MARGIN = 5.0  # seconds past stop_grace a stopped call's process has to report its end

Mode = Literal["stop", "cancel"]
End = tuple[ToolOutcome, str]  # a call's outcome and its tool message


def _static_approval(spec: ToolSpec, arguments: dict[str, Any]) -> bool:
    return spec.approval != "never"


ANSWERS = 64  # the replies a turn keeps, by request id, so that a command sent again is applied once


class TurnRules:
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
        self._stream: StreamAssembly | None = None  # the stream in flight, if any

    @classmethod
    def from_start(
        cls,
        start: StartTurn,
        *,
        needs_approval: NeedsApproval = _static_approval,
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
            messages=list(start.messages),
            created_at=now,
            updated_at=now,
        )
        return cls(state, needs_approval=needs_approval, clock=clock)

    # -- opening and recovery -------------------------------------------------------------

    def start(self) -> list[Decision]:
        """The decisions that open the turn: ``TurnStarted``, then the first step."""
        s = self.state
        s.phase = "idle"
        out: list[Decision] = [self._emit(TurnStarted)]
        problems = opening_problems(s.messages, s.tools)
        if problems:
            return out + self._end("error", ("invalid_turn", "; ".join(problems)))
        return out + [Persist("started"), ScheduleStep()]

    def recover(self, why: Recovery = "restart") -> list[Decision]:
        """Carry on a turn loaded from the store: after a restart, on the host that took it
        over from a lost one (``takeover``), or on the host that claimed it back once its
        store answered again (``store``); each says so in what follows.

        A stop marker ends the turn stopped; a stream that died is asked for again (its
        partial text was streamed, not kept: a ``TurnRetrying`` says to drop it); a call that
        was running is closed as interrupted, or run again with the same idempotency key if
        its tool is ``retry_safe``; recorded results never run again; a pause stays a pause
        (its ``Finish`` is not repeated) and its approval timeout keeps its deadline.
        """
        s = self.state
        if s.phase in ("finished", "created"):
            return self.start() if s.phase == "created" else []
        what, reason = RECOVERED[why]
        out: list[Decision] = []
        if s.phase == "streaming":
            s.phase, s.stream_id = "idle", None
            if s.stop is None:
                out.append(self._emit(TurnRetrying, attempt=1, delay=0.0, reason=f"{reason}: asking the model again"))
        for cs in s.batch or ():
            if cs.status == "stopping" and s.stop is None:  # it was stopped alone: its end is known
                out.extend(self._done(cs, *_unreported(cs, f"{reason} before its process reported")))
            if cs.status != "running" or s.stop is not None:
                continue
            spec = self._specs.get(cs.call.name)
            if spec is not None and spec.retry_safe and s.cancel is None:
                out.extend(self._spawn(cs, spec))
            else:
                out.extend(self._done(cs, "interrupted", interrupted_content(what, reason)))
        if s.commit_pending:
            out.append(SetTimer("commit", s.options.approval_window, s.round))
        if s.pending_approvals and s.approval_deadline is not None:
            out.append(SetTimer("approval_timeout", max(0.0, s.approval_deadline - self._clock()), s.round))
        if s.stop is not None:  # stopped, but the process died before the end was written
            return out + self._end("cancelled" if s.cancel is not None else "stopped")
        return out + [Persist("recovered")] + self._advance()

    # -- dispatch -------------------------------------------------------------------------

    def handle(self, msg: Any) -> list[Decision]:
        """Apply one input and return what to do. An input that changes nothing returns [];
        a refused command returns only its ``Reply`` and changes nothing, not even a time. A
        command whose ``request_id`` the turn has answered before, with a change, is not
        applied again: it gets the same answer (``TurnState.answered``)."""
        if isinstance(msg, TURN_COMMANDS):
            rid = getattr(msg, "request_id", None)
            if rid is not None and rid in self.state.answered:
                return [Reply(self.state.answered[rid])]
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
        return self._advance(at_step=True)

    def _on_timer(self, msg: TimerFired) -> list[Decision]:
        s = self.state
        if s.phase == "finished":
            return []
        if msg.name == "cancel_grace":
            if s.stop is not None:
                return []
            s.stop = Marker(kind="stop", reason="cancel grace period expired", at=self._clock(), cause="grace_expired")
            return self._advance()
        if msg.token != s.round or s.batch is None:
            return []  # a timer of a batch that has ended
        if msg.name == "commit" and s.commit_pending:
            return self._advance(commit_due=True)
        if msg.name.startswith(("tool_timeout:", "stop_backstop:")):
            return self._on_call_timer(*timer_call(msg.name))
        if msg.name == "approval_timeout" and s.pending_approvals:
            for cs in s.batch:
                if cs.status == "pending_approval":
                    cs.status, cs.decision, cs.decision_reason = "decided", "denied", "Approval timed out"
            s.commit_pending = True
            return [Persist("approval_decision")] + self._advance(commit_due=True)
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
            if action == "halt":
                out += self._halt()
                continue
            if action == "stop":
                return out + self._end("cancelled" if self.state.cancel is not None else "stopped")
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
                self._append_tool_messages()
                self.state.round += 1
                self.state.phase = "idle"
                out.append(Persist("tools_done"))
                at_step = False
            elif action == "pause":
                out += self._pause()

    def _pause(self) -> list[Decision]:
        s = self.state
        s.paused, s.phase, s.waiting_since = True, "awaiting_approval", self._clock()
        return [self._finish("awaiting_approval", pending_approvals=s.pending_approvals), Persist("paused")]

    def _finish(self, reason: FinishReason, **fields: Any) -> Emit:
        """The run's ``Finish``: the history since the previous one (or all of it, if asked)."""
        s = self.state
        start = 0 if s.options.finish_history == "full" else s.finish_mark
        s.finish_mark = len(s.messages)
        return self._emit(
            Finish,
            finish_reason=reason,
            usage=s.usage,
            round=s.round,
            messages=s.messages[start:],
            history_from=start,
            **fields,
        )

    # -- the model's stream ---------------------------------------------------------------

    def _start_stream(self) -> list[Decision]:
        """The next model call; its start is recorded, so a turn recovered mid-stream says it
        asks again (``recover``)."""
        s = self.state
        s.streams += 1
        s.stream_id = f"{s.turn_id}/s{s.streams}"
        s.phase = "streaming"
        self._stream = StreamAssembly(s.stream_id)
        tools = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in s.tools]
        chat = StreamChat(stream_id=s.stream_id, provider=s.provider, messages=list(s.messages), tools=tools)
        return [Persist("stream_started"), Stream(chat)]

    def _on_stream_message(self, msg: StreamMessage) -> list[Decision]:
        if self.state.phase != "streaming" or self._stream is None:
            return []  # a stream we aborted or finished
        out: list[Decision] = []
        for m in self._stream.accept(msg):
            if self.state.phase != "streaming":
                break
            if isinstance(m, LLMDeltas):
                text = safe_text(m.text)
                self._stream.add_text(text)
                out.append(self._emit(TextDelta, text=text))
            elif isinstance(m, LLMRetrying):
                out.append(self._emit(TurnRetrying, attempt=m.attempt, delay=m.delay, reason=m.reason))
            elif isinstance(m, LLMCompleted):
                out.extend(self._on_response(m))
            else:
                out.extend(self._on_stream_failed(m.error_type, m.message))
        return out

    def _on_stream_lost(self, msg: StreamLost) -> list[Decision]:
        if msg.stream_id != self.state.stream_id or self.state.phase != "streaming":
            return []
        return self._on_stream_failed("stream_lost", f"LLM stream lost: {msg.detail}")

    def _on_stream_failed(self, error_type: str, message: str) -> list[Decision]:
        self._keep_partial_text()
        self.state.phase = "idle"
        if self.state.cancel is not None:
            return self._end("cancelled")
        return self._end("error", (error_type, message))

    def _keep_partial_text(self) -> None:
        """Completed work is kept: the text of a stream that ended early joins the history."""
        text = self._stream.text if self._stream is not None else ""
        if text:
            self.state.messages.append(ChatMessage.assistant(text))
        self._stream = None
        self.state.stream_id = None

    def _on_response(self, msg: LLMCompleted) -> list[Decision]:
        s = self.state
        if msg.usage is not None:
            s.usage = s.usage + msg.usage
        message = safe_message(msg.message)
        s.messages.append(message)
        s.stream_id, s.phase, self._stream = None, "idle", None
        calls = message.tool_calls or []
        if not calls:
            return [Persist("llm_response")] + self._advance(answered=msg.finish_reason)
        s.batch = [CallState(call=c) for c in calls]
        out: list[Decision] = [Persist("llm_response")]
        if s.cancel is None:
            s.phase = "tools"
            for cs in s.batch:
                out.extend(self._classify(cs))
            if s.pending_approvals and s.options.approval_timeout is not None:
                s.approval_deadline = self._clock() + s.options.approval_timeout
                out.append(SetTimer("approval_timeout", s.options.approval_timeout, s.round))
        return out + self._advance()

    # -- tool calls -----------------------------------------------------------------------

    def _classify(self, cs: CallState) -> list[Decision]:
        """Decide a fresh call's fate: it fails at once, waits for approval, or runs now."""
        fate = classify(cs.call, self._specs.get(cs.call.name), self._needs_approval)
        if isinstance(fate, Fails):
            return self._done(cs, "failed", fate.content)
        cs.arguments = fate.arguments
        if isinstance(fate, Runs):
            return self._spawn(cs, self._specs[cs.call.name])
        cs.status = "pending_approval"
        description = self._specs[cs.call.name].description
        request: dict[str, Any] = dict(call_id=cs.call.id, name=cs.call.name, arguments=fate.arguments)
        request.update(description=description, approvers=self._specs[cs.call.name].approvers)
        return [self._emit(ToolApprovalRequest, **request)]

    def _spawn(self, cs: CallState, spec: ToolSpec) -> list[Decision]:
        s = self.state
        cs.status = "running"
        cs.attempt += 1
        run = run_message(s, cs, spec)
        started = {"call_id": cs.call.id, "name": cs.call.name, "arguments": cs.arguments, "round": s.round}
        started["by"] = cs.decided_by
        out: list[Decision] = [Spawn(run), self._emit(ToolCallStarted, **started)]
        timeout = spec.timeout if spec.timeout is not None else s.options.tool_timeout
        if timeout is not None:
            out.append(SetTimer(f"tool_timeout:{cs.call.id}:{cs.attempt}", timeout, s.round))
        return out

    def _done(self, cs: CallState, outcome: ToolOutcome, content: str) -> list[Decision]:
        cs.status, cs.outcome, cs.content = "done", outcome, content
        end = dict(call_id=cs.call.id, name=cs.call.name, outcome=outcome, content=content, by=ended_by(cs))
        return [self._emit(ToolFinished, **end)]

    def _append_tool_messages(self) -> None:
        s = self.state
        for cs in s.batch or ():
            s.messages.append(ChatMessage.tool(cs.content or "", cs.call.id, name=cs.call.name))
        s.batch = None
        s.paused = s.commit_pending = False
        s.approval_deadline = s.waiting_since = None

    def _on_tool_result(self, msg: ToolResult) -> list[Decision]:
        if _stale(self.state.call(msg.call_id), msg.attempt):
            return []  # an earlier run's: never recorded
        return self._call_ended(msg.call_id, msg.outcome, safe_text(msg.content))

    def _on_tool_lost(self, msg: ToolLost) -> list[Decision]:
        cs = self.state.call(msg.call_id)
        if cs is not None and cs.status == "stopping":  # stopped, and its process is gone
            return self._call_ended(msg.call_id, *_unreported(cs, msg.message))
        return self._call_ended(msg.call_id, "failed", error_result(msg.message))

    def _call_ended(self, call_id: str, outcome: ToolOutcome, content: str) -> list[Decision]:
        """A call's end as reported (a stopped call's too: completed work is kept), but a time limit's stays."""
        s = self.state
        cs = s.call(call_id)
        if s.phase == "finished" or cs is None or cs.status not in ("running", "stopping"):
            return []  # a duplicate, or the turn has ended: the first end wins
        if cs.status == "stopping" and cs.outcome == "failed":  # past its time limit
            outcome, content = "failed", cs.content or content
        return self._done(cs, outcome, content) + [Persist("tool_result")] + self._advance()

    def _on_call_timer(self, what: str, call_id: str, attempt: str) -> list[Decision]:
        """A call past its time limit is stopped (it fails, saying so, once ended); a stopped call whose
        process never reported (its node vanished, say) ends as it was told it would, saying so."""
        s, status = self.state, "stopping" if what == "stop_backstop" else "running"
        cs = s.call(call_id)
        if cs is None or str(cs.attempt) != attempt or cs.status != status:
            return []
        if what == "stop_backstop":
            why = f"its tool process did not report its end within {s.options.stop_grace + STOP_CONFIRM_MARGIN:g} s"
            return self._call_ended(call_id, *_unreported(cs, why))
        spec = self._specs[cs.call.name]
        limit = spec.timeout if spec.timeout is not None else s.options.tool_timeout
        reason = f"Tool '{cs.call.name}' timed out after {limit:g} s"
        return self._stop_call(cs, reason, ("failed", error_result(reason))) + [Persist("call_stopping")]

    def _stop_call(self, cs: CallState, why: str, end: End, cause: StopCause = "user") -> list[Decision]:
        """Interrupt a running call: ``stopping`` until its process reports, or its backstop gives it ``end``."""
        s = self.state
        cs.status, (cs.outcome, cs.content) = "stopping", end
        name, delay = f"stop_backstop:{cs.call.id}:{cs.attempt}", s.options.stop_grace + STOP_CONFIRM_MARGIN
        return [self._interrupt(cs, "stop", why, cause), SetTimer(name, delay, s.round)]

    def _on_progress(self, msg: ReportProgress) -> list[Decision]:
        cs = self.state.call(msg.call_id)
        if cs is None or cs.status != "running" or self.state.phase == "finished" or _stale(cs, msg.attempt):
            return []
        if msg.approval is not None:  # a child turn's call waits for a human: say so here
            a = msg.approval
            fields = dict(name=a["name"], arguments=a.get("arguments"), description=a.get("description", ""))
            fields["approvers"] = a.get("approvers")
            return [self._emit(ToolApprovalRequest, call_id=a["call_id"], child_turn_id=a["turn_id"], **fields)]
        return [self._emit(ToolProgress, call_id=msg.call_id, data=msg.data)]

    # -- approvals ------------------------------------------------------------------------

    def _on_approval(self, msg: ToolApprovalResponse) -> list[Decision]:
        return self._decide([msg], False, None, msg)

    def _on_approvals(self, msg: RespondToApprovals) -> list[Decision]:
        return self._decide(msg.responses, msg.deny_rest, msg.deny_reason, msg)

    def _decide(
        self,
        responses: Sequence[ToolApprovalResponse],
        deny_rest: bool,
        deny_reason: str | None,
        command: ToolApprovalResponse | RespondToApprovals,
    ) -> list[Decision]:
        s = self.state
        refused = refusal(s, responses, deny_rest, command.by)
        if refused is not None:
            return self._reply(command, False, *refused)
        record(s, responses, deny_rest, deny_reason, command.by)
        out: list[Decision] = [Persist("approval_decision")]
        resumes_at = None
        if not s.pending_approvals and not s.commit_pending:
            s.commit_pending = True
            resumes_at = s.next_seq if s.paused else None
            out.append(SetTimer("commit", s.options.approval_window, s.round))
        return out + self._reply(command, True, None, "recorded", resumes_at)

    def _commit(self) -> list[Decision]:
        """Approval-resume: run approved calls, answer denied ones."""
        s = self.state
        s.commit_pending = False
        s.phase = "tools"
        out: list[Decision] = [Persist("approvals_committed")]
        for cs in s.batch or ():
            if cs.status != "decided":
                continue
            if cs.decision == "approved":
                out.extend(self._spawn(cs, self._specs[cs.call.name]))
            else:
                reason = "User denied" if cs.decision_reason is None else cs.decision_reason
                out.extend(self._done(cs, "denied", f"Rejected: {reason}"))
        return out

    # -- stop and cancel ------------------------------------------------------------------

    def _first_request(self) -> tuple[StopCause, str]:
        """The cause and text of the first stop or cancel request: what every consequence says."""
        first = self.state.cancel or self.state.stop
        return (first.cause, first.reason) if first is not None else ("user", "")

    def _on_stop(self, msg: StopTurn) -> list[Decision]:
        s = self.state
        if s.phase == "finished" or s.stop is not None:
            return self._reply(msg, True, None, "no effect")
        resumes_at = s.next_seq if s.paused else None
        s.stop = Marker(kind="stop", reason=msg.reason, at=self._clock(), cause=msg.cause, by=msg.by)
        return self._advance() + self._reply(msg, True, None, "", resumes_at)

    def _on_cancel(self, msg: CancelTurn) -> list[Decision]:
        s = self.state
        if s.phase == "finished" or s.cancel is not None or s.stop is not None:
            return self._reply(msg, True, None, "no effect")
        ok = self._reply(msg, True, None, "", s.next_seq if s.paused else None)
        s.cancel = Marker(kind="cancel", reason=msg.reason, at=self._clock(), grace=msg.grace, cause=msg.cause)
        s.cancel.by = msg.by
        out: list[Decision] = [Persist("cancel_marker"), *self._interrupt_running("cancel", msg.reason, msg.cause)]
        if msg.grace is not None:
            out.append(SetTimer("cancel_grace", msg.grace, 0))
        return out + self._advance() + ok

    def stop_work(self, reason: str, cause: StopCause = "user", grace: float | None = None) -> list[Decision]:
        """What stops the turn's work now without ending it or changing it: an ``Abort`` of
        its stream in flight and a stop of every running call. The TurnActor's one path to
        stop a turn's work on its host, whatever the reason (another host took the turn, its
        store did not answer in time, the runtime is closing, the store refused its write); a
        stop or cancel of the turn itself stops the same work in ``_halt``, then ends the turn
        once its calls have. ``grace``: the calls end within it, if it is shorter than their
        ``stop_grace`` (a host whose lease lapses has that long before another may claim)."""
        s = self.state
        abort: list[Decision] = [Abort(s.stream_id, reason, cause)] if s.phase == "streaming" and s.stream_id else []
        return abort + self._interrupt_running("stop", reason, cause, grace)

    def _halt(self) -> list[Decision]:
        """Stop now: abort the stream, interrupt every running call (it ends later: rows 2 to 4)."""
        s = self.state
        cause, why = self._first_request()
        out: list[Decision] = [Persist("stop_marker"), *self._abort_stream(why, cause)]
        if s.phase == "streaming":
            s.phase = "idle"
        what = "the turn was cancelled" if s.cancel is not None else "the turn was stopped"
        for cs in [cs for cs in s.batch or () if cs.status == "running"]:
            out += self._stop_call(cs, why, ("interrupted", interrupted_content(what, why)), cause)
        return out

    def _abort_stream(self, reason: str, cause: StopCause = "user") -> list[Decision]:
        s = self.state
        if s.phase != "streaming" or s.stream_id is None:
            return []
        abort = Abort(s.stream_id, reason, cause)
        self._keep_partial_text()
        return [abort]

    def _interrupt_running(self, mode: Mode, reason: str, cause: StopCause = "user", grace: float | None = None) -> list[Decision]:
        return [self._interrupt(cs, mode, reason, cause, grace) for cs in self.state.batch or () if cs.status == "running"]

    def _interrupt(self, cs: CallState, mode: Mode, reason: str, cause: StopCause, grace: float | None = None) -> Interrupt:
        t, c = self.state.turn_id, cs.call.id
        return Interrupt(InterruptTool(turn_id=t, call_id=c, mode=mode, reason=reason, cause=cause, attempt=cs.attempt, grace=grace))

    def _on_stop_tool(self, msg: StopTool) -> list[Decision]:
        s = self.state
        if s.phase == "finished":
            return self._reply(msg, False, "turn_finished", f"turn {s.turn_id} has finished ({s.finish_reason})")
        cs = s.call(msg.call_id)
        if cs is None and answered_before(s.messages, msg.call_id):
            return self._reply(msg, False, "not_waiting", f"call {msg.call_id!r} has already finished")
        if cs is None:
            return self._reply(msg, False, "unknown_call", f"call {msg.call_id!r} is not running in turn {s.turn_id}")
        if cs.status == "done":
            return self._reply(msg, False, "not_waiting", f"call {msg.call_id!r} has already finished")
        if cs.status == "stopping":
            return self._reply(msg, True, None, "no effect")
        resumes_at = s.next_seq if s.paused else None  # ending the last waiting call resumes the turn
        cs.stopped_by = msg.by
        stopped = interrupted_content("the call was stopped", msg.reason)
        if cs.status == "running":  # it ends once its process has reported its end
            out = self._stop_call(cs, msg.reason, ("interrupted", stopped)) + [Persist("call_stopping")]
            return out + self._reply(msg, True, None, "", resumes_at)
        out = self._done(cs, "interrupted", stopped) + [Persist("tool_result")] + self._advance()
        return out + self._reply(msg, True, None, "", resumes_at if not s.paused else None)

    def _on_store_failed(self, msg: StoreFailed) -> list[Decision]:
        """The store refused the turn's write (not an outage: that only delays the turn); the
        turn, as last stored, ends with an error, its work stopped."""
        if self.state.phase == "finished":
            return []
        out = self.stop_work("the turn store refused its write")
        if self.state.phase == "streaming":
            self._keep_partial_text()
        return out + self._end("error", ("store_error", f"the turn store refused its write: {msg.detail}"))

    # -- the end --------------------------------------------------------------------------

    def _end(self, reason: FinishReason, error: tuple[str, str] | None = None) -> list[Decision]:
        """End the turn: close every open call, then ``Error`` if any, then ``Finish``."""
        s = self.state
        out: list[Decision] = []
        cause, why = self._first_request()
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
            by = getattr(s.cancel or s.stop, "by", None)  # who sent the first request
            out.append(self._emit(Error, error_type=reason, message=message, detail=why, cause=cause, by=by))
        elif error is not None:
            out.append(self._emit(Error, error_type=error[0], message=error[1]))
        s.phase, s.finish_reason = "finished", reason
        return out + [self._finish(reason), Persist("finished"), Done()]

    # -- helpers --------------------------------------------------------------------------

    def _emit(self, cls: type[TurnEvent], **fields: Any) -> Emit:
        s = self.state
        event = cls(
            turn_id=s.turn_id, seq=s.next_seq, parent_turn_id=s.parent_turn_id, root_turn_id=s.root_turn_id, **fields
        )
        s.next_seq += 1
        return Emit(event)

    def _reply(
        self, command: Any, ok: bool, code: RejectCode | None, message: str, resumes_at: int | None = None
    ) -> list[Decision]:
        """A reply to the command's sender: always for a refusal, for success only if asked."""
        if ok and getattr(command, "request_id", None) is None:
            return []
        return [Reply(reply_for(command, ok, code, message, turn_id=self.state.turn_id, resumes_at=resumes_at))]


def _unreported(cs: CallState, why: str) -> End:
    """The end of a stopped call whose process did not report it: the one it was given, saying why."""
    return cs.outcome or "interrupted", with_note(cs.content or "", why)


_HANDLERS: dict[type, Callable[[TurnRules, Any], list[Decision]]] = {
    TakeStep: TurnRules._on_step,
    TimerFired: TurnRules._on_timer,
    LLMDeltas: TurnRules._on_stream_message,
    LLMRetrying: TurnRules._on_stream_message,
    LLMCompleted: TurnRules._on_stream_message,
    LLMFailed: TurnRules._on_stream_message,
    StreamLost: TurnRules._on_stream_lost,
    ToolResult: TurnRules._on_tool_result,
    ToolLost: TurnRules._on_tool_lost,
    ReportProgress: TurnRules._on_progress,
    StoreFailed: TurnRules._on_store_failed,
    ToolApprovalResponse: TurnRules._on_approval,
    RespondToApprovals: TurnRules._on_approvals,
    StopTurn: TurnRules._on_stop,
    CancelTurn: TurnRules._on_cancel,
    StopTool: TurnRules._on_stop_tool,
}
"""Which handler takes each input: every message the rules know, in one place."""


def _stale(cs: CallState | None, attempt: int | None) -> bool:
    """A result or progress report from another run of the call than its current one."""
    return cs is not None and attempt is not None and attempt != cs.attempt
