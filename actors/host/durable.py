"""A TurnHost's side of its store: its identity and lease, its journal, its inbox, its claims.

With a store every turn a host runs has an owner there: this host's identity
(``node/slot#incarnation``) and an epoch (``store.ownership`` says the rules). Nothing
here runs a store call on the host's actor thread:

- **the lease** is renewed by a thread of its own (``Renewer``) every ``TICK``; each
  confirmed renewal goes to the host (``("lease", regained)``), which keeps a timer at the
  lease's fence point and stops every turn's work when it passes (``Lease.must_fence``),
  however long a renewal takes to answer;
- **every other call** goes through the host's ``Journal``: the turns' writes, and the reads
  and claims below, answered on the actor thread;
- **claims**: ``recover`` (a start, a replaced host), ``adopt`` (after each renewal, the
  orphans this host is the heir of among the hosts that can run them: ``ownership.Heirs``),
  ``reconcile`` (after a lapse: the turns another host took, and this host's own to claim
  again). Each claim loads the turn with the commands waiting for it; a claim whose load
  fails is given back;
- **the inbox**: PostgreSQL wakes the host when a command is queued (``("command",
  turn_id)``); while its notifications are down, and on SQLite, the host looks every
  ``POLL`` seconds; the inbox is pruned every ``PRUNE_EVERY`` seconds.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from messages import Message, TurnState

from ..errors import SnapshotError, StoreError
from ..logs import logger
from ..placement import requirement
from ..providers.limiter import LIMITER
from ..store.base import Owner, TurnStore, is_url
from ..store.ownership import LEASE, TICK, Heirs, Lease, identity, new_incarnation, reconcile
from .journal import Done, Journal

__all__ = ["KEEP_COMMANDS", "POLL", "PRUNE_EVERY", "Claimed", "Durable", "Renewer", "StoredSender"]

POLL = 0.5  # seconds between two looks at the inbox when the store cannot notify
PRUNE_EVERY = 600.0  # seconds between two prunings of the command inbox by a host
KEEP_COMMANDS = 3600.0  # seconds a command is kept once taken (its sender has had its reply)


log = logger("greenroom.host")


@dataclass(frozen=True)
class StoredSender:
    """The sender of a command queued in the store: its reply is recorded there."""

    command_id: int


@dataclass(frozen=True)
class Claimed:
    """A turn this host has claimed and loaded, with the commands waiting for it."""

    state: TurnState
    commands: list[tuple[int, Message]]
    owner: Owner


def _load(store: TurnStore, turn_id: str, owner: Owner, found: list[Claimed], errors: dict[str, str]) -> None:
    """A turn just claimed, loaded with its commands into ``found``; one that cannot be read
    is an error for itself alone; a load the store fails is given back, for whoever can."""
    try:
        found.append(Claimed(store.log.load(turn_id), store.inbox.pending(turn_id), owner))
    except (SnapshotError, KeyError) as exc:
        errors[turn_id] = str(exc)
        log().error("cannot recover turn %s: %s", turn_id, exc)
    except StoreError:
        store.owners.release(owner, turn_id)
        raise


class Renewer:
    """The thread that renews one host's lease; see the module docstring. ``hand`` puts on
    the host's hand-off."""

    def __init__(
        self,
        store: TurnStore,
        host_id: str,
        node: str,
        address: bytes,
        lease: Lease,
        hand: Callable[[Any], None],
        capabilities: str = "",
    ) -> None:
        self.store, self.host_id, self.node, self.address = store, host_id, node, address
        self.lease, self._hand, self.capabilities = lease, hand, capabilities
        self.draining = False  # said with each renewal: no host picks this one as an heir
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="greenroom-lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self.lease.now()
            try:
                granted = self.store.hosts.renew(
                    self.host_id, self.node, self.address, LEASE, self.capabilities, self.draining
                )
                regained = self.lease.confirmed(started, granted)
                if self._failing:
                    log().warning("host %s renewed its lease again", self.host_id)
                self._failing = False
                self._hand(("lease", regained))
            except StoreError as exc:
                if not self._failing:
                    log().error("host %s cannot renew its lease: %s", self.host_id, exc)
                self._failing = True
            except Exception:  # noqa: BLE001 - the renewals go on whatever happens to one
                log().exception("host %s: renewing its lease failed", self.host_id)
                self._failing = True
            pause = TICK - (self.lease.now() - started) if not self._failing else 0.2
            self._stop.wait(max(0.05, pause))

    def stop(self, wait: float = 0.0) -> None:
        """No renewal after this (one under way is waited for, ``wait`` seconds at most)."""
        self._stop.set()
        if wait and self._thread is not threading.current_thread():
            self._thread.join(wait)


class Durable:
    """The store of one TurnHost; see the module docstring. ``hand`` puts on the host's
    hand-off (thread-safe)."""

    def __init__(
        self,
        store: TurnStore,
        host_id: str,
        node: str,
        address: Any,
        hand: Callable[[Any], None],
        leased: Callable[[], None] = lambda: None,
        capabilities: dict[str, Any] | None = None,
    ) -> None:
        """``leased()`` is called (on the actor thread) once the first renewal was answered,
        or failed: the host's turns may be claimed from then on. ``capabilities``: its
        node's, kept with its lease: it adopts only the orphans they satisfy. The providers'
        rate limits of the host's streams are held in the store from now on (``providers.limiter``)."""
        self.store = store
        LIMITER.share(store.rates)
        self.host_id = host_id  # node/slot: where the Runtime looks
        self.identity = identity(host_id, new_incarnation())  # who owns this host's turns in the store
        self.node = node
        self.shared = is_url(store.location)  # PostgreSQL: the hosts of every node share it
        self.lease = Lease()
        self.journal = Journal(store, hand)
        self.notified = False  # the store wakes this host for each command queued (while True)
        self.notifying = store.inbox.listen(lambda turn_id: hand(("command", turn_id)), lambda up: hand(("inbox", up)))
        self.pruned_at = time.monotonic()
        self.polled_at = 0.0
        self.left = False
        self.capabilities = dict(capabilities or {})
        caps = requirement(self.capabilities)
        address_bytes = pickle.dumps(address)
        # a lease before the first claim: no other host takes this host's turns for orphans,
        # and every host counts it among the live ones when it shares out the orphans
        self.journal.read(
            lambda store: store.hosts.renew(self.identity, node, address_bytes, LEASE, caps), lambda v, e: leased()
        )
        self.renewer = Renewer(store, self.identity, node, address_bytes, self.lease, hand, caps)

    def owner(self, epoch: int = 1) -> Owner:
        return Owner(self.identity, epoch)

    # -- claims -------------------------------------------------------------------------------

    def recover(
        self,
        turn_ids: Iterable[str],
        force: bool,
        done: Callable[[list[Claimed], dict[str, str]], None],
        retry: bool = False,
    ) -> None:
        """Claim each turn (``force``: whoever held it: one machine's file) and load it; a
        turn another live host holds is left to it, one that cannot be read is an error for
        itself alone. ``done(claimed, errors)``, on the actor thread, once the store answers
        (``retry``: however long that takes)."""
        ids, me = list(turn_ids), self.identity

        def claim(store: TurnStore) -> tuple[list[Claimed], dict[str, str]]:
            found: list[Claimed] = []
            errors: dict[str, str] = {}
            for turn_id in ids:
                epoch = store.owners.claim(turn_id, me, force)
                if epoch is not None:
                    _load(store, turn_id, Owner(me, epoch), found, errors)
            return found, errors

        def claimed(value: Any, error: BaseException | None) -> None:
            if error is not None:
                log().error("host %s could not claim turns %s: %s", self.host_id, ", ".join(ids), error)
                done([], {t: f"cannot recover turn {t}: {error}" for t in ids})
            else:
                done(*value)

        self.journal.read(claim, claimed, retry=retry)

    def adopt(self, done: Callable[[list[Claimed]], None]) -> None:
        """Claim the orphans this host is the heir of (``ownership.Heirs``: among the live
        hosts its capabilities qualify it for), after a renewal: one read of the orphans, one
        statement claiming them, a load per turn claimed."""
        me = self.identity
        if self.renewer.draining:  # it hands its turns on: it takes none
            return

        def look(store: TurnStore) -> list[Claimed]:
            orphans = store.owners.orphans()
            if not orphans:
                return []
            heirs = Heirs(store.hosts.live())
            mine = [turn_id for turn_id, required in orphans if heirs.of(turn_id, required) == me]
            found: list[Claimed] = []
            for turn_id, epoch in store.owners.claim_many(mine, me) if mine else ():
                _load(store, turn_id, Owner(me, epoch), found, {})
            return found

        def adopted(claimed: Any, error: BaseException | None) -> None:
            if error is not None:
                log().warning("host %s could not look for orphaned turns: %s", self.host_id, error)
            elif claimed:
                done(claimed)

        self.journal.read(look, adopted)

    def reconcile(self, running: dict[str, Owner], done: Callable[[list[str], list[str]], None]) -> None:
        """After a lapse: ``done(lost, again)``: the turns of ``running`` the store gives to
        another host or epoch now, and this host's own turns it does not run."""
        me = self.identity

        def check(store: TurnStore) -> tuple[list[str], list[str]]:
            routes = {t: store.owners.route(t) for t in running}
            r = reconcile(running, routes, store.owners.owned_by(me))
            return r.lost, r.again

        def checked(value: Any, error: BaseException | None) -> None:
            if error is not None:
                log().warning("host %s could not check its turns against the store: %s", self.host_id, error)
                return
            done(*value)

        self.journal.read(check, checked, retry=True)

    # -- the inbox ----------------------------------------------------------------------------

    def poll_due(self) -> bool:
        """Whether to look at the inbox now: the store does not notify (or its notifications
        are down) and ``POLL`` seconds have passed."""
        if self.notified or time.monotonic() - self.polled_at < POLL:
            return False
        self.polled_at = time.monotonic()
        return True

    def poll(self, done: Done) -> None:
        self.journal.read(lambda store: store.inbox.waiting(), done)

    def prune_due(self) -> bool:
        if time.monotonic() - self.pruned_at < PRUNE_EVERY:
            return False
        self.pruned_at = time.monotonic()
        return True

    def prune(self) -> None:
        def pruned(_: Any, error: BaseException | None) -> None:
            if error is not None:
                log().warning("host %s could not prune the command inbox: %s", self.host_id, error)

        self.journal.read(lambda store: store.inbox.prune(KEEP_COMMANDS), pruned)

    # -- the end ------------------------------------------------------------------------------

    def drain(self, marked: Callable[[], None]) -> None:
        """This host drains: it says so in the store now and with every renewal after, and
        takes over no orphan; ``marked()`` once the store has it (or failed to: the next
        renewal says it), on the actor thread."""
        self.renewer.draining = True
        caps, address = self.renewer.capabilities, self.renewer.address
        self.journal.read(
            lambda store: store.hosts.renew(self.identity, self.node, address, LEASE, caps, True), lambda v, e: marked()
        )

    def leave(self) -> None:
        """The runtime is closing and leaves its turns to the store: the lease is given up now
        (and not renewed), so another runtime takes them over at once, not a lease later."""
        self.left = True
        self._drop()

    def close(self) -> None:
        """The host is exiting: its turns are orphans at once, for the others."""
        if not self.left:
            self._drop()
        self.journal.close()

    def _drop(self) -> None:
        """Give up the lease (bounded: a store that does not answer within a second is left
        to the lease's end)."""
        self.renewer.stop(wait=1.0)

        def drop() -> None:
            try:
                self.store.hosts.drop(self.identity)
            except StoreError as exc:
                log().warning("host %s could not give up its lease: %s", self.host_id, exc)

        dropped = threading.Thread(target=drop, name="greenroom-lease-end", daemon=True)
        dropped.start()
        dropped.join(1.0)
