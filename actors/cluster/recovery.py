"""Which turns each host of a node recovers when it starts (the node's, or a replacement).

On a store every node reaches (PostgreSQL), a host recovers the turns the store says its slot
owned (its id, ``node/slot``, is the same after a restart; a claim still waits for the lease
of the incarnation before it to run out) and the orphans (turns whose owner's lease ran out:
a runtime that ended, on another port) it is the heir of among the store's live hosts that
can run them, as a live host would after a renewal (``store.ownership``); every other unfinished turn is
another live host's. On a file (SQLite: one machine, one node), each unfinished turn goes to
the host rendezvous hashing gives it among the node's hosts, where the Runtime looks first.
"""

from __future__ import annotations

from ..errors import StoreError
from ..logs import logger
from ..placement import rendezvous
from ..store import TurnStore
from ..store.ownership import Heirs, host_of

__all__ = ["recovery_plan"]


log = logger("greenroom.directory")


def recovery_plan(
    store: TurnStore | None, host_ids: list[str], shared: bool
) -> tuple[dict[str, list[str]], str | None]:
    """The turns each of ``host_ids`` recovers, and what kept the store from saying (or None)."""
    plan: dict[str, list[str]] = {h: [] for h in host_ids}
    if store is None:
        return plan, None
    try:
        if shared:
            live = store.hosts.live()  # these hosts' leases were taken at configuration
            chosen = Heirs(live)
            heirs = {t: host_of(chosen.of(t, required) or "") for t, required in store.owners.orphans()}
            for h in host_ids:
                plan[h] = store.owners.owned_by(h)
                plan[h] += [t for t, at in heirs.items() if at == h and t not in plan[h]]
            return plan, None
        for turn_id in store.log.unfinished():
            host = rendezvous(turn_id, host_ids)
            if host in plan:
                plan[host].append(turn_id)
        return plan, None
    except StoreError as exc:  # a damaged store: say so once, recover nothing
        log().error("cannot list the unfinished turns of the store: %s", exc)
        return plan, f"cannot list the store's turns: {exc}"
