"""A TurnHost's side of its store: recovery, takeover, leases, commands from other processes.

With a store, every turn a host runs has an owner in it: this host and an epoch
(``store.base``). The host's TurnActors write through ``TurnActor._apply``; this module does
the rest:

- **recover** a list of turns (a start on a store, a replaced host): each is claimed first,
  which raises its epoch, so a host that ran it before can never write it again;
- **leases** (a store every node reaches, PostgreSQL): each ``tick`` renews this host's
  lease; a host that could not renew for ``STOP_AFTER`` (half a lease) stops the work of
  its turns (``fenced``), before any other host may take them over. When it renews again
  after that (``lapsed``), it checks each turn it still runs against the store (one taken
  over meanwhile is fenced) and claims again those still its own that it had stopped. It also claims the *orphans* (turns
  whose owner's lease ran out) whose preferred live host is this one (rendezvous hashing
  over the live hosts, so a lost host's turns spread over the others), within about one
  lease of the loss;
- **commands** other processes queued in the store (the command line): found by the
  store's notifications where it has them (PostgreSQL), else looked for every tick; each
  one's reply is recorded beside it, where its sender waits for it (``StoredSender``); the
  inbox is pruned every ``PRUNE_EVERY`` seconds of what was taken an hour ago;
- **replay** the events of a turn that has ended and left the host.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from messages import ControlReply, Message, TurnState

from ..errors import SnapshotError, StoreError
from ..logs import logger
from ..store.base import Owner, TurnStore, is_url
from ..wire.placement import rendezvous
from .subscriptions import whole_finish

__all__ = ["KEEP_COMMANDS", "LEASE", "PRUNE_EVERY", "STOP_AFTER", "TICK", "Durable", "StoredSender", "Tick"]

LEASE = 5.0  # seconds a host's lease lasts; it is renewed every TICK
TICK = 1.0
STOP_AFTER = LEASE / 2  # seconds without a renewal after which a host stops its turns' work
PRUNE_EVERY = 600.0  # seconds between two prunings of the command inbox by a host
KEEP_COMMANDS = 3600.0  # seconds a command is kept once taken (its sender has had its reply)

Deliver = Callable[[str, Any, bytes, str], None]


log = logger("greenroom.host")


@dataclass(frozen=True)
class StoredSender:
    """The sender of a command queued in the store: its reply is recorded there."""

    command_id: int


@dataclass
class Tick:
    """What a tick found: the host lost its lease (``fenced``); turns it took over; turns
    with commands waiting."""

    fenced: bool = False
    lapsed: bool = False  # renewed after a lapse: check the turns against the store (``reconcile``)
    adopted: list[tuple[TurnState, list[tuple[int, Message]], Owner]] = field(default_factory=list)
    commanded: list[str] = field(default_factory=list)


class Durable:
    """The store of one TurnHost; see the module docstring."""

    def __init__(self, store: TurnStore, host_id: str, node: str, address: Any, wake: Callable[[Any], None]) -> None:
        self.store = store
        self.host_id = host_id
        self.node = node
        self._address = pickle.dumps(address)
        self.shared = is_url(store.location)  # PostgreSQL: hosts of every node share it
        self.notified = self.shared and store.listen(lambda turn_id: wake(("command", turn_id)))
        self.renewed_at = time.monotonic()
        self.pruned_at = time.monotonic()
        self.fenced = False
        self.left = False
        if self.shared:  # a lease before the first turn: no other host may take this one's turns for orphans
            store.renew_host(host_id, node, self._address, LEASE)

    def owner(self, epoch: int = 1) -> Owner:
        return Owner(self.host_id, epoch)

    def is_stored(self, turn_id: str) -> bool:
        try:
            return self.store.exists(turn_id)
        except StoreError:
            return False

    def recover(
        self, turn_ids: Iterable[str], force: bool
    ) -> tuple[list[tuple[TurnState, list[tuple[int, Message]], Owner]], dict[str, str]]:
        """Claim each turn (``force``: whoever held it) and load it with the commands that wait
        for it; a turn another live host holds is left to it, one that cannot be read is an
        error for itself alone."""
        found: list[tuple[TurnState, list[tuple[int, Message]], Owner]] = []
        errors: dict[str, str] = {}
        for turn_id in turn_ids:
            try:
                epoch = self.store.claim(turn_id, self.host_id, force)
                if epoch is not None:
                    found.append((self.store.load(turn_id), self.store.take_commands(turn_id), self.owner(epoch)))
            except (SnapshotError, StoreError, KeyError) as exc:
                errors[turn_id] = str(exc)
                log().error("cannot recover turn %s: %s", turn_id, exc)
        return found, errors

    def tick(self, running: set[str]) -> Tick:
        """Renew the lease and take over orphans (a shared store); find queued commands."""
        out = Tick()
        if self.left:
            return out
        if self.shared:
            sent = time.monotonic()  # the lease runs from no earlier than this
            try:
                self.store.renew_host(self.host_id, self.node, self._address, LEASE)
            except StoreError as exc:
                if not self.fenced and time.monotonic() - self.renewed_at > STOP_AFTER:
                    log().error(
                        "host %s could not renew its lease for %g s: its turns' work stops (%s)",
                        self.host_id, STOP_AFTER, exc,
                    )  # fmt: skip
                    self.fenced = out.fenced = True
                return out
            out.lapsed = self.fenced or sent - self.renewed_at > LEASE
            self.renewed_at, self.fenced = sent, False
            try:
                live = [h.host_id for h in self.store.live_hosts()]
                mine = [t for t in self.store.orphans() if t not in running and rendezvous(t, live) == self.host_id]
                out.adopted, _ = self.recover(mine[:16], force=False)
            except StoreError as exc:
                log().warning("host %s could not look for orphaned turns: %s", self.host_id, exc)
        if not self.notified:
            try:
                out.commanded = [t for t in self.store.turns_with_commands() if t in running]
            except StoreError:
                pass
        if time.monotonic() - self.pruned_at >= PRUNE_EVERY:
            self.pruned_at = time.monotonic()
            try:
                self.store.prune_commands(KEEP_COMMANDS)
            except StoreError as exc:
                log().warning("host %s could not prune the command inbox: %s", self.host_id, exc)
        return out

    def leave(self) -> None:
        """The runtime is closing and leaves its turns to the store: the lease is given up now
        (and not renewed), so another runtime takes them over at once, not a lease later."""
        self.left = True
        if self.shared:
            try:
                self.store.drop_host(self.host_id)
            except StoreError:
                pass

    def reconcile(self, running: dict[str, Owner]) -> tuple[list[str], list[tuple[TurnState, list[tuple[int, Message]], Owner]]]:
        """After a lapse: the turns in ``running`` (turn id to the owner it writes as) that the
        store gives to another host or epoch now, and this host's own turns it does not run
        (stopped while it was cut off), claimed again."""
        lost: list[str] = []
        try:
            for turn_id, owner in running.items():
                route = self.store.route(turn_id)
                if route is not None and (route.host_id, route.epoch) != (owner.host_id, owner.epoch):
                    lost.append(turn_id)
            mine = [t for t in self.store.owned_by(self.host_id) if t not in running]
        except StoreError as exc:
            log().warning("host %s could not check its turns against the store: %s", self.host_id, exc)
            return lost, []
        found, _ = self.recover(mine, force=False)
        return lost, found

    def record_reply(self, sender: StoredSender, reply: ControlReply) -> None:
        try:
            self.store.record_reply(sender.command_id, reply)
        except StoreError as exc:
            log().warning("could not record the reply to command %d: %s", sender.command_id, exc)

    def replay(self, turn_id: str, since: int, to: Any, deliver: Deliver) -> str | None:
        """Send ``to`` the stored events of a turn that has ended and left the host, from
        ``since`` on, at once; its first ``Finish`` with the whole history. Returns why it
        could not, or None."""
        key, whole = str(to), since == 0
        try:
            history = [] if whole else self.store.load(turn_id).messages
            for kind, payload in self.store.event_payloads(turn_id, since):
                if kind == "finish" and not whole:
                    payload, whole = whole_finish(payload, history), True
                deliver(key, to, payload, kind)
        except (StoreError, SnapshotError, KeyError) as exc:
            return f"cannot read turn {turn_id}: {exc}"
        return None

    def close(self) -> None:
        if self.shared:
            try:
                self.store.drop_host(self.host_id)  # its turns are orphans at once, for the others
            except StoreError:
                pass
        self.store.close()
