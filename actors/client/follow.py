"""Following a durable turn to the host that took it over, on a store every node reaches.

When a turn's host is lost (its node left the cluster) or lets go of it (it was fenced:
``Error(turn_moved)``), the turn goes on elsewhere: a live host claims it in the store once
the lost host's lease has run out (``host.durable``). The Runtime's stream of that turn
waits here, its commands held (``routing``), while one thread looks at the store's route
every ``POLL`` seconds; as soon as the store names a live owner other than the one lost,
the stream subscribes there from its next ``seq``, so its reader sees the events go on with
no gap and no duplicate. The same owner counts as a new one once it has claimed the turn
again (a higher epoch: it was cut off, stopped the turn's work, and came back). An owner
thought lost whose lease the store still sees renewed after ``ALIVE_AFTER`` seconds was only
cut off from this process (the leader saw its node leave, say): the stream subscribes to it
again. A turn that nobody takes over within
``FOLLOW_FOR`` seconds, or that the store no longer knows, ends here with
``Error(host_lost)`` + ``Finish(error)``.

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
from .stream import TurnStream

__all__ = ["ALIVE_AFTER", "FOLLOW_FOR", "POLL", "Follower"]

POLL = 0.25  # seconds between two looks at the store's routes
FOLLOW_FOR = 60.0  # seconds a turn may take to be taken over (a lease is 5 s) before it is given up
ALIVE_AFTER = 12.0  # seconds after which an owner whose lease still holds is taken as alive (2 leases + ticks)


log = logger("greenroom.runtime")


class Follower:
    """Turns being followed, and the thread that finds where they went."""

    def __init__(self, store: Callable[[], TurnStore], found: Callable[[str, TurnStream, Any], None]) -> None:
        self._store = store
        self._found = found
        self._lock = threading.Lock()
        # turn id -> the stream, the lost owner, since when, the epoch the store showed first
        self._turns: dict[str, tuple[TurnStream, str | None, float]] = {}
        self._epochs: dict[str, int] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    def follow(self, turn_id: str, stream: TurnStream, lost_owner: str | None) -> None:
        """Find where ``turn_id`` goes on (its owner was ``lost_owner``, if known)."""
        with self._lock:
            if self._closed:
                return
            self._turns[turn_id] = (stream, lost_owner, time.monotonic())
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
                where = self._look(turn_id, lost_owner, time.monotonic() - since >= ALIVE_AFTER)
                if where is None and time.monotonic() - since < FOLLOW_FOR:
                    continue
                with self._lock:
                    self._turns.pop(turn_id, None)
                    self._epochs.pop(turn_id, None)
                self._found(turn_id, stream, where)
            time.sleep(POLL)  # the pace of the look-up: the store has no notification of a takeover

    def _look(self, turn_id: str, lost_owner: str | None, owner_may_live: bool) -> Any:
        """The address of the turn's new host, once the store names one (the lost owner's
        own, with ``owner_may_live``: its lease has outlived the loss); else None."""
        try:
            route = self._store().route(turn_id)
        except StoreError as exc:
            log().warning("turn %s: cannot read its route: %s", turn_id, exc)
            return None
        first = self._epochs.setdefault(turn_id, route.epoch) if route is not None else None
        claimed_again = route is not None and first is not None and route.epoch > first
        if route is None or route.address is None:
            return None
        if route.host_id == lost_owner and not (owner_may_live or claimed_again):
            return None
        try:
            return pickle.loads(route.address)
        except pickle.UnpicklingError:
            return None
