"""Following a durable turn to the host that took it over, on a store every node reaches.

When a turn's host is lost (its node left the cluster) or lets go of it (``Error(turn_moved)``:
another host took it over, or the host could not reach the store and stopped the turn's
work), the turn goes on elsewhere, or on the same host once it can claim it again
(``host.durable``). The Runtime's stream of that turn waits here, its commands held
(``routing``), while one thread looks at the store's route every ``POLL`` seconds; as soon
as the store names a live owner other than the one lost, the stream subscribes there from
its next ``seq``, so its reader sees the events go on with no gap and no duplicate. The
same owner counts as a new one once it has claimed the turn again (a higher epoch: it was
cut off, stopped the turn's work, and came back). An owner thought lost whose lease the
store still sees renewed after ``ALIVE_AFTER`` seconds was only cut off from this process
(the leader saw its node leave, say): the stream subscribes to it again.

A turn that nobody takes over within ``FOLLOW_FOR`` seconds of the store answering ends here
with ``Error(host_lost)`` + ``Finish(error)``; one whose store cannot be read for
``store_wait`` seconds (``Runtime(store_wait=...)``, 300 by default) ends here with
``Error(store_unavailable)`` + ``Finish(error)``, the store keeping the turn as it last
wrote it (attach to it once the store is back: it goes on then).

The thread runs only while a turn is being followed, and reads the store through the
Runtime's own connection of this thread (``open_store`` per thread, never in the pump).
"""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import StoreError
from ..logs import logger
from ..store import TurnStore
from ..store.ownership import host_of
from .stream import TurnStream

__all__ = ["ALIVE_AFTER", "FOLLOW_FOR", "POLL", "STORE_WAIT", "Follower", "Lost"]

POLL = 0.25  # seconds between two looks at the store's routes
FOLLOW_FOR = 60.0  # seconds a turn may take to be taken over (a lease is 5 s) before it is given up
ALIVE_AFTER = 12.0  # seconds after which an owner whose lease still holds is taken as alive (2 leases + ticks)
STORE_WAIT = 300.0  # seconds a followed turn waits for its store to answer before it is given up here


class Lost:
    """Why a followed turn ends here: ``error_type`` and a detail for its ``Error``."""

    def __init__(self, error_type: str, detail: str) -> None:
        self.error_type, self.detail = error_type, detail


log = logger("greenroom.runtime")


class Follower:
    """Turns being followed, and the thread that finds where they went."""

    def __init__(
        self, store: Callable[[], TurnStore], found: Callable[[str, TurnStream, Any], None], store_wait: float = STORE_WAIT
    ) -> None:
        self._store = store
        self._found = found  # (turn id, stream, the new host's address or a ``Lost``)
        self.store_wait = store_wait
        self._lock = threading.Lock()
        # turn id -> the stream, the lost owner (its identity, or its node/slot), since when
        self._turns: dict[str, tuple[TurnStream, str | None, float]] = {}
        self._epochs: dict[str, int] = {}  # the epoch the store showed first
        self._answered: dict[str, float] = {}  # since when the store has answered about each
        self._thread: threading.Thread | None = None
        self._closed = False

    def follow(self, turn_id: str, stream: TurnStream, lost_owner: str | None, epoch: int | None = None) -> None:
        """Find where ``turn_id`` goes on (its owner was ``lost_owner``, at ``epoch``, if known)."""
        with self._lock:
            if self._closed:
                return
            self._turns[turn_id] = (stream, lost_owner, time.monotonic())
            if epoch is not None:
                self._epochs[turn_id] = epoch
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="greenroom-follow", daemon=True)
                self._thread.start()
        log().warning("turn %s: its host %s was lost; following it to the host that takes it over", turn_id, lost_owner)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._turns.clear()

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed or not self._turns:
                    self._thread = None
                    return
                turns = list(self._turns.items())
            for turn_id, (stream, lost_owner, since) in turns:
                now = time.monotonic()
                where = self._look(turn_id, lost_owner, now - self._answered.get(turn_id, now) >= ALIVE_AFTER)
                if where is None:
                    answered = self._answered.get(turn_id)
                    if answered is not None and now - answered >= FOLLOW_FOR:
                        where = Lost("host_lost", "its host was lost and no other host took the turn over in time")
                    elif answered is None and now - since >= self.store_wait:
                        where = Lost(
                            "store_unavailable",
                            f"its turn store could not be reached for {self.store_wait:g} s; the store keeps the turn as"
                            " it last wrote it, and it goes on once a host reaches the store (attach to it then)",
                        )
                    else:
                        continue
                with self._lock:
                    self._turns.pop(turn_id, None)
                    self._epochs.pop(turn_id, None)
                    self._answered.pop(turn_id, None)
                self._found(turn_id, stream, where)
            time.sleep(POLL)  # the pace of the look-up: the store has no notification of a takeover

    def _look(self, turn_id: str, lost_owner: str | None, owner_may_live: bool) -> Any:
        """The address of the turn's new host, once the store names one (the lost owner's
        own, with ``owner_may_live``: its lease has outlived the loss); else None."""
        try:
            route = self._store().owners.route(turn_id)
        except StoreError as exc:
            log().warning("turn %s: cannot read its route: %s", turn_id, exc)
            return None
        self._answered.setdefault(turn_id, time.monotonic())
        first = self._epochs.setdefault(turn_id, route.epoch) if route is not None else None
        claimed_again = route is not None and first is not None and route.epoch > first
        if route is None or route.address is None or route.host_id is None:
            return None
        same = route.host_id == lost_owner if "#" in (lost_owner or "") else host_of(route.host_id) == lost_owner
        if same and not (owner_may_live or claimed_again):
            return None
        try:
            return pickle.loads(route.address)
        except pickle.UnpicklingError:
            return None
