"""TurnActor: owns one turn's loop state and messages, inside a TurnHost.

A TurnActor is an in-process actor (``mailbox.LocalActor``): its own FIFO mailbox, its
``TurnRules`` and their state. Every input (a command, a stream message, a tool result, a
timer, a lost host) goes to ``TurnRules.handle``; the actor carries the returned decisions
out, in order. It never blocks.

- **Write-ahead**: with a store, the snapshot and the new events are written in one
  transaction before any decision is carried out. A write that fails rolls back and ends
  this turn alone with ``Error(store_error)``; the events already numbered are still
  delivered, so no subscriber sees a gap.
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
from typing import Any

from messages import (
    AbortStream,
    CancelTurn,
    Consumed,
    Error,
    Finish,
    InterruptTool,
    RespondToApprovals,
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
    encode,
    reply_for,
)

from ..errors import Fenced, StoreError
from ..logs import logger
from ..mailbox import LocalActor
from ..store.base import Owner
from ..telemetry.metrics import TurnMeter
from ..telemetry.turn_spans import TurnTrace
from ..tools.loading import needs_approval
from ..turn.decisions import (
    Abort,
    Decision,
    Done,
    Emit,
    Interrupt,
    Persist,
    Reply,
    ScheduleStep,
    SetTimer,
    Spawn,
    StoreFailed,
    Stream,
    TakeStep,
)
from ..turn.rules import TurnRules
from .durable import StoredSender
from .outbox import encode_event
from .ports import TurnHostFace
from .subscriptions import Subscription, whole_finish

__all__ = ["TurnActor"]


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
        self.subscribers: dict[str, Subscription] = {}  # by str(address)
        self.log: list[tuple[str, bytes]] = []  # (kind, encoded event) by seq, kept when there is no store
        self.ended = False
        self.ended_at = 0.0  # time.monotonic() when it ended
        self.trace = TurnTrace.of(rules.state, trace_parent)  # its spans; None unless it is traced
        self.meter = TurnMeter.of(rules.state)  # its metrics; None unless a MeterProvider is configured

    @classmethod
    def starting(cls, host: TurnHostFace, start: StartTurn) -> TurnActor:
        owner = Owner(host.host_id, 1) if host.store is not None else None
        return cls(host, TurnRules.from_start(start, needs_approval=needs_approval), start.trace_context, owner)

    @classmethod
    def recovering(cls, host: TurnHostFace, state: TurnState, owner: Owner) -> TurnActor:
        return cls(host, TurnRules(state, needs_approval=needs_approval), state.trace_context, owner)

    @property
    def state(self) -> TurnState:
        return self.rules.state

    # -- inputs ---------------------------------------------------------------------------

    def receive(self, message: Any, sender: Any) -> None:
        if self.meter is not None:
            self.meter.received(message)
        logger = log()
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("turn %s handles %s", self.turn_id, getattr(message, "kind", type(message).__name__))
        super().receive(message, sender)  # to receiveMsg_<Class>

    def receiveMsg_StartTurn(self, message: StartTurn, sender: Any) -> None:
        if sender is not None:
            self._subscribe(sender, 0, message.window)
        self._apply(self.rules.start(), sender)

    def receiveMsg_Subscribe(self, message: Subscribe, sender: Any) -> None:
        """Send ``sender`` the events from ``since`` on (as its window allows), then what
        happens; confirm if asked."""
        sub = self._subscribe(sender, message.since, message.window)
        try:
            self._catch_up(sub)
        except StoreError as exc:
            self._unsubscribe(sub.key)
            reply = reply_for(message, False, "invalid", f"cannot read the events of {self.turn_id}: {exc}")
            self.host.reply(sender, reply)
            return
        if message.request_id is not None:  # a turn about to resume says where its next run starts
            resumes_at = self.state.next_seq if self.state.commit_pending else None
            self.host.reply(sender, reply_for(message, True, resumes_at=resumes_at))

    def receiveMsg_Consumed(self, message: Consumed, sender: Any) -> None:
        sub = self.subscribers.get(str(sender))
        if sub is not None:
            sub.read(message.seq)
            self._catch_up(sub)

    def receiveMsg_Unsubscribe(self, message: Unsubscribe, sender: Any) -> None:
        self._unsubscribe(str(sender))

    def receiveMsg_RecoverTurn(self, message: RecoverTurn, sender: Any) -> None:
        self._apply(self.rules.recover(), None)

    def receiveMsg_StoredCommands(self, message: StoredCommands, sender: Any) -> None:
        self._take_stored_commands()

    def receiveMsg_TakeStep(self, message: TakeStep, sender: Any) -> None:
        self._take_stored_commands()
        self._apply(self.rules.handle(message), sender)

    def receiveMsg_TurnCommand(self, message: TurnCommand, sender: Any) -> None:
        """Stop, cancel, approvals, ``StopTool``: one INFO line, then the rules."""
        if isinstance(message, (StopTurn, CancelTurn)):
            log().info("turn %s: %s requested (%s)", self.turn_id, message.kind.split("_")[0], message.reason)
        elif isinstance(message, (ToolApprovalResponse, RespondToApprovals)):
            for r in [message] if isinstance(message, ToolApprovalResponse) else message.responses:
                verdict = "approved" if r.approved else "denied"
                why = f" ({r.reason})" if r.reason else ""
                log().info("turn %s: call %s %s%s", self.turn_id, r.call_id, verdict, why)
        self._apply(self.rules.handle(message), sender)

    def receiveUnrecognizedMessage(self, message: Any, sender: Any) -> None:
        """Everything else is the rules' (stream messages, tool results, timers, losses)."""
        self._apply(self.rules.handle(message), sender)

    def _take_stored_commands(self) -> None:
        """Commands written to the store by another process (the command line, say)."""
        store = self.host.store
        if store is None or self.ended:
            return
        try:
            commands = store.take_commands(self.turn_id) if store.has_commands(self.turn_id) else []
        except StoreError:
            log().exception("turn %s: cannot read its stored commands", self.turn_id)
            return
        for command_id, command in commands:  # each one's reply is recorded beside it
            self._apply(self.rules.handle(command), StoredSender(command_id))

    # -- subscribers ----------------------------------------------------------------------

    def _subscribe(self, who: Any, since: int, window: int | None) -> Subscription:
        sub = Subscription.of(who, since, window)
        if sub.key not in self.subscribers:
            self.host.hold_outbox(sub.key)
        self.subscribers[sub.key] = sub  # a new subscription from the same address replaces the old
        return sub

    def _unsubscribe(self, key: str) -> None:
        if self.subscribers.pop(key, None) is not None:
            self.host.release_outbox(key)

    def let_go(self) -> float | None:
        """The turn has ended: let go of its subscribers and return None, or, while one is
        still behind (its window holds back events it has not read), return how long to wait.
        One still behind ``reader_grace`` seconds after the end is dropped and told so (an
        ``Error(reader_dropped)`` with seq -1: not one of the turn's events)."""
        options = self.state.options
        lagging = [s for s in self.subscribers.values() if s.next_seq < self.state.next_seq]
        left = self.ended_at + options.reader_grace - time.monotonic()
        if lagging and left > 0:
            return min(left, max(options.linger, 1.0))
        why = f"this reader was still behind {options.reader_grace:g} s after the turn ended, and was dropped"
        for sub in lagging:
            lost = Error(turn_id=self.turn_id, seq=-1, error_type="reader_dropped", message=why)
            self.host.deliver(sub.key, sub.address, encode(lost), lost.kind)
        for key in list(self.subscribers):
            self._unsubscribe(key)
        return None

    def _catch_up(self, sub: Subscription) -> None:
        """Send ``sub`` the events it may be sent and has not been (from the log or the store)."""
        end = self.state.next_seq if sub.limit is None else min(self.state.next_seq, sub.limit)
        if sub.next_seq >= end:
            return
        store = self.host.store
        past = (
            store.event_payloads(self.turn_id, sub.next_seq, end) if store is not None else self.log[sub.next_seq : end]
        )
        for kind, payload in past:
            self._send(sub, kind, payload)

    def _send(self, sub: Subscription, kind: str, payload: bytes) -> None:
        if kind == "finish":
            if not sub.whole:
                payload = whole_finish(payload, self.state.messages)
            sub.whole = True
        self.host.deliver(sub.key, sub.address, payload, kind)
        sub.next_seq += 1

    # -- carrying decisions out ---------------------------------------------------------

    def _apply(self, decisions: list[Decision], sender: Any) -> None:
        encoded = [(d.event, encode_event(d.event)) for d in decisions if isinstance(d, Emit)]
        store = self.host.store
        if store is not None and self.ended and self.owner is None:
            return  # taken over by another host: this one acts no more
        persist = any(isinstance(d, Persist) for d in decisions)
        if store is not None and (encoded or persist):
            events = [(e.seq, e.kind, b) for e, b in encoded]
            try:  # a snapshot at the transitions that need one; text deltas are appended alone
                if persist:
                    store.save(self.state, events, self.owner)
                else:
                    store.append(self.turn_id, events, self.owner)
            except Fenced as exc:
                return self.fenced(str(exc))
            except StoreError as exc:
                return self._store_failed(decisions, encoded, sender, str(exc))
        elif self.host.store is None:
            self.log.extend((e.kind, b) for e, b in encoded)
        self._carry_out(decisions, encoded, sender)

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
                for sub in self.subscribers.values():
                    if sub.next_seq == event.seq and sub.may_send(event.seq):
                        self._send(sub, event.kind, payload)
            elif isinstance(d, Stream):
                host.llm.tell(d.request, self)
            elif isinstance(d, Abort):
                host.llm.tell(AbortStream(stream_id=d.stream_id, reason=d.reason), self)
            elif isinstance(d, Spawn):
                host.tools.run(self, d.run)
            elif isinstance(d, Interrupt):
                host.tools.interrupt(d.message)
            elif isinstance(d, ScheduleStep):
                self.tell(TakeStep(self.turn_id))
            elif isinstance(d, SetTimer):
                host.set_timer(self, d)
            elif isinstance(d, Reply):
                if sender is not None:
                    host.reply(sender, d.reply)
            elif isinstance(d, Done):
                self._wind_down()

    def _store_failed(
        self, decisions: list[Decision], encoded: list[tuple[TurnEvent, bytes]], sender: Any, detail: str
    ) -> None:
        """The write-ahead failed: deliver what was numbered, answer, then end this turn."""
        log().error("turn %s: the store failed; the turn ends with an error: %s", self.turn_id, detail)
        kept: list[Decision] = [d for d in decisions if isinstance(d, (Emit, Reply))]
        self._carry_out(kept, encoded, sender)
        ending = self.rules.handle(StoreFailed(detail))
        ending_encoded = [(d.event, encode_event(d.event)) for d in ending if isinstance(d, Emit)]
        try:  # on condition of this host's epoch, as every write: another host may hold the turn now
            self.host.store.save(self.state, [(e.seq, e.kind, b) for e, b in ending_encoded], self.owner)  # type: ignore[union-attr]
        except Fenced as exc:
            return self.fenced(str(exc))
        except StoreError:
            log().error(
                "turn %s: its end could not be written either; the store keeps its last good state", self.turn_id
            )
        self._carry_out(ending, ending_encoded, None)

    def fenced(self, why: str) -> None:
        """Another host holds the turn now (or may: this host lost its lease): stop its work
        here without writing anything (its stream, its calls), tell every subscriber that it
        moved (``Error(turn_moved)`` with seq -1: not one of the turn's events), and leave."""
        if self.owner is None:
            return
        log().warning("turn %s: %s; its work here stops", self.turn_id, why)
        s, host = self.state, self.host
        if s.phase == "streaming" and s.stream_id is not None:
            host.llm.tell(AbortStream(stream_id=s.stream_id, reason="the turn moved to another host"), self)
        for cs in s.batch or ():
            if cs.status == "running":
                stop = InterruptTool(turn_id=self.turn_id, call_id=cs.call.id, mode="stop", attempt=cs.attempt,
                                     reason="the turn moved to another host")  # fmt: skip
                host.tools.interrupt(stop)
        moved = Error(turn_id=self.turn_id, seq=-1, error_type="turn_moved", message=why)
        for sub in list(self.subscribers.values()):
            host.deliver(sub.key, sub.address, encode(moved), moved.kind)
            self._unsubscribe(sub.key)
        self.owner, self.ended = None, True
        host.forget(self)

    def _wind_down(self) -> None:
        if self.ended:
            return
        self.ended, self.ended_at = True, time.monotonic()
        self.host.turn_ended(self)


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
            f"finished: {event.finish_reason}" if event.terminal else "paused for approval",
            event.round,
            event.usage.total_tokens,
            state.updated_at - state.created_at,
        )


class RecoverTurn:
    """Carry on a turn loaded from the store (sent once, by its host)."""

    kind = "recover"


RECOVER = RecoverTurn()


class StoredCommands:
    """Commands for this turn wait in the store (found by its host's poll)."""

    kind = "stored_commands"


STORED_COMMANDS = StoredCommands()
