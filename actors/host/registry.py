"""The turns of one TurnHost by id: which run here, which ended, what waits for which.

Guarantees (each message that names a turn gets exactly one of these):

- a turn that runs here gets the message in its own mailbox;
- a message for a durable turn another host owns (it moved: a takeover) is forwarded to
  that host with its original sender, who gets the answer from there;
- a command or ``Subscribe`` for a turn that is not here is held (``held``) while the
  directory looks for it on the other hosts (``Find``, ``cluster.routes``): found, it is
  forwarded there; else a command waits for its turn to start or to be taken over here
  (Thespian does not order messages, not even from one sender), which gets it before its
  first step, and is answered ``unknown_turn`` once its hold runs out, before its sender's
  ``answer_within`` does (unless the store names another owner by then: it is forwarded
  there); a ``Subscribe`` is refused at once;
- a ``Subscribe`` or a command for a turn that has ended is answered for it (a stop or a
  cancel "no effect", anything else ``turn_finished``); a ``Subscribe`` for a stored turn
  that has left every host is answered from the store;
- a ``Locate`` is answered: here or not.
"""

from __future__ import annotations

import pickle
from collections import OrderedDict
from typing import Any

from messages import Message, StartTurn, StopTurn, Subscribe, TurnCommand, TurnState, reply_for, unaddressed

from ..errors import StoreError
from ..logs import logger
from ..store.base import Owner
from ..wire.protocol import Find, Found, Locate, Located, Recover, Recovered, Relay
from .durable import StoredSender
from .held import HeldCommands
from .ports import RegistryHost
from .turn_actor import RECOVER, STORED_COMMANDS, TurnActor

__all__ = ["TurnRegistry"]

_REMEMBER_ENDED = 10_000


log = logger("greenroom.host")


class TurnRegistry:
    """The turns of ``host``; see the module docstring."""

    def __init__(self, host: RegistryHost) -> None:
        self.host = host
        self.turns: dict[str, TurnActor] = {}
        self.ended: OrderedDict[str, str] = OrderedDict()
        self.held = HeldCommands()
        self.finding: set[str] = set()  # turns the directory is looking for (``Find``)

    # -- messages that name a turn --------------------------------------------------------

    def start(self, msg: StartTurn, sender: Any) -> None:
        tid, host = msg.turn_id, self.host
        if tid in self.turns or tid in self.ended or self._stored(tid):
            host.reply(sender, reply_for(msg, False, "invalid", f"turn id {tid} is already in use"))
            return
        turn = self.turns[tid] = TurnActor.starting(host, msg)
        turn.tell(msg, sender)
        for command, who in self.held.claim(tid):
            turn.tell(command, who)
        if host.shutting_down is not None:  # a straggler: it ends as the others did
            turn.tell(StopTurn(turn_id=tid, reason="the runtime is closing", cause="shutdown"), None)

    def subscribe(self, msg: Subscribe, sender: Any) -> None:
        turn, host = self.turns.get(msg.turn_id), self.host
        if turn is not None:
            turn.tell(msg, sender)
        elif self._forwarded(msg, sender):
            pass
        elif host.durable is not None and self._stored(msg.turn_id):
            failed = host.durable.replay(msg.turn_id, msg.since, sender, host.deliver)
            host.outboxes.unless_held(str(sender))  # forgotten once these are acknowledged
            if failed is not None:
                host.reply(sender, reply_for(msg, False, "invalid", failed))
            elif msg.request_id is not None:
                host.reply(sender, reply_for(msg, True, None, "the turn has ended; its events follow from the store"))
        elif msg.turn_id in self.ended:
            host.reply(sender, reply_for(msg, False, "turn_finished", f"turn {msg.turn_id} has ended"))
        else:
            self._hold(msg.turn_id, msg, sender)

    def to_turn(self, msg: Any, sender: Any) -> None:
        """To the turn's own mailbox, if it is here (else it is moot)."""
        turn = self.turns.get(msg.turn_id)
        if turn is not None:
            turn.tell(msg, sender)

    def command(self, msg: TurnCommand, sender: Any) -> None:
        refused = unaddressed(msg)
        if refused is not None:
            self.host.reply(sender, refused)
            return
        tid = str(msg.turn_id)
        turn = self.turns.get(tid)
        if turn is not None:
            turn.tell(msg, sender)
        elif tid in self.ended:
            self._answer_for_ended(msg, sender, self.ended[tid])
        elif not self._forwarded(msg, sender):
            self._hold(tid, msg, sender)

    def _hold(self, turn_id: str, msg: Any, sender: Any) -> None:
        """Hold a message for a turn that is not here, and have the directory look for it;
        one whose sender says how long it waits is answered before then (``held``)."""
        due = self.held.hold(turn_id, msg, sender, getattr(msg, "answer_within", None))
        self.host.every("hold", min(1.0, self.held.hold_for / 2))
        if due < self.held.hold_for:
            self.host.timers.add(due, ("hold_due",))  # on time, not at the next second's look
        if turn_id not in self.finding and self.host.directory is not None:
            self.finding.add(turn_id)
            self.host.send(self.host.directory, Find(turn_id))

    def found(self, msg: Found) -> None:
        """Where the directory found a turn held messages wait for."""
        self.finding.discard(msg.turn_id)
        if msg.turn_id in self.turns:
            return  # it started here meanwhile, and took what was held
        if msg.host is not None and msg.host != self.host.myAddress:
            for command, who in self.held.take(msg.turn_id, lambda m: True):
                self.host.send(msg.host, Relay(command, who))
            return
        for command, who in self.held.take(msg.turn_id, lambda m: isinstance(m, Subscribe)):
            self.host.reply(who, reply_for(command, False, "unknown_turn", f"no turn {msg.turn_id}"))

    def locate(self, msg: Locate, sender: Any) -> None:
        self.host.send(sender, Located(msg.turn_id, msg.turn_id in self.turns))

    def _answer_for_ended(self, msg: Any, sender: Any, reason: str) -> None:
        if msg.kind in ("stop_turn", "cancel_turn"):
            if msg.request_id is not None:
                self.host.reply(sender, reply_for(msg, True, None, "the turn has already ended"))
        else:
            self.host.reply(sender, reply_for(msg, False, "turn_finished", f"turn {msg.turn_id} has ended ({reason})"))

    def _forwarded(self, msg: Any, sender: Any) -> bool:
        """A durable turn that is not here: forward ``msg`` to the host the store names, or
        answer for it if it has ended; False if the store does not know where it is."""
        durable, host = self.host.durable, self.host
        if durable is None or isinstance(sender, StoredSender):
            return False
        try:
            route = durable.store.route(msg.turn_id)
        except StoreError as exc:
            log().warning("cannot read the route of turn %s: %s", msg.turn_id, exc)
            return False
        if route is None:
            return False
        if route.status == "finished":
            if isinstance(msg, Subscribe):
                return False  # replayed from the store, here
            self._answer_for_ended(msg, sender, "see the store")
            return True
        if route.address is None or route.host_id == host.host_id:
            return False  # being taken over (perhaps here): held until it is
        host.send(pickle.loads(route.address), Relay(msg, sender))
        return True

    def expire_held(self) -> None:
        """Every second while something is held: forward what waits for a durable turn
        another host has taken over since; answer what waited out its hold."""
        if self.host.durable is not None:
            for tid in self.held.turn_ids():
                self._moved_on(tid)
        for tid, command, who in self.held.expired():
            self.finding.discard(tid)  # a Find its directory never answered is forgotten with it
            if not self._forwarded(command, who):
                self.host.reply(who, reply_for(command, False, "unknown_turn", f"no turn {tid}"))
        if self.held:
            self.host.every("hold", min(1.0, self.held.hold_for / 2))

    def _moved_on(self, turn_id: str) -> None:
        """If the store names a live owner of ``turn_id`` other than this host, the messages
        held for it go there."""
        durable = self.host.durable
        try:
            route = durable.store.route(turn_id) if durable is not None else None
        except StoreError:
            return
        if route is not None and route.address is not None and route.host_id != self.host.host_id:
            address = pickle.loads(route.address)
            for command, who in self.held.take(turn_id, lambda m: True):
                self.host.send(address, Relay(command, who))
            self.finding.discard(turn_id)

    def _stored(self, turn_id: str) -> bool:
        return self.host.durable is not None and self.host.durable.is_stored(turn_id)

    # -- turns that come and go -----------------------------------------------------------

    def recover(self, msg: Recover, sender: Any) -> None:
        durable = self.host.durable
        found, errors = (
            ([], {})
            if durable is None
            else durable.recover([t for t in msg.turn_ids if t not in self.turns], msg.force)
        )
        for state, commands, owner in found:
            self.adopt(state, commands, owner)
        self.host.send(sender, Recovered(self.host.slot, [state.turn_id for state, _, _ in found], errors))

    def adopt(self, state: TurnState, commands: list[tuple[int, Message]], owner: Owner) -> None:
        """Carry on a turn this host claimed in the store: the commands queued in the store
        first, then those held here for it."""
        turn = self.turns[state.turn_id] = TurnActor.recovering(self.host, state, owner)
        for command_id, command in commands:
            turn.tell(command, StoredSender(command_id))
        for command, who in self.held.claim(state.turn_id):
            turn.tell(command, who)
        turn.tell(RECOVER, None)

    def forget(self, turn: TurnActor) -> None:
        """A turn another host took over: gone from here at once (it has not ended)."""
        if self.turns.get(turn.turn_id) is turn:
            del self.turns[turn.turn_id]

    def turn_ended(self, turn: TurnActor) -> None:
        self.host.timers.add(turn.state.options.linger, ("linger", turn.turn_id))

    def evict(self, turn_id: str) -> None:
        """Forget a turn that ended ``linger`` s ago, once every reader has caught up (or was
        dropped, ``TurnActor.let_go``)."""
        turn = self.turns.get(turn_id)
        if turn is None:
            return
        wait = turn.let_go()
        if wait is not None:
            self.host.timers.add(wait, ("linger", turn_id))
            return
        del self.turns[turn_id]
        self.ended[turn_id] = turn.state.finish_reason or "error"
        while len(self.ended) > _REMEMBER_ENDED:
            self.ended.popitem(last=False)

    def stored_commands(self, turn_id: str) -> None:
        turn = self.turns.get(turn_id)
        if turn is not None:
            turn.tell(STORED_COMMANDS, None)
