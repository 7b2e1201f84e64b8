"""What a TurnHost does with its store over time, on its actor thread, never waiting for it.

- **the fence**: one timer is always pending at the lease's fence point (``store.ownership``);
  when it fires and no renewal has moved the point on, every turn's work stops here
  (``TurnActor.suspend``), before any other host may claim the turns;
- **after each confirmed renewal** (``("lease", regained)`` from ``durable.Renewer``): after
  a lapse, the turns are checked against the store (those another host took stop here, this
  host's own that it stopped are claimed back); the turns that stopped while the store did
  not answer are claimed back; the orphans this host is the heir of are claimed;
- **every tick**: the inbox is looked at when the store does not notify (SQLite, or while
  PostgreSQL's notifications are down, and once they are back), and pruned now and then.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..logs import logger
from ..store.ownership import FENCE_AFTER, TICK
from .durable import Claimed, Durable
from .registry import TurnRegistry
from .timers import Timers
from .turn_actor import TurnActor

__all__ = ["StoreKeeper"]


log = logger("greenroom.host")


class KeeperHost(Protocol):
    @property
    def host_id(self) -> str: ...

    @property
    def turns(self) -> dict[str, TurnActor]: ...

    @property
    def registry(self) -> TurnRegistry: ...

    @property
    def timers(self) -> Timers: ...

    def every(self, name: str, seconds: float) -> None: ...


class StoreKeeper:
    """The store's side of one TurnHost over time; see the module docstring."""

    def __init__(self, host: KeeperHost, durable: Durable) -> None:
        self.host, self.durable = host, durable
        host.every("store", TICK)
        self._arm()

    def _arm(self) -> None:
        lease = self.durable.lease
        self.host.timers.add(max(0.0, lease.fence_at - lease.now()), ("fence",))

    def tick(self) -> None:
        """Every ``TICK``: the inbox looked at (when the store does not notify), and pruned."""
        durable = self.durable
        if durable.poll_due():
            self.look_at_inbox()
        if durable.prune_due():
            durable.prune()
        self.host.every("store", TICK)

    def notifications(self, up: bool) -> None:
        """The store's notifications are down (the inbox is looked at every tick) or up again
        (it is looked at now, for what was queued meanwhile)."""
        self.durable.notified = up
        if up:
            self.look_at_inbox()

    def renewed(self, regained: bool) -> None:
        """A renewal was confirmed; see the module docstring."""
        durable, registry = self.durable, self.host.registry
        if durable.left:
            return
        running = {t.turn_id: t.owner for t in self.host.turns.values() if t.owner is not None and not t.ended}
        if regained:
            self._arm()  # the fence's timer stopped at the fence: it runs again
            log().warning(
                "host %s renewed its lease after a lapse: checking its turns against the store", self.host.host_id
            )

            def reconciled(lost: list[str], again: list[str]) -> None:
                for turn_id in lost:
                    if (turn := self.host.turns.get(turn_id)) is not None:
                        turn.suspend("another host took this turn over while this one was cut off", "moved")
                for turn_id in again:
                    registry.suspended.setdefault(turn_id, None)
                registry.reclaim()

            durable.reconcile(running, reconciled)
        else:
            registry.reclaim()
        if registry.recovered:  # after its directory's plan: what it recovers at start is said so
            durable.adopt(self._adopt)

    def _adopt(self, claimed: list[Claimed]) -> None:
        for c in claimed:
            self.host.registry.adopt(c, "takeover")

    def fence(self) -> None:
        """The fence point: unless a renewal moved it on, every turn's work stops here now."""
        durable = self.durable
        if durable.left:
            return
        if durable.lease.must_fence():
            log().error(
                "host %s could not renew its lease for %g s: its turns' work stops until the store answers",
                self.host.host_id, FENCE_AFTER,
            )  # fmt: skip
            for turn in list(self.host.turns.values()):
                if not turn.ended:
                    turn.suspend("this host could not reach the turn store: the turn goes on once it can", "store")
        elif not durable.lease.fenced:
            self._arm()

    def look_at_inbox(self) -> None:
        """Tell each turn here that commands wait for it in the store."""
        self.durable.poll(self._commands_wait)

    def _commands_wait(self, waiting: Any, error: BaseException | None) -> None:
        for turn_id in waiting or ():
            self.host.registry.stored_commands(turn_id)
