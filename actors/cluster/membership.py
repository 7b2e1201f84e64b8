"""The nodes of a deployment as the leader's directory sees them, and their tool pools.

A node is announced to watchers (``MembershipChanged(joined=True)``) once Thespian's
convention has it *and* its directory has registered the node's tool pool, so a call that
needs the node's capabilities can be placed as soon as a caller learns the node is there.
A node that leaves (gracefully, or silent for the convention's timers) is announced at once
and its pool is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from messages import ListNodes, MembershipChanged, NodeInfo, NodeList

from ..logs import logger
from ..wire.protocol import PoolInfo

__all__ = ["Membership"]


log = logger("greenroom.directory")


def matches(capabilities: dict[str, Any], requires: dict[str, Any]) -> bool:
    return all(capabilities.get(k) == v for k, v in requires.items())


class Membership:
    """Members, their pools and who watches them; ``send(to, message)`` is the directory's."""

    def __init__(self, send: Callable[[Any, Any], None]) -> None:
        self._send = send
        self.members: dict[str, dict[str, Any]] = {}  # joined the convention
        self.pools: dict[str, PoolInfo] = {}  # registered, by node (the leader's own included)
        self.announced: set[str] = set()
        self.watchers: list[Any] = []
        self.local_node = ""

    def convention_update(self, node: str, capabilities: dict[str, Any], joined: bool) -> bool:
        """Thespian saw a node join or leave; True if the pools changed."""
        if joined:
            self.members[node] = capabilities
            self._announce(node)
            return False
        capabilities = self.members.pop(node, capabilities)
        changed = self.pools.pop(node, None) is not None
        if node in self.announced:
            self.announced.discard(node)
            self._tell(MembershipChanged(node=node, joined=False, capabilities=capabilities, at=time.time()))
        return changed

    def register(self, pool: PoolInfo, local: bool = False) -> None:
        """A node's directory registered its pool."""
        self.pools[pool.node] = pool
        if local:
            self.local_node = pool.node
        else:
            self.members.setdefault(pool.node, pool.capabilities)
            self._announce(pool.node)

    def _announce(self, node: str) -> None:
        if node in self.members and node in self.pools and node not in self.announced:
            self.announced.add(node)
            log().info("node %s joined", node)
            self._tell(MembershipChanged(node=node, joined=True, capabilities=self.members[node], at=time.time()))

    def find_pool(self, requires: dict[str, Any]) -> PoolInfo | None:
        """A pool whose node has every capability ``requires`` names; the leader's first."""
        ordered = sorted(self.pools.values(), key=lambda p: p.node != self.local_node)
        for pool in ordered:
            if pool.node == self.local_node or pool.node in self.announced:
                if matches(pool.capabilities, requires):
                    return pool
        return None

    def watch(self, who: Any) -> None:
        if who not in self.watchers:
            self.watchers.append(who)
        for node in sorted(self.announced):
            self._send(who, MembershipChanged(node=node, joined=True, capabilities=self.members[node]))

    def unwatch(self, who: Any) -> None:
        if who in self.watchers:
            self.watchers.remove(who)

    def listing(self, request: ListNodes) -> NodeList:
        nodes = [NodeInfo(node=n, capabilities=self.members[n]) for n in sorted(self.announced)]
        return NodeList(request_id=request.request_id, nodes=nodes)

    def _tell(self, change: MembershipChanged) -> None:
        for watcher in self.watchers:
            self._send(watcher, change)
