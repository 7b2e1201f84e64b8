"""Which turns each host of a node recovers when it starts (the node's, or a replacement).

On a store every node reaches (PostgreSQL), a host recovers the turns the store says it
owned (its id, ``node/slot``, is the same after a restart) and the orphans (turns whose
owner's lease ran out: a runtime that ended, on another port) that rendezvous hashing gives
it among the store's live hosts, as a live host's tick would (``host.durable``); every
other unfinished turn is another live host's. On a file (SQLite: one machine, one node), each unfinished turn goes to
the host rendezvous hashing gives it among the node's hosts, where the Runtime looks first.
"""

from __future__ import annotations

from ..errors import StoreError
from ..logs import logger
from ..store import TurnStore
from ..wire.placement import rendezvous

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
            live = [h.host_id for h in store.live_hosts()]  # these hosts' leases were taken at configuration
            orphans = store.orphans()
            return {h: store.owned_by(h) + [t for t in orphans if rendezvous(t, live) == h] for h in host_ids}, None
        for turn_id in store.unfinished():
            host = rendezvous(turn_id, host_ids)
            if host in plan:
                plan[host].append(turn_id)
        return plan, None
    except StoreError as exc:  # a damaged store: say so once, recover nothing
        log().error("cannot list the unfinished turns of the store: %s", exc)
        return plan, f"cannot list the store's turns: {exc}"
