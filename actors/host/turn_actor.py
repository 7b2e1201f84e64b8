"""TurnActor: owns one turn's loop state and messages, inside a TurnHost.

A TurnActor is an in-process actor (``mailbox.LocalActor``): its own FIFO mailbox, its
``TurnRules`` and their state. Every input (a command, a stream message, a tool result, a
timer, a lost host) goes to ``TurnRules.handle``; the actor carries the returned decisions
out, in order. It never blocks.

- **Write-ahead**: with a store, each transition (its new events, its snapshot where it
  needs one, the inbox commands it applied and its replies to them) is written before any
  of its decisions is carried out: no event is emitted, no reply sent, no call started, no
  end reported that the store does not have. The write goes through the host's journal
  (``journal``, a thread of its own), which tries it again for as long as the store cannot
  be reached; meanwhile the turn goes on handling its mailbox, and its decisions wait, in
  order, each for its own write. Only what stops work is carried out at once (an abort of
  the stream, an interrupt of a call): stopping needs no record.
- **One way to stop the work here** (``suspend``): whatever the reason (another host holds
  the turn, its store did not confirm it in time, the runtime is closing, the store refused
  its write), the stream is aborted and every running call interrupted, as a stop does
  (``TurnRules.stop_work``), nothing more is written, and the subscribers are told the turn
  moved (``Error(turn_moved)``, seq -1): they follow it to whichever host carries it on
  from the store, usually this one again.
- **Priority from the mailbox**: the loop moves only in a ``TakeStep`` the actor sends
  itself, queued at the tail of its mailbox, so a stop or cancel already queued is handled
  first; approvals commit in a timer after ``approval_window``.
- **Who is told what**: events go to every subscriber (the sender of ``StartTurn``, each
  ``Subscribe`` sender, which first gets what it missed); a command with a ``request_id``
  gets one ``ControlReply``, and a refused command always gets one.
- Once the turn has ended it stays ``linger`` seconds to answer late commands and
  late subscribers, then its host forgets it (and answers for it from then on).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from messages import (
    AbortStream,
    CancelTurn,
    Consumed,
    Error,
    Finish,
    PauseTurn,
    RespondToApprovals,
    ResumeTurn,
    SendInput,
    StartTurn,
    StopTurn,
    Subscribe,
    ToolApprovalRequest,
    ToolApprovalResponse,
    TurnCommand,
    TurnEvent,
    TurnStarted,
    TurnState,
    Unsubscribe,
    reply_for,
)

from ..errors import Fenced, StoreError
from ..logs import logger
from ..mailbox import LocalActor
from ..store.base import Owner
from ..store.ownership import STOP_WITHIN
from ..telemetry.metrics import TurnMeter
from ..telemetry.turn_spans import TurnTrace
from ..tools.loading import argument_problem, needs_approval
from ..turn.decisions import (
    Abort,
    Decision,
    Done,
    Emit,
    Interrupt,
    Reply,
    ScheduleStep,
    SetTimer,
    Spawn,
    Stream,
    TakeStep,
)
from ..turn.rules import Recovery, TurnRules
from .durable import StoredSender
from .outbox import encode_event
from .ports import TurnHostFace
from .subscriptions import Readers
from .writeahead import WriteAhead, transition

__all__ = ["Suspension", "TurnActor"]

Suspension = Literal["moved", "store", "closing", "refused"]  # why a turn's work stops here, not its end


log = logger("greenroom.turn")



class TurnActor(LocalActor):
    """One turn, hosted by a ``TurnHost``. Send it messages with ``tell``."""

    name = "TurnActor"

    def __init__(
        self,
        host: TurnHostFace,
        rules: TurnRules,
        trace_parent: dict[str, str] | None = None,
        owner: Owner | None = None,
    ) -> None:
        super().__init__(host.kernel)
        self.host = host
        self.rules = rules
        self.owner = owner  # with a store: this host and the epoch it holds the turn at
        self.turn_id = rules.state.turn_id
        self.readers = Readers(host, self.turn_id, lambda: self.rules.state, rules.state.next_seq)
        self.ended = False
        self.ended_at = 0.0  # time.monotonic() when it ended
        self.parked = False  # waits for approval or is paused: it does not count (``admission``)
        self.gone = False  # its work stopped here without an end (``suspend``): it acts no more
        journal = host.journal
        self.ahead = WriteAhead(journal, self._carry_out, self._write_failed) if journal is not None else None
        self.applied: set[int] = set()  # inbox commands applied here (their writes may be in flight)
        self.reading_commands = False
        self.start: tuple[StartTurn, Any] | None = None  # a new turn: refused if its first write is fenced
        self.trace = TurnTrace.of(rules.state, trace_parent)  # its spans; None unless it is traced
        self.meter = TurnMeter.of(rules.state)  # its metrics; None unless a MeterProvider is configured

    @classmethod
    def starting(cls, host: TurnHostFace, start: StartTurn) -> TurnActor:
        owner = host.durable.owner(1) if host.durable is not None else None
        rules = TurnRules.from_start(start, needs_approval=needs_approval, check_arguments=argument_problem)
        return cls(host, rules, start.trace_context, owner)

    @classmethod
    def recovering(cls, host: TurnHostFace, state: TurnState, owner: Owner) -> TurnActor:
        rules = TurnRules(state, needs_approval=needs_approval, check_arguments=argument_problem)
        return cls(host, rules, state.trace_context, owner)

    @property
    def state(self) -> TurnState:
        return self.rules.state

    # -- inputs ---------------------------------------------------------------------------

    def receive(self, message: Any, sender: Any) -> None:
        if self.gone:  # its work stopped here: a command or subscription goes to whoever carries it on
            if isinstance(message, (TurnCommand, Subscribe)):
                self.host.redeliver(message, sender)
            return
        if self.meter is not None:
            self.meter.received(message)
        logger = log()
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("turn %s handles %s", self.turn_id, getattr(message, "kind", type(message).__name__))
        super().receive(message, sender)  # to receiveMsg_<Class>

    def receiveMsg_StartTurn(self, message: StartTurn, sender: Any) -> None:
        if sender is not None:
            self.readers.add(sender, 0, message.window)
        if self.host.store is not None:
            self.start = (message, sender)
        self._apply(self.rules.start(), sender)

    def receiveMsg_Subscribe(self, message: Subscribe, sender: Any) -> None:
        """Send ``sender`` the events from ``since`` on (as its window allows), then what
        happens; confirm if asked."""
        self.readers.add(sender, message.since, message.window, message.unread_from)
        if message.request_id is not None:  # a turn about to resume says where its next run starts
            resumes_at = self.state.next_seq if self.state.commit_pending else None
            self.host.reply(sender, reply_for(message, True, resumes_at=resumes_at))

    def receiveMsg_Consumed(self, message: Consumed, sender: Any) -> None:
        self.readers.read(str(sender), message.seq)

    def receiveMsg_Unsubscribe(self, message: Unsubscribe, sender: Any) -> None:
        self.readers.remove(str(sender))

    def let_go(self) -> float | None:
        """The turn has ended: see ``Readers.let_go``."""
        return self.readers.let_go(self.ended_at)

    def receiveMsg_RecoverTurn(self, message: RecoverTurn, sender: Any) -> None:
        self._apply(self.rules.recover(message.why), None)

    def receiveMsg_StoredCommands(self, message: StoredCommands, sender: Any) -> None:
        self._take_stored_commands()

    def receiveMsg_TakeStep(self, message: TakeStep, sender: Any) -> None:
        """With a store the step first looks at the inbox: a command queued by another process
        (the command line) is handled before the step, whatever the store's notifications do."""
        if self.host.journal is None or self.ended or self.gone:
            return self._apply(self.rules.handle(message), sender)
        self._take_stored_commands(then=StepAfterInbox(message))

    def receiveMsg_StepAfterInbox(self, message: StepAfterInbox, sender: Any) -> None:
        if not self.host.hand_on(self):  # a host that drains hands the turn on here (``draining``)
            self._apply(self.rules.handle(message.step), None)

    def receiveMsg_TurnCommand(self, message: TurnCommand, sender: Any) -> None:
        """Stop, cancel, approvals, ``StopTool``, input, pause, resume: one INFO line, then the rules."""
        by = f" by {message.by!r}" if message.by is not None else ""
        if isinstance(message, (StopTurn, CancelTurn, PauseTurn)):
            log().info("turn %s: %s requested%s (%s)", self.turn_id, message.kind.split("_")[0], by, message.reason)
        elif isinstance(message, (SendInput, ResumeTurn)):
            log().info("turn %s: %s%s", self.turn_id, message.kind.replace("_", " "), by)
        elif isinstance(message, (ToolApprovalResponse, RespondToApprovals)):
            for r in [message] if isinstance(message, ToolApprovalResponse) else message.responses:
                verdict = ("approved" if r.arguments is None else "approved with edited arguments") if r.approved else "denied"
                why = f" ({r.reason})" if r.reason else ""
                log().info("turn %s: call %s %s%s%s", self.turn_id, r.call_id, verdict, by, why)
        self._apply(self.rules.handle(message), sender, message)

    def receiveUnrecognizedMessage(self, message: Any, sender: Any) -> None:
        """Everything else is the rules' (stream messages, tool results, timers, losses); a
        tool's result or progress from a run at another epoch (this host's before a lapse, or
        another host's) is dropped, never recorded."""
        epoch = getattr(message, "epoch", None)
        if epoch is not None and self.owner is not None and epoch != self.owner.epoch:
            return
        self._apply(self.rules.handle(message), sender)

    def _take_stored_commands(self, then: Any = None) -> None:
        """Commands written to the store by another process (the command line, say): read off
        the actor thread, then each handled as if it had come by message (its write marks it
        taken and records its reply: ``StoredSender``); ``then`` is told after them."""
        journal = self.host.journal
        if journal is None or self.ended or self.gone or (self.reading_commands and then is None):
            if then is not None:
                self.tell(then)
            return
        self.reading_commands = True
        turn_id = self.turn_id

        def read(commands: Any, error: BaseException | None) -> None:
            self.reading_commands = False
            if error is not None:
                log().warning("turn %s: cannot read its stored commands: %s", turn_id, error)
            for command_id, command in commands or ():
                if command_id not in self.applied:
                    self.applied.add(command_id)
                    self.tell(command, StoredSender(command_id))
            if then is not None:
                self.tell(then)

        journal.read(lambda store: store.inbox.pending(turn_id), read)

    # -- carrying decisions out ---------------------------------------------------------

    def _apply(self, decisions: list[Decision], sender: Any, command: Any = None) -> None:
        if self.gone:
            return
        encoded = [(d.event, encode_event(d.event)) for d in decisions if isinstance(d, Emit)]
        if self.ahead is None:
            self.readers.log.extend((e.kind, b) for e, b in encoded)
            self._carry_out(decisions, encoded, sender)
            return
        try:
            write = transition(self.state, self.owner, decisions, encoded, sender)
        except StoreError as exc:  # its state cannot be encoded: this turn alone fails
            return self.suspend(str(exc), "refused")
        self.ahead.apply(decisions, encoded, sender, write, command)

    def _write_failed(self, error: BaseException) -> None:
        """The store answered a write of this turn with ``Fenced``, or refused it."""
        if isinstance(error, Fenced):
            if self.start is not None and not self.ahead.stored_once:  # type: ignore[union-attr]
                return self._refuse_start()  # the first write of a new turn: its id is another turn's
            return self.suspend(str(error), "moved")
        self.suspend(f"the store refused its write: {error}", "refused")

    def _refuse_start(self) -> None:
        assert self.start is not None
        start, sender = self.start
        self.gone = self.ended = self.readers.closed = True
        self.readers.drop_all()
        self.host.reply(sender, reply_for(start, False, "invalid", f"turn id {self.turn_id} is already in use"))
        self.host.forget(self)

    def _carry_out(self, decisions: list[Decision], encoded: list[tuple[TurnEvent, bytes]], sender: Any) -> None:
        if self.trace is not None:
            decisions = self.trace.observe(decisions, self.state)
        if self.meter is not None:
            self.meter.observe(decisions, self.state)
        events = iter(encoded)
        host = self.host
        for d in decisions:
            if isinstance(d, Emit):
                event, payload = next(events)
                _log_event(event, self.state)
                self.readers.emit(event.seq, event.kind, payload)
            elif isinstance(d, Stream):
                host.llm.tell(d.request, self)
            elif isinstance(d, Abort):
                host.llm.tell(AbortStream(stream_id=d.stream_id, reason=d.reason), self)
            elif isinstance(d, Spawn):  # the run names the epoch it is for: its results are matched by it
                host.tools.run(self, d.run if self.owner is None else d.run.model_copy(update={"epoch": self.owner.epoch}))
            elif isinstance(d, Interrupt):
                host.tools.interrupt(d.message)
            elif isinstance(d, ScheduleStep):
                self.tell(TakeStep(self.turn_id))
            elif isinstance(d, SetTimer):
                host.set_timer(self, d)
            elif isinstance(d, Reply):
                if sender is not None and not isinstance(sender, StoredSender):  # a stored one's is written
                    host.reply(sender, d.reply)
            elif isinstance(d, Done):
                self._wind_down()
        parked = self.state.phase in ("awaiting_approval", "paused")
        if parked != self.parked and not self.ended:  # its host's admission frees or takes its slot
            self.parked = parked
            host.parked(self, parked)
            host.hand_on(self)

    def suspend(self, why: str, kind: Suspension) -> None:
        """Stop this turn's work here without ending it (see the module docstring): its
        stream and calls are stopped, nothing more is written, its subscribers are told it
        moved (but when the runtime is closing), and its host takes it off its turns
        (``kind`` says why, and whether it is to be claimed back)."""
        if self.gone:
            return
        self.gone = True
        if kind != "closing":
            log().warning("turn %s: %s; its work here stops", self.turn_id, why)
        why_here = "the turn moved to another host" if kind == "moved" else why
        self._carry_out(self.rules.stop_work(why_here, grace=STOP_WITHIN), [], None)
        unstarted = self.start is not None and self.ahead is not None and not self.ahead.stored_once
        unanswered = self.ahead.stop() if self.ahead is not None else []
        owner = self.owner
        moved = Error(
            turn_id=self.turn_id, seq=-1, error_type="turn_moved", message=why,
            detail=owner.host_id if owner else None, epoch=owner.epoch if owner else None,
        )  # fmt: skip
        self.readers.closed = True
        if kind == "closing":  # nothing is sent: the runtime closes
            self.readers.drop_all()
        else:
            self.readers.tell_all(moved)
        if unstarted and kind == "store":  # never stored: it starts again, from its StartTurn
            self.host.forget(self)
            unanswered.insert(0, self.start)  # type: ignore[arg-type]
        else:
            self.host.suspended(self, kind, why)
        for command, sender in unanswered:  # their effect is not stored: applied where the turn goes on
            self.host.redeliver(command, sender)

    def _wind_down(self) -> None:
        if self.ended:
            return
        self.ended, self.ended_at = True, time.monotonic()
        self.host.turn_ended(self)
        self.host.hand_on(self)


def _log_event(event: TurnEvent, state: TurnState) -> None:
    """One INFO line per turn start, end and approval request."""
    if isinstance(event, TurnStarted):
        log().info("turn %s started (%d message(s), %d tool(s))", event.turn_id, len(state.messages), len(state.tools))
    elif isinstance(event, ToolApprovalRequest):
        log().info("turn %s: call %s (%s) waits for approval", event.turn_id, event.call_id, event.name)
    elif isinstance(event, Finish):
        log().info(
            "turn %s %s after %d round(s), %d tokens, %.2f s",
            event.turn_id,
            f"finished: {event.finish_reason}" if event.terminal else
            "paused" if event.finish_reason == "paused" else "paused for approval",
            event.round,
            event.usage.total_tokens,
            state.updated_at - state.created_at,
        )


@dataclass(frozen=True)
class RecoverTurn:
    """Carry on a turn loaded from the store (sent once, by its host), and why it was loaded."""

    why: Recovery = "restart"

    kind = "recover"


class StoredCommands:
    """Commands for this turn wait in the store (found by its host's poll)."""

    kind = "stored_commands"


@dataclass(frozen=True)
class StepAfterInbox:
    """The turn's step, once the commands waiting in the store are in its mailbox before it."""

    step: TakeStep

    kind = "take_step"


STORED_COMMANDS = StoredCommands()
