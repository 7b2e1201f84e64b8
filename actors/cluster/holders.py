"""Where each stored turn runs, as the command line and the console show it.

Read from what the store already keeps: each turn's owner (``TurnSummary.owner``, a host's
identity ``NODE/SLOT#INCARNATION``, shown as ``NODE/SLOT``) and the hosts whose lease holds
(``hosts.live()``, each with its node; the hosts of a runtime on a SQLite file hold leases
in it too). A turn that is not finished is *held* when its owner is live; one that is not
held (its owner's lease ran out, or no host ever claimed it) is shown as ``running (no live
host)`` (or ``awaiting_approval (no live host)``): nothing acts on it until a host takes it
over (on PostgreSQL, a live host does once its owner's lease has run out) or, on SQLite,
until a runtime opens the file again. A turn that ``requires`` what no live host has waits
for one that has it: ``turns show`` says ``waiting for a host with gpu=true``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..placement import requirement, satisfies
from ..store.base import TurnStore, TurnSummary, is_url
from ..store.ownership import host_of

__all__ = ["NO_LIVE_HOST", "Holders", "NodeLoad", "node_of"]

NO_LIVE_HOST = "no live host"


def node_of(host_id: str | None) -> str | None:
    """``10.0.0.2:1900`` for the host id ``10.0.0.2:1900/0`` (or its identity ``.../0#...``)."""
    if not host_id:
        return None
    node, sep, _ = host_id.rpartition("/")
    return node if sep else host_id


@dataclass(frozen=True)
class NodeLoad:
    """A node with live hosts on the store, how many, and how many unfinished turns they hold."""

    node: str
    hosts: int
    turns: int


class Holders:
    """Which hosts of a store are live, and so which turns are held; see the module docstring."""

    def __init__(
        self, live: dict[str, str], shared: bool = True, capabilities: dict[str, dict[str, Any]] | None = None
    ) -> None:
        self.live = dict(live)  # host id -> node
        self.shared = shared
        self.capabilities = dict(capabilities or {})  # host id -> its node's capabilities

    @classmethod
    def of(cls, store: TurnStore, path: str) -> Holders:
        """Read now from ``store`` (whose location, as given, is ``path``)."""
        live = store.hosts.live()
        return cls({h.host_id: h.node for h in live}, is_url(path), {h.host_id: h.capabilities for h in live})

    def can_run(self, requires: dict[str, Any]) -> bool:
        """Whether a live host has every capability of ``requires`` (so takes the turn over)."""
        required = requirement(requires)
        return any(satisfies(caps, required) for caps in self.capabilities.values())

    def fingerprint(self) -> tuple[str, ...]:
        """Changes whenever a host becomes live or is no longer."""
        return tuple(sorted(self.live))

    def held(self, owner: str | None) -> bool:
        return owner is not None and owner in self.live

    def status(self, summary: TurnSummary) -> str:
        """The summary's status, with ``(no live host)`` when it is not finished and not held."""
        if summary.status in ("finished", "unreadable") or self.held(summary.owner):
            return summary.status
        return f"{summary.status} ({NO_LIVE_HOST})"

    def fields(self, summary: TurnSummary) -> dict[str, Any]:
        """What a JSON row adds: the owner's node and whether a live host holds the turn (None
        for a finished turn: nothing needs to)."""
        held = None if summary.status == "finished" else self.held(summary.owner)
        host = host_of(summary.owner) if summary.owner else None
        return {"owner_host": host, "owner_node": node_of(summary.owner), "held": held}

    def loads(self, summaries: Sequence[TurnSummary]) -> tuple[list[NodeLoad], int]:
        """Each node with live hosts and the unfinished turns they hold (idle ones too), by
        node; and how many unfinished turns no live host holds."""
        hosts: dict[str, int] = {}
        for node in self.live.values():
            hosts[node] = hosts.get(node, 0) + 1
        turns = dict.fromkeys(hosts, 0)
        orphans = 0
        for s in summaries:
            if s.status in ("finished", "unreadable"):
                continue
            if self.held(s.owner):
                node = self.live[s.owner or ""]
                turns[node] = turns.get(node, 0) + 1
            else:
                orphans += 1
        return [NodeLoad(n, hosts.get(n, 0), turns[n]) for n in sorted(turns)], orphans
