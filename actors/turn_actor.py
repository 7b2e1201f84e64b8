"""TurnActor: owns one turn's loop state and messages; a thin shell over ``TurnRules``.

Every input (a command, a stream message, a tool result, a timer, a child's exit) goes to
``TurnRules.handle``; the actor carries the returned decisions out, in order: it writes
the snapshot and the new events to the store first (when there is one), sends events to
its subscribers, streams through the LLMActor the directory gave it (or one of its own),
runs each call in a ToolActor (a spare lent by the directory, or a fresh one), sends
itself the next step, sets timers, answers commands. It never blocks and, in the common
path, never forks: the directory forks spares off every turn's path.

Who is told what:

- events go to every subscriber: the sender of ``StartTurn`` (or the ``reply_to`` of the
  relay that brought it) and the sender of each ``Subscribe``, which first gets the events
  it missed;
- a command with a ``request_id`` gets one ``ControlReply``; a rejected command always
  gets one, so a supervisor learns why nothing changed;
- once the turn has ended the actor stays ``linger`` seconds to answer late commands
  (a stop or cancel then has no effect and is not an error), then exits with its children.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ActorTypeDispatcher, ChildActorExited

from messages import AbortStream, ControlReply, StartTurn, Subscribe, ToolAlive, ToolResult, TurnEvent

from .errors import StoreError
from .llm_actor import LLMActor
from .plumbing import Relay, TurnAttached
from .store import SQLiteStore, TurnStore
from .tool_actor import ToolActor
from .tools import needs_approval
from .trace import trace
from .turn_rules import (
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
    Stream,
    StreamLost,
    TakeStep,
    TimerFired,
    ToolLost,
    TurnRules,
)

__all__ = ["LLMActorLost", "Launch", "LendToolActor", "LentToolActorExited", "ToolActorLent", "TurnActor", "TurnEnded"]


def log() -> logging.Logger:
    """This module's logger, looked up at call time: Thespian replaces the logging manager
    in every actor process, so a logger created before the fork would log nowhere."""
    return logging.getLogger("greenroom.turn")


_LINGER = "linger"
_LIVENESS = "liveness"


class _Placed:
    """A call placed on a node by capability: where it runs and when it was last heard of."""

    def __init__(self, requires: dict[str, Any], last: float) -> None:
        self.requires = requires
        self.last = last
        self.node: str | None = None


class TurnEnded:
    """Told to the actor that relayed ``StartTurn`` (the directory) when the turn ends."""

    def __init__(self, turn_id: str, finish_reason: str) -> None:
        self.turn_id = turn_id
        self.finish_reason = finish_reason


class Launch:
    """From the directory: start ``start``, or recover ``recover_id`` from the store.

    Internal (it carries an actor address and a store path, not a public message).
    """

    def __init__(
        self,
        reply_to: Any,
        store_path: str | None,
        start: StartTurn | None = None,
        recover_id: str | None = None,
        llm: Any = None,
        tool_actor: Any = None,
        announce: bool = False,
    ) -> None:
        self.reply_to = reply_to
        self.store_path = store_path
        self.start = start
        self.recover_id = recover_id
        self.llm = llm
        self.tool_actor = tool_actor
        self.announce = announce


class LendToolActor:
    """From a TurnActor to its directory: lend me a spare ToolActor (answered with one)."""


class ToolActorLent:
    """From the directory: a spare ToolActor, now this turn's to use (or to send back)."""

    def __init__(self, address: Any) -> None:
        self.address = address


class LentToolActorExited:
    """From the directory: a ToolActor it had lent to this turn has exited."""

    def __init__(self, address: Any) -> None:
        self.address = address


class LLMActorLost:
    """From the directory: a shared LLMActor exited; streams on it are lost."""

    def __init__(self, address: Any) -> None:
        self.address = address


class TurnActor(ActorTypeDispatcher):
    """One turn. Send it ``StartTurn``; control it with plain messages."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rules: TurnRules | None = None
        self.subscribers: list[Any] = []
        self.log: list[TurnEvent] = []
        self.manager: Any = None
        self.llm: Any = None
        self.shared_llm = False  # the directory's pool, not this turn's child
        self.spare_tool: Any = None  # a local ToolActor lent by the directory, ready for a call
        self.asked_for_spare = False
        self.tool_actors: dict[str, Any] = {}
        self.placed: dict[str, _Placed] = {}  # calls placed by capability, watched by heartbeat
        self.ended = False
        self.store: TurnStore | None = None

    def receiveMsg_Launch(self, msg: Launch, sender: Any) -> None:
        if self.rules is not None:
            return
        self.manager = sender
        if msg.llm is not None:
            self.llm, self.shared_llm = msg.llm, True
        self.spare_tool = msg.tool_actor
        if msg.store_path is not None:
            self.store = SQLiteStore(msg.store_path)
        if msg.start is not None:
            if msg.announce:
                self.send(msg.reply_to, TurnAttached(msg.start.turn_id, self.myAddress))
            return self.receiveMsg_StartTurn(msg.start, msg.reply_to)
        assert self.store is not None and msg.recover_id is not None
        self.rules = TurnRules(self.store.load(msg.recover_id), needs_approval=needs_approval)
        if msg.reply_to is not None:
            self.subscribers.append(msg.reply_to)
        for command in self.store.take_commands(msg.recover_id):
            self._apply(self.rules.handle(command), None)
        self._apply(self.rules.recover(), None)

    # -- starting and subscribing ---------------------------------------------------------

    def receiveMsg_Relay(self, relay: Relay, sender: Any) -> None:
        if isinstance(relay.message, StartTurn) and self.manager is None:
            self.manager = sender
        self.receiveMessage(relay.message, relay.reply_to)

    def receiveMsg_StartTurn(self, msg: StartTurn, sender: Any) -> None:
        if self.rules is not None:
            if msg.turn_id != self.rules.state.turn_id:
                self._reject(
                    sender,
                    msg.turn_id,
                    "start_turn",
                    "invalid",
                    f"this TurnActor already runs turn {self.rules.state.turn_id}",
                )
            return
        self.subscribers = [sender]
        self.rules = TurnRules.from_start(msg, needs_approval=needs_approval)
        self._apply(self.rules.start(), sender)

    def receiveMsg_Subscribe(self, msg: Subscribe, sender: Any) -> None:
        if self.rules is None or msg.turn_id != self.rules.state.turn_id:
            return self._reject(sender, msg.turn_id, "subscribe", "unknown_turn", f"no turn {msg.turn_id} here")
        past = self.store.events(msg.turn_id, msg.since) if self.store is not None else self.log[msg.since :]
        for event in past:
            self.send(sender, event)
        if sender not in self.subscribers:
            self.subscribers.append(sender)

    # -- commands -------------------------------------------------------------------------

    def _command(self, msg: Any, sender: Any) -> None:
        turn_id = getattr(msg, "turn_id", None)
        if self.rules is None:
            return self._reject(sender, turn_id or "", msg.kind, "unknown_turn", "this TurnActor has no turn yet")
        if turn_id is not None and turn_id != self.rules.state.turn_id:
            return self._reject(
                sender,
                turn_id,
                msg.kind,
                "unknown_turn",
                f"this actor runs turn {self.rules.state.turn_id}, not {turn_id}",
            )
        self._apply(self.rules.handle(msg), sender)

    receiveMsg_StopTurn = _command
    receiveMsg_CancelTurn = _command
    receiveMsg_ToolApprovalResponse = _command
    receiveMsg_RespondToApprovals = _command
    receiveMsg_StopTool = _command

    def _reject(self, to: Any, turn_id: str, command: str, code: str, message: str) -> None:
        self.send(to, ControlReply(turn_id=turn_id, command=command, ok=False, code=code, message=message))  # type: ignore[arg-type]

    # -- the loop's own inputs ------------------------------------------------------------

    def _internal(self, msg: Any, sender: Any) -> None:
        trace("turn-in", self.rules.state.turn_id if self.rules else "-", _describe(msg))
        if self.rules is not None:
            self._apply(self.rules.handle(msg), sender)

    def receiveMsg_TakeStep(self, msg: TakeStep, sender: Any) -> None:
        if self.rules is None:
            return
        if self.store is not None and self.store.has_commands(self.rules.state.turn_id):
            # commands written to the store by another process (a persisted cancel, say)
            for command in self.store.take_commands(self.rules.state.turn_id):
                self._apply(self.rules.handle(command), None)
        self._internal(msg, sender)

    receiveMsg_LLMDeltas = _internal
    receiveMsg_LLMRetrying = _internal
    receiveMsg_LLMCompleted = _internal
    receiveMsg_LLMFailed = _internal
    receiveMsg_ReportProgress = _internal

    def receiveMsg_ToolResult(self, msg: ToolResult, sender: Any) -> None:
        self._internal(msg, sender)
        if self.tool_actors.get(msg.call_id) == sender:
            del self.tool_actors[msg.call_id]
        self.send(sender, ActorExitRequest())  # its call is recorded: the ToolActor may go

    def receiveMsg_ToolAlive(self, msg: ToolAlive, sender: Any) -> None:
        placed = self.placed.get(msg.call_id)
        if placed is not None:
            placed.node, placed.last = msg.node, time.monotonic()

    def receiveMsg_WakeupMessage(self, msg: Any, sender: Any) -> None:
        if isinstance(msg.payload, TimerFired):
            self._internal(msg.payload, sender)
        elif msg.payload == _LINGER:
            self.send(self.myAddress, ActorExitRequest())
        elif msg.payload == _LIVENESS:
            self._check_placed()

    def _check_placed(self) -> None:
        """End placed calls whose node fell silent; keep watching while any runs."""
        assert self.rules is not None
        options = self.rules.state.options
        now = time.monotonic()
        for call_id, placed in list(self.placed.items()):
            cs = self.rules.state.call(call_id)
            if cs is None or cs.status != "running":
                del self.placed[call_id]
            elif now - placed.last > options.lost_after:
                del self.placed[call_id]
                self.tool_actors.pop(call_id, None)
                where = f"its node {placed.node}" if placed.node else "the node it was placed on"
                self._internal(
                    ToolLost(
                        call_id,
                        f"Tool '{cs.call.name}' failed: {where} stopped answering for {options.lost_after:g} s (host lost)",
                    ),
                    None,
                )
        if self.placed:
            self.wakeupAfter(timedelta(seconds=options.heartbeat), payload=_LIVENESS)

    def receiveMsg_LLMActorLost(self, msg: LLMActorLost, sender: Any) -> None:
        if msg.address == self.llm:
            self.llm, self.shared_llm = None, False
            stream_id = self.rules.state.stream_id if self.rules else None
            if stream_id is not None:
                self._internal(StreamLost(stream_id, "the LLMActor exited"), sender)

    def receiveMsg_ChildActorExited(self, msg: ChildActorExited, sender: Any) -> None:
        child = msg.childAddress
        if child == self.spare_tool:
            self.spare_tool = None
            return
        if child == self.llm and not self.shared_llm:
            self.llm = None
            stream_id = self.rules.state.stream_id if self.rules else None
            if stream_id is not None:
                self._internal(StreamLost(stream_id, "the LLMActor exited"), sender)
            return
        for call_id, addr in list(self.tool_actors.items()):
            if addr == child:
                del self.tool_actors[call_id]
                placed = self.placed.pop(call_id, None)
                cs = self.rules.state.call(call_id) if self.rules else None
                name = cs.call.name if cs else "?"
                if placed is not None and placed.node is None:
                    requires = ", ".join(f"{k}={json.dumps(v)}" for k, v in placed.requires.items())
                    message = f"Tool '{name}' cannot run: no node advertises the capabilities it needs ({requires})"
                else:
                    message = f"Tool '{name}' failed: its process exited before the call finished"
                self._internal(ToolLost(call_id, message), sender)

    def receiveMsg_PoisonMessage(self, msg: Any, sender: Any) -> None:
        log().warning("TurnActor: a message could not be handled: %r (%s)", msg.poisonMessage, msg.details)

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        pass  # Thespian stops the children and then this actor

    def receiveUnrecognizedMessage(self, msg: Any, sender: Any) -> None:
        log().debug("TurnActor ignored %r", type(msg).__name__)

    # -- carrying decisions out -----------------------------------------------------------

    def _apply(self, decisions: list[Decision], sender: Any) -> None:
        assert self.rules is not None
        state = self.rules.state
        trace("turn", state.turn_id, state.phase, [_describe(d) for d in decisions])
        if self.store is not None:
            self._write_ahead(decisions)
        else:
            self.log.extend(d.event for d in decisions if isinstance(d, Emit))
        for d in decisions:
            if isinstance(d, Emit):
                for sub in self.subscribers:
                    trace("turn send", d.event.kind, d.event.seq, sub)
                    self.send(sub, d.event)
            elif isinstance(d, Stream):
                if self.llm is None:
                    self.llm = self.createActor(LLMActor)
                self.send(self.llm, d.request)
                self._ask_for_spare()
            elif isinstance(d, Abort):
                if self.llm is not None:
                    self.send(self.llm, AbortStream(stream_id=d.stream_id, reason=d.reason))
            elif isinstance(d, Spawn):
                requires = d.run.spec.requires or None
                if requires is None and self.spare_tool is not None:
                    addr, self.spare_tool = self.spare_tool, None
                else:
                    addr = self.createActor(ToolActor, targetActorRequirements=requires)
                self.tool_actors[d.run.call.id] = addr
                if requires:
                    if not self.placed:
                        self.wakeupAfter(timedelta(seconds=state.options.heartbeat), payload=_LIVENESS)
                    self.placed[d.run.call.id] = _Placed(requires, time.monotonic())
                self.send(addr, d.run)
            elif isinstance(d, Interrupt):
                addr = self.tool_actors.get(d.message.call_id)
                if addr is not None:
                    self.send(addr, d.message)
                    if d.message.mode == "stop":
                        del self.tool_actors[d.message.call_id]  # it exits on its own after its grace
            elif isinstance(d, ScheduleStep):
                self.send(self.myAddress, TakeStep(state.turn_id))
            elif isinstance(d, SetTimer):
                self.wakeupAfter(timedelta(seconds=d.delay), payload=TimerFired(d.name, d.token))
            elif isinstance(d, Reply):
                if sender is not None:
                    self.send(sender, d.reply)
            elif isinstance(d, Done):
                self._wind_down()

    def _ask_for_spare(self) -> None:
        """Keep a local ToolActor ready for the next call, lent by the directory, which forks
        its spares off every turn's path (a fork blocks the forking actor for milliseconds)."""
        if self.spare_tool is not None or self.asked_for_spare or self.ended or self.rules is None:
            return
        if self.manager is not None and any(not t.requires for t in self.rules.state.tools):
            self.asked_for_spare = True
            self.send(self.manager, LendToolActor())

    def receiveMsg_ToolActorLent(self, msg: ToolActorLent, sender: Any) -> None:
        self.asked_for_spare = False
        if self.spare_tool is None and not self.ended:
            self.spare_tool = msg.address
        else:
            self.send(msg.address, ActorExitRequest())

    def receiveMsg_LentToolActorExited(self, msg: LentToolActorExited, sender: Any) -> None:
        self.receiveMsg_ChildActorExited(ChildActorExited(msg.address), sender)

    def _write_ahead(self, decisions: list[Decision]) -> None:
        """Write the snapshot and the new events before any decision is carried out."""
        assert self.rules is not None and self.store is not None
        events = [d.event for d in decisions if isinstance(d, Emit)]
        if not events and not any(isinstance(d, Persist) for d in decisions):
            return
        try:
            self.store.save(self.rules.state, events)
        except StoreError:
            log().exception("turn %s: the store failed; the turn goes on without it", self.rules.state.turn_id)

    def _wind_down(self) -> None:
        if self.ended or self.rules is None:
            return
        self.ended = True
        state = self.rules.state
        if self.manager is not None:
            self.send(self.manager, TurnEnded(state.turn_id, state.finish_reason or "error"))
        if self.llm is not None and not self.shared_llm:
            self.send(self.llm, ActorExitRequest())
        if self.spare_tool is not None:
            self.send(self.spare_tool, ActorExitRequest())
            self.spare_tool = None
        linger = state.options.linger
        if state.stop is not None:
            linger = max(linger, state.options.stop_grace + 0.5)  # let stopped tools finish their grace
        self.wakeupAfter(timedelta(seconds=linger), payload=_LINGER)


def _describe(x: Any) -> str:
    """A short label for logs: the kind, and the seq or call id when there is one."""
    if isinstance(x, Emit):
        return f"emit {x.event.kind}#{x.event.seq}"
    name = getattr(x, "kind", type(x).__name__)
    for attr in ("seq", "call_id", "name"):
        if hasattr(x, attr):
            return f"{name} {attr}={getattr(x, attr)}"
    return str(name)
