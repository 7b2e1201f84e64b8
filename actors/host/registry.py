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
- a new turn goes through admission (``admission``): it starts, waits in the host's queue
  (in memory only: nothing of it is written before it starts), waits for room there, or is
  refused (``overloaded``); a ``StartTurn`` with a ``request_id`` is answered with which
  (``running`` or ``queued``). A queued turn takes a stop or a cancel (it starts with the
  command behind it, and ends stopped or cancelled before any model call) and a
  ``Subscribe`` (answered now, followed once it starts); any other command is refused
  (``queued``) until it starts;
- a ``Locate`` is answered: here or not (a queued turn is here);
- a turn whose work stopped here without an end (``TurnActor.suspend``: its store did not
  confirm it in time, or refused a write) is claimed back as soon as the store answers
  again (``reclaim``), and carried on from what the store has.

Every store call is the journal's (``durable``): a message for a durable turn that is not
here is held while its route is read, then forwarded, answered or held on.
"""

from __future__ import annotations

import pickle
from collections import OrderedDict
from typing import Any

from messages import StartTurn, StopTurn, Subscribe, TurnCommand, reply_for, unaddressed

from ..logs import logger
from ..store.base import Route
from ..turn.decisions import StoreFailed
from ..turn.rules import Recovery
from ..wire.protocol import Find, Found, Locate, Located, Recover, Recovered, Relay
from . import admission as adm
from .admitting import Admitting, Queued
from .durable import Claimed, StoredSender
from .held import HeldCommands
from .ports import RegistryHost
from .subscriptions import whole_finish
from .turn_actor import STORED_COMMANDS, RecoverTurn, Suspension, TurnActor

__all__ = ["TurnRegistry"]

_REMEMBER_ENDED = 10_000


log = logger("greenroom.host")


class TurnRegistry(Admitting):
    """The turns of ``host``; see the module docstring."""

    def __init__(self, host: RegistryHost) -> None:
        self.host = host
        self.turns: dict[str, TurnActor] = {}
        self.ended: OrderedDict[str, str] = OrderedDict()
        self.held = HeldCommands()
        self.finding: set[str] = set()  # turns the directory is looking for (``Find``)
        self.routing: set[str] = set()  # turns whose route in the store is being read
        self.absent: dict[str, set[str]] = {}  # turns held messages wait for: who said it is unknown
        self.suspended: dict[str, str | None] = {}  # turn id -> why the store refused it (None: an outage)
        self.reclaiming: set[str] = set()
        self.failing: set[str] = set()  # claimed back to end with an error: the store refused a write
        self.parked: dict[str, list[tuple[Any, Any]]] = {}  # messages for suspended turns, till they are claimed
        self.recovered = False  # its directory's recovery plan has been carried out
        self.admission = adm.Admission()
        self.queued: dict[str, Queued] = {}  # new turns not started: queued, or waiting for room

    # -- messages that name a turn --------------------------------------------------------

    def _start(self, msg: StartTurn, sender: Any, later: list[tuple[Any, Any]]) -> None:
        tid, host = msg.turn_id, self.host
        turn = self.turns[tid] = TurnActor.starting(host, msg)
        turn.tell(msg, sender)
        for command, who in later + self.held.claim(tid):
            turn.tell(command, who)
        if host.shutting_down is not None:  # a straggler: it ends as the others did
            turn.tell(StopTurn(turn_id=tid, reason="the runtime is closing", cause="shutdown"), None)

    def subscribe(self, msg: Subscribe, sender: Any) -> None:
        turn, host = self.turns.get(msg.turn_id), self.host
        if turn is not None:
            turn.tell(msg, sender)
        elif msg.turn_id in self.queued:
            self._to_queued(msg.turn_id, msg, sender)
        elif msg.turn_id in self.suspended:
            self.parked.setdefault(msg.turn_id, []).append((msg, sender))
        elif msg.turn_id in self.ended and host.durable is None:
            host.reply(sender, reply_for(msg, False, "turn_finished", f"turn {msg.turn_id} has ended"))
        else:
            self._hold(msg.turn_id, msg, sender)  # with a store: replayed from it if it has ended

    def redeliver(self, msg: Any, sender: Any) -> None:
        """A start, command or subscription a turn had not answered when its work stopped here."""
        if isinstance(msg, StartTurn):
            self.start(msg, sender)
        elif isinstance(msg, Subscribe):
            self.subscribe(msg, sender)
        else:
            self.command(msg, sender)

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
        elif tid in self.queued:
            self._to_queued(tid, msg, sender)
        elif tid in self.suspended:  # answered once the turn is claimed back, or where it went
            self.parked.setdefault(tid, []).append((msg, sender))
        elif tid in self.ended:
            self._answer_for_ended(msg, sender, self.ended[tid])
        else:
            self._hold(tid, msg, sender)

    def _hold(self, turn_id: str, msg: Any, sender: Any) -> None:
        """Hold a message for a turn that is not here: the store (if any) is asked where it
        is, and the directory looks for it; one whose sender says how long it waits is
        answered before then (``held``)."""
        if turn_id not in self.finding and turn_id not in self.routing:
            self.absent.pop(turn_id, None)  # asked afresh
        due = self.held.hold(turn_id, msg, sender, getattr(msg, "answer_within", None))
        self.host.every("hold", min(1.0, self.held.hold_for / 2))
        if due < self.held.hold_for:
            self.host.timers.add(due, ("hold_due",))  # on time, not at the next second's look
        self._look_up(turn_id)
        if turn_id not in self.finding and self.host.directory is not None:
            self.finding.add(turn_id)
            self.host.send(self.host.directory, Find(turn_id))

    def _look_up(self, turn_id: str) -> None:
        """Read the turn's route in the store (off the actor thread); ``_routed`` acts on it."""
        durable = self.host.durable
        if durable is None or turn_id in self.routing or turn_id in self.turns:
            return
        self.routing.add(turn_id)

        def routed(route: Any, error: BaseException | None) -> None:
            self.routing.discard(turn_id)
            if error is not None:
                log().warning("cannot read the route of turn %s: %s", turn_id, error)
            elif route is not None:
                self._routed(route)
            else:
                self._absent(turn_id, "store")

        durable.journal.read(lambda store: store.owners.route(turn_id), routed)

    def _routed(self, route: Route) -> None:
        """What the store says of a turn messages are held for: ended (answered for it, and a
        subscriber replayed from the store), or run by another live host (forwarded there)."""
        tid, host = route.turn_id, self.host
        if tid in self.turns or host.durable is None:
            return  # it started (or was claimed) here meanwhile, and took what was held
        if route.status == "finished":
            for command, who in self.held.take(tid, lambda m: True):
                if isinstance(command, Subscribe):
                    self._replay(command, who)
                else:
                    self._answer_for_ended(command, who, "see the store")
            self.finding.discard(tid)
        elif route.address is not None and route.host_id != host.durable.identity:
            address = pickle.loads(route.address)
            for command, who in self.held.take(tid, lambda m: True):
                self.host.send(address, Relay(command, who))
            self.finding.discard(tid)
        # else: being taken over (perhaps by this host): held until it is

    def _replay(self, msg: Subscribe, to: Any) -> None:
        """Send ``to`` the stored events of a turn that has ended and left every host, from
        ``msg.since`` on; its first ``Finish`` carries the whole history."""
        host, tid, since = self.host, msg.turn_id, msg.since
        assert host.durable is not None

        def read(store: Any) -> tuple[list[Any], list[tuple[str, bytes]]]:
            return ([] if since == 0 else store.log.load(tid).messages), store.log.event_payloads(tid, since)

        def replayed(value: Any, error: BaseException | None) -> None:
            if error is not None:
                host.reply(to, reply_for(msg, False, "invalid", f"cannot read turn {tid}: {error}"))
                return
            history, rows = value
            key, whole = str(to), since == 0
            for kind, payload in rows:
                if kind == "finish" and not whole:
                    payload, whole = whole_finish(payload, history), True
                host.deliver(key, to, payload, kind)
            host.outboxes.unless_held(key)  # forgotten once these are acknowledged
            if msg.request_id is not None:
                host.reply(to, reply_for(msg, True, None, "the turn has ended; its events follow from the store"))

        host.durable.journal.read(read, replayed)

    def found(self, msg: Found) -> None:
        """Where the directory found a turn held messages wait for."""
        self.finding.discard(msg.turn_id)
        if msg.turn_id in self.turns:
            return  # it started here meanwhile, and took what was held
        if msg.host is not None and msg.host != self.host.myAddress:
            for command, who in self.held.take(msg.turn_id, lambda m: True):
                self.host.send(msg.host, Relay(command, who))
            return
        self._absent(msg.turn_id, "directory")

    def _absent(self, turn_id: str, where: str) -> None:
        """Neither the directory's hosts nor (with one) the store know ``turn_id``: a held
        ``Subscribe`` is refused now; a held command waits on (it may have overtaken its start)."""
        seen = self.absent.setdefault(turn_id, set())
        seen.add(where)
        if "directory" not in seen or (self.host.durable is not None and "store" not in seen):
            return
        del self.absent[turn_id]
        for command, who in self.held.take(turn_id, lambda m: isinstance(m, Subscribe)):
            self.host.reply(who, reply_for(command, False, "unknown_turn", f"no turn {turn_id}"))

    def locate(self, msg: Locate, sender: Any) -> None:
        self.host.send(sender, Located(msg.turn_id, msg.turn_id in self.turns or msg.turn_id in self.queued))

    def _answer_for_ended(self, msg: Any, sender: Any, reason: str) -> None:
        if msg.kind in ("stop_turn", "cancel_turn"):
            if msg.request_id is not None:
                self.host.reply(sender, reply_for(msg, True, None, "the turn has already ended"))
        else:
            self.host.reply(sender, reply_for(msg, False, "turn_finished", f"turn {msg.turn_id} has ended ({reason})"))

    def expire_held(self) -> None:
        """Every second while something is held: the store is asked again where each of those
        turns is (another host may have taken it over since); what waited out its hold is
        answered ``unknown_turn``."""
        for tid in self.held.turn_ids():
            self._look_up(tid)
        for tid, command, who in self.held.expired():
            self.finding.discard(tid)  # a Find its directory never answered is forgotten with it
            self.absent.pop(tid, None)
            self.host.reply(who, reply_for(command, False, "unknown_turn", f"no turn {tid}"))
        if self.held:
            self.host.every("hold", min(1.0, self.held.hold_for / 2))

    # -- turns that come and go -----------------------------------------------------------

    def recover(self, msg: Recover, sender: Any) -> None:
        durable, ids = self.host.durable, [t for t in msg.turn_ids if t not in self.turns]
        if durable is None or not ids:
            self.recovered = True
            self.host.send(sender, Recovered(self.host.slot, [], {}))
            return

        def recovered(claimed: list[Claimed], errors: dict[str, str]) -> None:
            self.recovered = True
            for c in claimed:
                self.adopt(c)
            self.host.send(sender, Recovered(self.host.slot, [c.state.turn_id for c in claimed], errors))

        durable.recover(ids, msg.force, recovered)

    def adopt(self, claimed: Claimed, why: Recovery = "restart") -> None:
        """Carry on a turn this host claimed in the store (``why``: see ``TurnRules.recover``):
        the commands queued in the store first, then those held here for it; one whose store
        refused a write ends with an error."""
        state, tid = claimed.state, claimed.state.turn_id
        if tid in self.turns:
            return
        turn = self.turns[tid] = TurnActor.recovering(self.host, state, claimed.owner)
        self.admission.handle(adm.Adopted(tid))  # counts at once (``admission``)
        refused = self.suspended.pop(tid, None)
        for command_id, command in claimed.commands:
            turn.applied.add(command_id)
            turn.tell(command, StoredSender(command_id))
        for command, who in self.parked.pop(tid, []) + self.held.claim(tid):
            turn.tell(command, who)
        turn.tell(RecoverTurn(why) if refused is None else StoreFailed(refused), None)

    def suspended_here(self, turn: TurnActor, kind: Suspension, why: str) -> None:
        """``turn``'s work stopped here without an end: forgotten; claimed back when the store
        answers again, unless another host holds it (``moved``) or the runtime is closing."""
        if self.turns.get(turn.turn_id) is turn:
            del self.turns[turn.turn_id]
        tid = turn.turn_id
        self._gone(tid)
        if kind == "store":
            self.suspended.setdefault(tid, None)
        elif kind == "refused" and tid in self.failing:  # its end was refused too: left as the store has it
            self.failing.discard(tid)
            log().error("turn %s: the store refused its end as well; it stays as the store last had it", tid)
        elif kind == "refused":
            self.failing.add(tid)
            self.suspended[tid] = why
            self.reclaim()

    def reclaim(self) -> None:
        """Claim back the turns whose work stopped here while the store did not answer (each
        is this host's in the store: no other host may claim it while this host's lease holds)."""
        durable = self.host.durable
        ids = [t for t in self.suspended if t not in self.reclaiming and t not in self.turns]
        if durable is None or not ids:
            return
        self.reclaiming.update(ids)

        def claimed(found: list[Claimed], errors: dict[str, str]) -> None:
            self.reclaiming.difference_update(ids)
            for c in found:
                self.adopt(c, "store")
            for tid in ids:  # another host has it now, or it has ended: not this host's
                if tid not in self.turns and tid not in errors:
                    self.suspended.pop(tid, None)
                    for message, who in self.parked.pop(tid, []):  # to where it went
                        self.redeliver(message, who)

        durable.recover(ids, False, claimed, retry=True)

    def forget(self, turn: TurnActor) -> None:
        """A turn another host took over: gone from here at once (it has not ended)."""
        if self.turns.get(turn.turn_id) is turn:
            del self.turns[turn.turn_id]
        self._gone(turn.turn_id)

    def turn_ended(self, turn: TurnActor) -> None:
        self.failing.discard(turn.turn_id)
        self._gone(turn.turn_id)
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
