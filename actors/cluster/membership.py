"""The nodes of a deployment as a directory sees them: their pools, their hosts, who watches.

On the leader, a node is announced to watchers (``MembershipChanged(joined=True)``) once
its directory has registered the node (``RegisterNode``: its pool and its TurnHosts), so a
call or a turn that needs the node's capabilities can be placed as soon as a caller learns
the node is there. The convention's join alone announces nothing; a registration alone does
(it is taken as the node's presence, with the capabilities it names, until the convention's
own record of the node replaces them). A node that leaves (gracefully, or
silent for the convention's timers) is announced at once and its pool and hosts dropped;
a registration from it that comes after (sent before it left: a drain's, say) is not taken
(``accepts``) until the convention has it again, or it would be placed on and announced as
joined for good.
A member's directory keeps the copy the leader last sent (``NodesChanged``): it goes on
placing calls and routing commands with it while the leader is away.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from messages import ListNodes, MembershipChanged, NodeInfo, NodeList

from ..logs import logger
from ..wire.protocol import NodeRecord

__all__ = ["Membership", "matches"]


log = logger("greenroom.directory")


def matches(capabilities: dict[str, Any], requires: dict[str, Any]) -> bool:
    return all(capabilities.get(k) == v for k, v in requires.items())


class Membership:
    """Members, their records and who watches them; ``send(to, message)`` is the directory's."""

    def __init__(self, send: Callable[[Any, Any], None]) -> None:
        self._send = send
        self.members: dict[str, dict[str, Any]] = {}  # joined the convention
        self.nodes: dict[str, NodeRecord] = {}  # registered, by node (this directory's own included)
        self.announced: set[str] = set()
        self.left: set[str] = set()  # left the convention and not back: what they registered is late
        self.watchers: list[Any] = []
        self.local_node = ""
        self.leader = True  # a member's directory: False (it has no convention updates)

    def convention_update(self, node: str, capabilities: dict[str, Any], joined: bool) -> bool:
        """Thespian saw a node join or leave; True if the records changed."""
        if joined:
            self.members[node] = capabilities
            self.left.discard(node)
            self._announce(node)
            return False
        capabilities = self.members.pop(node, capabilities)
        self.left.add(node)
        changed = self.nodes.pop(node, None) is not None
        if node in self.announced:
            self.announced.discard(node)
            self._tell(MembershipChanged(node=node, joined=False, capabilities=capabilities, at=time.time()))
        return changed

    def accepts(self, record: NodeRecord) -> bool:
        """False for a registration from a node that has left; once the convention has it
        back, its next one is taken (a member registers every ``directory.REREGISTER`` s)."""
        return record.node not in self.left

    def register(self, record: NodeRecord, local: bool = False) -> bool:
        """A node's directory registered (or registered again); True if its record changed."""
        changed = self.nodes.get(record.node) != record
        self.nodes[record.node] = record
        if local:
            self.local_node = record.node
        else:
            self.members.setdefault(record.node, record.capabilities)
            self._announce(record.node)
        return changed

    def replace(self, records: list[NodeRecord]) -> None:
        """A member's directory: the leader's latest view (this node's own record stays)."""
        own = self.nodes.get(self.local_node)
        self.nodes = {r.node: r for r in records}
        if own is not None:
            self.nodes[self.local_node] = own

    def _announce(self, node: str) -> None:
        if node in self.members and node in self.nodes and node not in self.announced:
            self.announced.add(node)
            log().info("node %s joined", node)
            self._tell(MembershipChanged(node=node, joined=True, capabilities=self.members[node], at=time.time()))

    def records(self) -> list[NodeRecord]:
        """The nodes that may be used: this one, and those announced (on a member: all it knows)."""
        return [
            r for n, r in sorted(self.nodes.items()) if not self.leader or n == self.local_node or n in self.announced
        ]

    def find_pool(self, requires: dict[str, Any]) -> NodeRecord | None:
        """A node whose capabilities include every one ``requires`` names; this one first."""
        for record in sorted(self.records(), key=lambda r: r.node != self.local_node):
            if matches(record.capabilities, requires):
                return record
        return None

    def hosts(self, store_id: str | None, requires: dict[str, Any] | None = None) -> list[tuple[str, Any]]:
        """``(host_id, address)`` of every host whose store is ``store_id`` on a node with
        ``requires``: where a new turn may go."""
        return [
            pair
            for r in self.records()
            if r.store_id == store_id and not r.draining and matches(r.capabilities, requires or {})
            for pair in r.host_ids()
        ]

    def watch(self, who: Any) -> None:
        if who not in self.watchers:
            self.watchers.append(who)
        for node in sorted(self.announced):
            self._send(who, MembershipChanged(node=node, joined=True, capabilities=self.members[node]))

    def unwatch(self, who: Any) -> None:
        if who in self.watchers:
            self.watchers.remove(who)

    def listing(self, request: ListNodes) -> NodeList:
        """Every node of the deployment: this one (the leader, which runs hosts and a pool as
        the others do) first, then the members announced, by name."""
        nodes = []
        own = self.nodes.get(self.local_node)
        if own is not None:
            nodes.append(NodeInfo(node=own.node, capabilities=own.capabilities, leader=True, hosts=len(own.hosts)))
        for n in sorted(self.announced - {self.local_node}):
            hosts = len(self.nodes[n].hosts) if n in self.nodes else 0
            nodes.append(NodeInfo(node=n, capabilities=self.members[n], hosts=hosts))
        return NodeList(request_id=request.request_id, nodes=nodes)

    def _tell(self, change: MembershipChanged) -> None:
        for watcher in self.watchers:
            self._send(watcher, change)
