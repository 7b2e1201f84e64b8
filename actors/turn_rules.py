"""The rules of a turn: what each message does, in which priority, as plain code.

``TurnRules`` holds a ``TurnState`` and turns every input (a command, a stream message, a
tool result, a timer) into a list of *decisions*: events to emit, a stream to start or
abort, tools to spawn or interrupt, a step to take, a timer to set, a snapshot to persist,
a reply to send. It performs no I/O and knows nothing of actors, so tests drive it
directly; ``TurnActor`` is a thin shell that carries the decisions out.

Guarantees, each tested:

- Priority is decided by mailbox order, because the loop only advances in a self-sent
  step (``ScheduleStep``) and approvals commit in a timer after ``approval_window``:
  a stop or cancel already queued is handled first. In a step: cancel > max-rounds > the
  next LLM call; an approval commit never runs once cancel or stop was requested.
- Every tool call of an assistant message ends with exactly one ``ToolFinished`` and one
  tool message, appended in the order of ``tool_calls`` once the whole batch has ended.
- Every run of events ends with exactly one ``Finish``; a terminal one is the last event.
- Stop and cancel are idempotent: the first request decides the finish reason and its
  reason text; a later stop still acts at once.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from messages import (
    CallState,
    CancelTurn,
    ChatMessage,
    ControlReply,
    Error,
    Finish,
    InterruptTool,
    LLMCompleted,
    LLMDeltas,
    LLMFailed,
    LLMRetrying,
    Marker,
    RespondToApprovals,
    RunTool,
    StartTurn,
    StopTool,
    StopTurn,
    StreamChat,
    TextDelta,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolCallStarted,
    ToolFinished,
    ToolProgress,
    ToolResult,
    ToolSpec,
    TurnEvent,
    TurnRetrying,
    TurnStarted,
    TurnState,
)
from messages.tool import ReportProgress, ToolOutcome

from .history import history_problems
from .text import TooDeep, safe_json, safe_text
from .tools import error_result as error_content

__all__ = [
    "Abort",
    "Decision",
    "Done",
    "Emit",
    "Interrupt",
    "Persist",
    "Reply",
    "ScheduleStep",
    "SetTimer",
    "Spawn",
    "Stream",
    "TakeStep",
    "TimerFired",
    "ToolLost",
    "StoreFailed",
    "StreamLost",
    "TurnRules",
    "error_content",
    "interrupted_content",
]


# -- decisions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Emit:
    """Send ``event`` to every subscriber and append it to the turn's log."""

    event: TurnEvent


@dataclass(frozen=True)
class Stream:
    """Ask the LLMActor to stream ``request``."""

    request: StreamChat


@dataclass(frozen=True)
class Abort:
    """Abort stream ``stream_id`` now."""

    stream_id: str
    reason: str


@dataclass(frozen=True)
class Spawn:
    """Spawn a ToolActor for ``run.call`` and give it ``run``."""

    run: RunTool


@dataclass(frozen=True)
class Interrupt:
    """Tell the ToolActor of ``message.call_id`` to stop or cancel."""

    message: InterruptTool


@dataclass(frozen=True)
class ScheduleStep:
    """Send the TurnActor a ``TakeStep``, queued behind what is already in its mailbox."""


@dataclass(frozen=True)
class SetTimer:
    """Deliver ``TimerFired(name, token)`` after ``delay`` seconds."""

    name: str
    delay: float
    token: int


@dataclass(frozen=True)
class Persist:
    """Write a snapshot of the state; ``transition`` names why."""

    transition: str


@dataclass(frozen=True)
class Reply:
    """Answer the sender of the command being handled."""

    reply: ControlReply


@dataclass(frozen=True)
class Done:
    """The turn has ended; the actor may wind down."""


Decision = Emit | Stream | Abort | Spawn | Interrupt | ScheduleStep | SetTimer | Persist | Reply | Done


# -- inputs that are not public messages ----------------------------------------------------


@dataclass(frozen=True)
class TakeStep:
    """The self-sent step; the loop advances only here."""

    turn_id: str


@dataclass(frozen=True)
class TimerFired:
    """A timer set by ``SetTimer`` expired."""

    name: str
    token: int


@dataclass(frozen=True)
class ToolLost:
    """The ToolActor of ``call_id`` exited, could not be placed, or its host vanished,
    before it answered; ``message`` says which, for the model."""

    call_id: str
    message: str


@dataclass(frozen=True)
class StreamLost:
    """The LLMActor exited while it streamed ``stream_id``."""

    stream_id: str
    detail: str


@dataclass(frozen=True)
class StoreFailed:
    """The turn's write-ahead to the store failed; the turn cannot go on durably."""

    detail: str


def interrupted_content(what: str, reason: str) -> str:
    """The synthesized tool message of a call that was interrupted, saying why."""
    return error_content(f"Interrupted: {what} ({reason})")


NeedsApproval = Callable[[ToolSpec, dict[str, Any]], bool]


def _static_approval(spec: ToolSpec, arguments: dict[str, Any]) -> bool:
    return spec.approval != "never"


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
        # The stream in flight: its text so far and out-of-order messages by seq.
        self._text = ""
        self._next_seq = 0
        self._early: dict[int, Any] = {}

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_start(cls, start: StartTurn, **kw: Any) -> TurnRules:
        """A new turn for ``start``; call ``start()`` for its first decisions."""
        clock = kw.get("clock", time.time)
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
        return cls(state, **kw)

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
        """The decisions that carry on a turn loaded from the store after a restart.

        A stop marker ends the turn stopped; a stream that died is asked for again; a call
        that was running when the process died is closed as interrupted, or run again with
        the same idempotency key if its tool is ``retry_safe``; recorded results are never
        run again; a pause stays a pause (its ``Finish`` is not repeated) and its approval
        timeout keeps its original deadline.
        """
        s = self.state
        if s.phase in ("finished", "created"):
            return self.start() if s.phase == "created" else []
        if s.stop is not None:  # stopped, but the process died before the end was written
            s.stream_id = None
            return self._end("cancelled" if s.cancel is not None else "stopped")
        out: list[Decision] = []
        if s.phase == "streaming":
            s.phase, s.stream_id = "idle", None
            out.append(
                self._emit(
                    TurnRetrying, attempt=1, delay=0.0, reason="recovered after a restart: asking the model again"
                )
            )
        if s.batch is None:
            return out + [Persist("recovered"), ScheduleStep()]
        for cs in s.batch:
            if cs.status != "running":
                continue
            spec = self._specs.get(cs.call.name)
            if spec is not None and spec.retry_safe and s.cancel is None:
                out.extend(self._spawn(cs, spec))
            else:
                out.extend(
                    self._done(
                        cs,
                        "interrupted",
                        interrupted_content("the runtime stopped while the call ran", "recovered after a restart"),
                    )
                )
        if s.commit_pending:
            out.append(SetTimer("commit", s.options.approval_window, s.round))
        if s.pending_approvals and s.approval_deadline is not None:
            out.append(SetTimer("approval_timeout", max(0.0, s.approval_deadline - self._clock()), s.round))
        return out + [Persist("recovered")] + self._after_call_change()

    # -- dispatch -------------------------------------------------------------------------

    def handle(self, msg: Any) -> list[Decision]:
        """Apply one input and return what to do. Unknown inputs change nothing."""
        s = self.state
        s.updated_at = self._clock()
        if isinstance(msg, TakeStep):
            return self._on_step()
        if isinstance(msg, (LLMDeltas, LLMRetrying, LLMCompleted, LLMFailed)):
            return self._on_stream_message(msg)
        if isinstance(msg, ToolResult):
            return self._on_tool_result(msg.call_id, msg.outcome, safe_text(msg.content))
        if isinstance(msg, ToolLost):
            return self._on_tool_result(msg.call_id, "failed", error_content(msg.message))
        if isinstance(msg, StoreFailed):
            if s.phase == "finished":
                return []
            if s.phase == "streaming" and s.stream_id is not None:
                aborted: list[Decision] = [Abort(s.stream_id, "the store failed")]
                self._keep_partial_text()
            else:
                aborted = []
            interrupts = [
                Interrupt(InterruptTool(turn_id=s.turn_id, call_id=cs.call.id, mode="stop", reason="the store failed"))
                for cs in s.batch or ()
                if cs.status == "running"
            ]
            return aborted + interrupts + self._end("error", ("store_error", f"the turn store failed: {msg.detail}"))
        if isinstance(msg, StreamLost):
            if msg.stream_id != s.stream_id or s.phase != "streaming":
                return []
            return self._on_stream_failed("stream_lost", f"LLM stream lost: {msg.detail}")
        if isinstance(msg, ReportProgress):
            cs = s.call(msg.call_id)
            if cs is None or cs.status != "running" or s.phase == "finished":
                return []
            return [self._emit(ToolProgress, call_id=msg.call_id, data=msg.data)]
        if isinstance(msg, ToolApprovalResponse):
            return self._on_approvals([msg], False, None, msg.request_id, "tool_approval_response")
        if isinstance(msg, RespondToApprovals):
            return self._on_approvals(
                msg.responses, msg.deny_rest, msg.deny_reason, msg.request_id, "respond_to_approvals"
            )
        if isinstance(msg, StopTurn):
            return self._on_stop(msg.reason, msg.request_id)
        if isinstance(msg, CancelTurn):
            return self._on_cancel(msg.reason, msg.grace, msg.request_id)
        if isinstance(msg, StopTool):
            return self._on_stop_tool(msg.call_id, msg.reason, msg.request_id)
        if isinstance(msg, TimerFired):
            return self._on_timer(msg.name, msg.token)
        return []

    # -- the loop -------------------------------------------------------------------------

    def _on_step(self) -> list[Decision]:
        s = self.state
        if s.phase in ("finished", "streaming"):
            return []
        if s.cancel is not None:
            if self._running():
                return []  # cooperative: the running calls end first
            return self._end("cancelled")
        if s.phase != "idle":
            return []
        if s.round >= s.options.max_rounds:
            return self._end("max_rounds")
        return self._start_stream()

    def _start_stream(self) -> list[Decision]:
        s = self.state
        s.streams += 1
        s.stream_id = f"{s.turn_id}/s{s.streams}"
        s.phase = "streaming"
        self._text, self._next_seq, self._early = "", 0, {}
        tools = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in s.tools]
        request = StreamChat(stream_id=s.stream_id, provider=s.provider, messages=list(s.messages), tools=tools)
        return [Stream(request)]

    def _on_stream_message(self, msg: Any) -> list[Decision]:
        s = self.state
        if s.phase != "streaming" or msg.stream_id != s.stream_id or msg.seq < self._next_seq:
            return []  # a stream we aborted or finished, or a duplicate
        self._early[msg.seq] = msg
        out: list[Decision] = []
        while self._next_seq in self._early and s.phase == "streaming":
            m = self._early.pop(self._next_seq)
            self._next_seq += 1
            if isinstance(m, LLMDeltas):
                text = safe_text(m.text)
                self._text += text
                out.append(self._emit(TextDelta, text=text))
            elif isinstance(m, LLMRetrying):
                out.append(self._emit(TurnRetrying, attempt=m.attempt, delay=m.delay, reason=m.reason))
            elif isinstance(m, LLMCompleted):
                out.extend(self._on_response(m))
            else:
                out.extend(self._on_stream_failed(m.error_type, m.message))
        return out

    def _on_stream_failed(self, error_type: str, message: str) -> list[Decision]:
        s = self.state
        self._keep_partial_text()
        s.phase = "idle"
        if s.cancel is not None:
            return self._end("cancelled")
        return self._end("error", (error_type, message))

    def _keep_partial_text(self) -> None:
        """Completed work is kept: the text of a stream that ended early joins the history."""
        s = self.state
        if self._text:
            s.messages.append(ChatMessage.assistant(self._text))
        self._text, self._early = "", {}
        s.stream_id = None

    def _on_response(self, msg: LLMCompleted) -> list[Decision]:
        s = self.state
        if msg.usage is not None:
            s.usage = s.usage + msg.usage
        message = _safe_message(msg.message)
        s.messages.append(message)
        s.stream_id = None
        self._text = ""
        calls = message.tool_calls or []
        if not calls:
            s.phase = "idle"
            if s.cancel is not None:
                return [Persist("llm_response")] + self._end("cancelled")
            return [Persist("llm_response")] + self._end("length" if msg.finish_reason == "length" else "stop")
        s.batch = [CallState(call=c) for c in calls]
        s.phase = "tools"
        out: list[Decision] = []
        if s.cancel is not None:
            s.phase = "idle"
            return [Persist("llm_response"), ScheduleStep()]
        for cs in s.batch:
            out.extend(self._classify(cs))
        if s.pending_approvals and s.options.approval_timeout is not None:
            s.approval_deadline = self._clock() + s.options.approval_timeout
            out.append(SetTimer("approval_timeout", s.options.approval_timeout, s.round))
        out.insert(0, Persist("llm_response"))
        return out + self._after_call_change()

    def _classify(self, cs: CallState) -> list[Decision]:
        """Decide a fresh call's fate: fails at once, waits for approval, or runs now."""
        name = cs.call.name
        spec = self._specs.get(name)
        if spec is None:
            return self._done(cs, "failed", f"Tool '{name}' not found")
        raw = (cs.call.arguments or "").strip() or "{}"
        try:
            args = safe_json(json.loads(raw))
        except TooDeep as exc:
            return self._done(cs, "failed", error_content(f"Invalid arguments for tool '{name}': {exc}"))
        except (ValueError, RecursionError) as exc:
            return self._done(
                cs, "failed", error_content(f"Invalid arguments for tool '{name}': not valid JSON ({exc})")
            )
        if not isinstance(args, dict):
            return self._done(
                cs,
                "failed",
                error_content(
                    f"Invalid arguments for tool '{name}': expected a JSON object, got {type(args).__name__}"
                ),
            )
        cs.arguments = args
        if self._needs_approval(spec, args):
            cs.status = "pending_approval"
            return [
                self._emit(
                    ToolApprovalRequest, call_id=cs.call.id, name=name, arguments=args, description=spec.description
                )
            ]
        return self._spawn(cs, spec)

    def _spawn(self, cs: CallState, spec: ToolSpec) -> list[Decision]:
        s = self.state
        cs.status = "running"
        cs.attempt += 1
        run = RunTool(
            turn_id=s.turn_id,
            root_turn_id=s.root_turn_id,
            call=cs.call,
            spec=spec,
            arguments=cs.arguments or {},
            idempotency_key=f"{s.turn_id}:{cs.call.id}",
            attempt=cs.attempt,
            stop_grace=s.options.stop_grace,
            heartbeat=s.options.heartbeat if spec.requires else None,
            provider=s.provider,
        )
        return [
            Spawn(run),
            self._emit(ToolCallStarted, call_id=cs.call.id, name=cs.call.name, arguments=cs.arguments, round=s.round),
        ]

    def _done(self, cs: CallState, outcome: ToolOutcome, content: str) -> list[Decision]:
        cs.status, cs.outcome, cs.content = "done", outcome, content
        return [self._emit(ToolFinished, call_id=cs.call.id, name=cs.call.name, outcome=outcome, content=content)]

    def _running(self) -> bool:
        return any(c.status == "running" for c in self.state.batch or ())

    def _after_call_change(self) -> list[Decision]:
        """After a call changed: complete the batch, pause for approval, or wait."""
        s = self.state
        batch = s.batch or []
        if all(c.status == "done" for c in batch):
            return self._complete_batch()
        if self._running():
            return []
        if s.cancel is not None:
            s.phase = "idle"
            return [ScheduleStep()]
        if s.pending_approvals and not s.paused:
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
        return []

    def _complete_batch(self) -> list[Decision]:
        s = self.state
        self._append_tool_messages()
        s.round += 1
        s.phase = "idle"
        return [Persist("tools_done"), ScheduleStep()]

    def _append_tool_messages(self) -> None:
        s = self.state
        for cs in s.batch or ():
            s.messages.append(ChatMessage.tool(cs.content or "", cs.call.id, name=cs.call.name))
        s.batch = None
        s.paused = False
        s.commit_pending = False
        s.approval_deadline = None
        s.waiting_since = None

    def _on_tool_result(self, call_id: str, outcome: ToolOutcome, content: str) -> list[Decision]:
        s = self.state
        cs = s.call(call_id)
        if s.phase == "finished" or cs is None or cs.status != "running":
            return []  # a call that was stopped, or a duplicate: the first end wins
        return self._done(cs, outcome, content) + [Persist("tool_result")] + self._after_call_change()

    # -- approvals ------------------------------------------------------------------------

    def _on_approvals(
        self,
        responses: list[ToolApprovalResponse],
        deny_rest: bool,
        deny_reason: str | None,
        request_id: str | None,
        command: str,
    ) -> list[Decision]:
        s = self.state

        def reject(code: str, message: str) -> list[Decision]:
            return self._reply(command, request_id, False, code, message)

        if s.phase == "finished":
            return reject(
                "turn_finished", f"turn {s.turn_id} has finished ({s.finish_reason}); nothing can be approved"
            )
        if s.stop is not None or s.cancel is not None:
            return reject("not_waiting", f"turn {s.turn_id} is being {'stopped' if s.stop else 'cancelled'}")
        if not responses and not deny_rest:
            return reject("invalid", "an approval response needs at least one decision or deny_rest")
        seen: set[str] = set()
        for r in responses:
            if r.call_id in seen:
                return reject("duplicate", f"two responses for call {r.call_id!r} in one message")
            seen.add(r.call_id)
            cs = s.call(r.call_id)
            if cs is None:
                if any(r.call_id in [c.id for c in m.tool_calls or ()] for m in s.messages):
                    return reject("not_waiting", f"call {r.call_id!r} is not waiting for approval")
                return reject("unknown_call", f"no approval was requested for call {r.call_id!r} in turn {s.turn_id}")
            if cs.status != "pending_approval":
                if cs.decision is not None:
                    return reject("duplicate", f"call {r.call_id!r} was already {cs.decision}")
                return reject("not_waiting", f"call {r.call_id!r} is not waiting for approval")
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
        return out + self._reply(command, request_id, True, None, "recorded", resumes_at)

    def _commit(self) -> list[Decision]:
        """Approval-resume: run approved calls, answer denied ones. Never after cancel/stop."""
        s = self.state
        s.commit_pending = False
        if s.cancel is not None or s.stop is not None:
            return []
        out: list[Decision] = []
        s.phase = "tools"
        for cs in s.batch or ():
            if cs.status != "decided":
                continue
            if cs.decision == "approved":
                out.extend(self._spawn(cs, self._specs[cs.call.name]))
            else:
                out.extend(self._done(cs, "denied", f"Rejected: {cs.decision_reason or 'User denied'}"))
        return [Persist("approvals_committed")] + out + self._after_call_change()

    def _on_timer(self, name: str, token: int) -> list[Decision]:
        s = self.state
        if s.phase == "finished":
            return []
        if name == "cancel_grace":
            if s.stop is not None:
                return []
            s.stop = Marker(kind="stop", reason="cancel grace period expired", at=self._clock())
            return self._halt()
        if token != s.round or s.batch is None:
            return []  # a timer of a batch that has ended
        if name == "commit" and s.commit_pending:
            return self._commit()
        if name == "approval_timeout" and s.pending_approvals:
            for cs in s.batch:
                if cs.status == "pending_approval":
                    cs.status, cs.decision, cs.decision_reason = "decided", "denied", "Approval timed out"
            return [Persist("approval_decision")] + self._commit()
        return []

    # -- stop and cancel ------------------------------------------------------------------

    def _on_stop(self, reason: str, request_id: str | None) -> list[Decision]:
        s = self.state
        if s.phase == "finished" or s.stop is not None:
            return self._reply("stop_turn", request_id, True, None, "no effect")
        resumes_at = s.next_seq if s.paused else None
        s.stop = Marker(kind="stop", reason=reason, at=self._clock())
        return self._halt() + self._reply("stop_turn", request_id, True, None, "", resumes_at)

    def _halt(self) -> list[Decision]:
        """Stop now: abort the stream, interrupt every running call, end the turn."""
        s = self.state
        out: list[Decision] = [Persist("stop_marker")]
        if s.phase == "streaming" and s.stream_id is not None:
            out.append(Abort(s.stream_id, s.stop.reason if s.stop else "stopped"))
            self._keep_partial_text()
        for cs in s.batch or ():
            if cs.status == "running":
                out.append(
                    Interrupt(InterruptTool(turn_id=s.turn_id, call_id=cs.call.id, mode="stop", reason=self._why()))
                )
        return out + self._end("cancelled" if s.cancel is not None else "stopped")

    def _why(self) -> str:
        s = self.state
        marker = s.cancel or s.stop
        return marker.reason if marker else ""

    def _on_cancel(self, reason: str, grace: float | None, request_id: str | None) -> list[Decision]:
        s = self.state
        if s.phase == "finished" or s.cancel is not None or s.stop is not None:
            return self._reply("cancel_turn", request_id, True, None, "no effect")
        ok = self._reply("cancel_turn", request_id, True, None, "", s.next_seq if s.paused else None)
        s.cancel = Marker(kind="cancel", reason=reason, at=self._clock(), grace=grace)
        out: list[Decision] = [Persist("cancel_marker")]
        for cs in s.batch or ():
            if cs.status == "running":
                out.append(
                    Interrupt(InterruptTool(turn_id=s.turn_id, call_id=cs.call.id, mode="cancel", reason=reason))
                )
        if grace is not None:
            out.append(SetTimer("cancel_grace", grace, 0))
        if s.phase != "streaming" and not self._running():
            out.append(ScheduleStep())
        return out + ok

    def _on_stop_tool(self, call_id: str, reason: str, request_id: str | None) -> list[Decision]:
        s = self.state

        def reply(ok: bool, code: str | None, message: str) -> list[Decision]:
            return self._reply("stop_tool", request_id, ok, code, message)

        if s.phase == "finished":
            return reply(False, "turn_finished", f"turn {s.turn_id} has finished ({s.finish_reason})")
        cs = s.call(call_id)
        if cs is None:
            if any(call_id in [c.id for c in m.tool_calls or ()] for m in s.messages):
                return reply(False, "not_waiting", f"call {call_id!r} has already finished")
            return reply(False, "unknown_call", f"call {call_id!r} is not running in turn {s.turn_id}")
        if cs.status == "done":
            return reply(False, "not_waiting", f"call {call_id!r} has already finished")
        out: list[Decision] = []
        if cs.status == "running":
            out.append(Interrupt(InterruptTool(turn_id=s.turn_id, call_id=call_id, mode="stop", reason=reason)))
        out += self._done(cs, "interrupted", interrupted_content("the call was stopped", reason))
        return out + [Persist("tool_result")] + self._after_call_change() + reply(True, None, "")

    # -- the end --------------------------------------------------------------------------

    def _end(self, reason: str, error: tuple[str, str] | None = None) -> list[Decision]:
        """End the turn: close every open call, then ``Error`` if any, then ``Finish``."""
        s = self.state
        out: list[Decision] = []
        if s.batch is not None:
            what = {"stopped": "the turn was stopped", "cancelled": "the turn was cancelled"}.get(
                reason, "the turn ended"
            )
            for cs in s.batch:
                if cs.status != "done":
                    out.extend(self._done(cs, "interrupted", interrupted_content(what, self._why() or reason)))
            self._append_tool_messages()
        if reason == "stopped":
            out.append(self._emit(Error, error_type="stopped", message="Agent run stopped", detail=self._why()))
        elif reason == "cancelled":
            out.append(self._emit(Error, error_type="cancelled", message="Agent run cancelled", detail=self._why()))
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
            turn_id=s.turn_id,
            seq=s.next_seq,
            parent_turn_id=s.parent_turn_id,
            root_turn_id=s.root_turn_id,
            **fields,
        )
        s.next_seq += 1
        return Emit(event)

    def _reply(
        self,
        command: str,
        request_id: str | None,
        ok: bool,
        code: str | None,
        message: str,
        resumes_at: int | None = None,
    ) -> list[Decision]:
        """A reply to the command's sender: always for a refusal, for success only if asked."""
        if ok and request_id is None:
            return []
        return [
            Reply(
                ControlReply(
                    turn_id=self.state.turn_id,
                    request_id=request_id,
                    command=command,
                    ok=ok,
                    code=code,  # type: ignore[arg-type]
                    message=message,
                    resumes_at=resumes_at,
                )
            )
        ]


def _safe_message(message: ChatMessage) -> ChatMessage:
    """The model's message with safe strings and distinct tool call ids.

    Some OpenAI-compatible servers send two calls with the same id in one response; each
    would need its own tool message, so a repeated id becomes ``<id>_2``, ``<id>_3``, ...
    in the history itself (the model sees the ids it is answered with)."""
    content = safe_text(message.content) if message.content is not None else None
    calls = message.tool_calls
    if calls:
        used: set[str] = set()
        fixed = []
        for c in calls:
            new_id, n = c.id, 1
            while new_id in used:
                n += 1
                new_id = f"{c.id}_{n}"
            used.add(new_id)
            fixed.append(c.model_copy(update={"id": new_id, "name": safe_text(c.name), "arguments": safe_text(c.arguments)}))
        calls = fixed
    if content == message.content and calls == message.tool_calls:
        return message
    return message.model_copy(update={"content": content, "tool_calls": calls})
