"""Where a message that names a turn goes, for anyone but the turn's own caller.

The Runtime that started a turn talks to its host directly; another Runtime's ``attach``
goes to the host the turn would have been placed on (``client.routing``). A supervisor
actor, through its node's directory, and the command line, through a runtime's directory,
send to the turn's *likely* host, found here in this order:

1. the directory's cache (turns it placed or found before; the last 10,000);
2. the store's route, for a durable turn: its owner, whose address the store keeps while
   its lease holds; a turn being taken over (its owner's lease ran out) goes to the host
   rendezvous hashing names among the store's live hosts, the one that takes it over;
3. the host rendezvous hashing names among the hosts the sender knows: where the turn was
   placed, unless the cluster's hosts changed since.

A host that gets a message for a turn it does not run corrects the route, never drops the
message (``host.registry``): it forwards it to the owner the store names; otherwise it holds
it (its ``StartTurn`` may still be on its way) and asks its directory to ``Find`` the turn:
the directory asks every host it knows (``Locate``) and answers ``Found`` with the one that
runs it, where the held messages go; when none does, a held command waits out its hold and
is answered ``unknown_turn``, a held ``Subscribe`` is refused at once. So every command gets
an answer, and a turn's commands reach its own mailbox, where cancel > approval >
max-rounds holds.
"""

from __future__ import annotations

import pickle
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from messages import reply_for

from ..errors import StoreError
from ..logs import logger
from ..placement import rendezvous
from ..store import TurnStore
from ..store.ownership import heir
from ..wire.protocol import Found, Locate, Relay

__all__ = ["LOCATE_WAIT", "Routes"]

LOCATE_WAIT = 5.0  # seconds a Locate waits for the hosts' answers
_REMEMBER = 10_000


log = logger("greenroom.directory")


@dataclass
class _Finding:
    """A ``Find`` under way: who asked, and the hosts yet to answer."""

    askers: list[Any]
    asked: list[Any]  # addresses, which are not hashable
    until: float


class Routes:
    """A directory's routes by turn id; ``send(to, message)`` is the directory's."""

    def __init__(self, send: Callable[[Any, Any], None]) -> None:
        self._send = send
        self.cache: OrderedDict[str, Any] = OrderedDict()
        self.finding: dict[str, _Finding] = {}

    def learn(self, turn_id: str, address: Any) -> None:
        self.cache[turn_id] = address
        self.cache.move_to_end(turn_id)
        while len(self.cache) > _REMEMBER:
            self.cache.popitem(last=False)

    def forget_host(self, address: Any) -> list[str]:
        """A host is gone: no route leads to it any more. The turns it had."""
        gone = [t for t, a in self.cache.items() if a == address]
        for turn_id in gone:
            del self.cache[turn_id]
        return gone

    # -- sending ----------------------------------------------------------------------------

    def send(self, turn_id: str, message: Any, reply_to: Any, hosts: dict[str, Any], store: TurnStore | None) -> None:
        """Send ``message`` (from ``reply_to``) to the likely host of ``turn_id``; ``hosts``
        maps the host ids a new turn could be placed on to their addresses."""
        address = self.cache.get(turn_id)
        if address is None and store is not None:
            address = _stored(turn_id, store)
        if address is None:
            guess = rendezvous(turn_id, hosts)
            address = hosts[guess] if guess is not None else None
        if address is None:
            return self._send(reply_to, reply_for(message, False, "unknown_turn", f"no turn {message.turn_id}"))
        self._send(address, Relay(message, reply_to))

    # -- finding --------------------------------------------------------------------------

    def find(self, turn_id: str, asker: Any, hosts: list[Any]) -> None:
        """A host does not run ``turn_id``: ask every other host, and tell ``asker`` where it is."""
        cached = self.cache.get(turn_id)
        if cached is not None and cached != asker:
            return self._send(asker, Found(turn_id, cached))
        finding = self.finding.get(turn_id)
        if finding is not None:
            finding.askers.append(asker)
            return
        others = [h for h in hosts if h != asker]
        if not others:
            return self._send(asker, Found(turn_id, None))
        self.finding[turn_id] = _Finding([asker], others, time.monotonic() + LOCATE_WAIT)
        for host in others:
            self._send(host, Locate(turn_id))

    def located(self, turn_id: str, here: bool, host: Any) -> None:
        """A host answered a ``Locate``."""
        finding = self.finding.get(turn_id)
        if finding is None:
            return
        finding.asked = [a for a in finding.asked if a != host]
        if here:
            self.learn(turn_id, host)
            self._answer(turn_id, host)
        elif not finding.asked:
            self._answer(turn_id, None)

    def expire(self, now: float) -> None:
        """Finds whose hosts did not all answer in time: as if none ran the turn."""
        for turn_id in [t for t, f in self.finding.items() if now >= f.until]:
            self._answer(turn_id, None)

    def _answer(self, turn_id: str, host: Any) -> None:
        for asker in self.finding.pop(turn_id).askers:
            self._send(asker, Found(turn_id, host))


def _stored(turn_id: str, store: TurnStore) -> Any:
    """The address of a durable turn's host from the store; None if it is not a stored turn
    or has ended (any host on the store answers for one that has)."""
    try:
        route = store.owners.route(turn_id)
        if route is None or route.status == "finished":
            return None
        if route.address is not None:
            return pickle.loads(route.address)
        live = store.hosts.live()
        taker = heir(turn_id, live, route.requires)  # the host that takes it over (``store.ownership``)
        return next((pickle.loads(h.address) for h in live if h.host_id == taker), None)
    except (StoreError, pickle.UnpicklingError) as exc:
        log().warning("cannot read the route of turn %s from the store: %s", turn_id, exc)
        return None
