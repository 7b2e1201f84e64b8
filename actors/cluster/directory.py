"""DirectoryActor: one per node; it starts the node's hosts and pool and finds every turn.

On every node it starts the node's ``ToolPool`` and its ``TurnHost``s (``Configure.hosts``,
none on a tool-only node), replaces a host that dies in its slot, and has the hosts recover
their turns from the store at start. On the leader (the Runtime's node) it keeps the
cluster's table of nodes (``membership``: capabilities, pool, hosts, store) from the
members' registrations and Thespian's convention, and sends it (``NodesChanged``) to its
hosts, its Runtime and every member's directory after each change. A member's directory
registers its node with the leader's every ``REREGISTER`` seconds (a restarted leader, found
through a ``DirectoryLocator``, learns it again) and keeps the last table it was sent:
placement and routing go on while the leader is away.

Anything that names a turn and comes from someone other than the turn's caller (a
supervisor actor's ``StartTurn``, stop, cancel, approvals, ``StopTool``, ``Subscribe``) is
placed or routed here (``routes``) and forwarded with its original sender, who gets the
answer. The Runtime skips the directory for its own turns: it places them and knows where.

A host that dies is replaced in its slot at once. With a store, the new host recovers the
turns it owned and the Runtime re-subscribes its handles; without one, their callers get
``Error(host_lost)`` and ``Finish(error)`` (from the Runtime for its own turns, from here,
with ``seq=-1``, for turns a supervisor started through it). It never runs a thread.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ActorSystemConventionUpdate, ChildActorExited, WakeupMessage

from messages import ListNodes, StartTurn, Subscribe, TurnCommand, WatchMembership, host_lost, reply_for, unaddressed

from ..errors import StoreError
from ..host.turn_host import TurnHost
from ..lifecycle import lifeline
from ..logs import logger
from ..store import TurnStore, open_store
from ..store.base import is_url
from ..tools.pool import ToolPool
from ..placement import rendezvous
from ..wire.dispatch import Dispatcher
from ..wire.protocol import (
    Configure, Configured, Find, FindPool, Hello, HostConfig, HostGone, HostReady, HostReplaced, Located, NodeRecord,
    NodesChanged, PoolConfig, PoolFound, Recover, Recovered, RegisterNode, Relay, Shutdown, Welcome,
)  # fmt: skip
from .leaving import NodeDraining
from .membership import Membership
from .names import LEADER_CAPABILITY, json_capabilities, node_name
from .recovery import recovery_plan
from .routes import Routes

__all__ = ["REREGISTER", "DirectoryActor"]

REREGISTER = 2.0  # seconds between a member's registrations with the leader
_REMEMBER_ROUTED = 10_000


log = logger("greenroom.directory")


class DirectoryActor(Dispatcher, NodeDraining):
    """Create it with ``globalName=DIRECTORY_NAME``; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config: Configure | None = None
        self.hosts: list[Any] = []
        self.pool: Any = None
        self.store: TurnStore | None = None
        self.store_id: str | None = None
        self.upstream: Any = None
        self.membership = Membership(self.send)
        self.routes = Routes(self.send)
        self.routed: OrderedDict[str, Any] = OrderedDict()  # turn id -> who started it through here
        self.members: dict[str, Any] = {}  # node -> its directory (on the leader)
        self.configuring: Any = None
        self.owner: Any = None
        self.waiting: set[int] = set()  # slots whose HostReady / Recovered is awaited
        self.identities: dict[int, str] = {}  # slot -> its host's identity in the store
        self.recovered: list[str] = []
        self.errors: dict[str, str] = {}
        self.replacing: dict[int, list[str]] = {}  # slot -> turns routed to its dead host
        self.closing = False
        self.locate_timer = False
        self.locator: Any = None  # on a member: a DirectoryLocator on the leader
        self.unanswered = 0

    # -- configuration and recovery -------------------------------------------------------

    def receiveMsg_Hello(self, msg: Hello, sender: Any) -> None:
        self.send(sender, Welcome(sender, os.getpid(), os.getsid(0)))

    def receiveMsg_Configure(self, msg: Configure, sender: Any) -> None:
        if self.config is not None:
            return  # a redelivery: configuration happens once
        self.config, self.configuring = msg, sender
        self.pool = self.createActor(ToolPool)
        config = PoolConfig(msg.tool_processes, msg.recycle_after, self.myAddress, msg.node, msg.max_tool_processes)
        self.send(self.pool, config)
        self.membership.local_node = msg.node
        self.upstream = msg.upstream
        if self.upstream is None:
            self.owner = sender  # the Runtime: its hosts send it their spans
            self.notifyOnSystemRegistrationChanges(True)
        else:
            self.membership.leader = False
        if msg.store is not None:
            try:
                self.store = open_store(msg.store, quick=True)  # a lost link fails a call in seconds
                self.store_id = self.store.hosts.identity()
            except StoreError as exc:
                self.errors["*"] = str(exc)
                log().error("cannot open the store: %s", exc)
        self.hosts = [self._new_host(slot) for slot in range(max(0, msg.hosts))]
        self.waiting = set(range(len(self.hosts)))
        if not self.hosts:
            self._configured()

    def _new_host(self, slot: int) -> Any:
        assert self.config is not None
        host = self.createActor(TurnHost)
        c = self.config
        config = HostConfig(
            slot, c.store, self.pool, self.myAddress, c.inline_async_tools, self.owner, c.node, c.command_hold,
            c.max_running, c.max_queued, json_capabilities(dict(c.capabilities)),
        )  # fmt: skip
        self.send(host, config)
        return host

    def host_id(self, slot: int) -> str:
        return f"{self.config.node if self.config else ''}/{slot}"

    def receiveMsg_HostReady(self, msg: HostReady, sender: Any) -> None:
        if msg.identity is not None:
            self.identities[msg.slot] = msg.identity
        if msg.slot in self.replacing:
            return self._recover([msg.slot])
        self.waiting.discard(msg.slot)
        if not self.waiting and self.configuring is not None:
            self.waiting = set(range(len(self.hosts)))
            self._recover(list(range(len(self.hosts))))

    def _recover(self, slots: list[int]) -> None:
        """Have the hosts of ``slots`` recover their turns (``recovery``)."""
        shared = self.config is not None and is_url(self.config.store or "")
        plan, error = recovery_plan(self.store, [self.host_id(s) for s in range(len(self.hosts))], shared)
        if error is not None:
            self.errors["*"] = error
        for slot in slots:
            self.send(self.hosts[slot], Recover(plan[self.host_id(slot)], force=not shared))

    def receiveMsg_Recovered(self, msg: Recovered, sender: Any) -> None:
        if msg.slot in self.replacing:
            self._host_replaced(msg.slot, msg.recovered)
            return
        self.recovered.extend(msg.recovered)
        self.errors.update(msg.errors)
        self.waiting.discard(msg.slot)
        if not self.waiting and self.configuring is not None:
            self._configured()

    def _configured(self) -> None:
        self._register_local()
        self.send(self.configuring, Configured(list(self.hosts), self.recovered, self.errors, self.store_id))
        self.configuring = None

    def _record(self) -> NodeRecord:
        c = self.config
        assert c is not None
        caps = json_capabilities(dict(c.capabilities))
        return NodeRecord(c.node, caps, self.pool, tuple(self.hosts), self.store_id, self.draining)

    def _register_local(self) -> None:
        """This node's record changed (configured, a host replaced): tell who needs it."""
        record = self._record()
        self.membership.register(record, local=True)
        if self.upstream is not None:
            self.send(self.upstream, RegisterNode(record))
            self._every("reregister", REREGISTER)
        self._nodes_changed()

    # -- the cluster's table --------------------------------------------------------------

    def _nodes_changed(self) -> None:
        """Send the table to this node's hosts, and, on the leader, to the Runtime and members."""
        change = NodesChanged(self.membership.records(), self.owner)
        for host in self.hosts:
            self.send(host, change)
        if self.upstream is None:
            if self.owner is not None:
                self.send(self.owner, change)
            for directory in self.members.values():
                self.send(directory, change)

    def receiveMsg_RegisterNode(self, msg: RegisterNode, sender: Any) -> None:
        if not self.membership.accepts(msg.record):
            return  # sent before its node left, come after: not a node to place on
        self.members[msg.record.node] = sender
        if self.membership.register(msg.record):
            self._nodes_changed()

    def receiveMsg_NodesChanged(self, msg: NodesChanged, sender: Any) -> None:
        """On a member: the leader's table."""
        self.membership.replace(msg.nodes)
        if self.owner is None and msg.owner is not None:
            self.owner = msg.owner  # the leader's Runtime: where the hosts here send their spans
        change = NodesChanged(self.membership.records(), self.owner)
        for host in self.hosts:
            self.send(host, change)

    def _look_for_leader(self) -> None:
        """On a member: ask the leader where its directory is (a ``DirectoryLocator`` there,
        made anew when the last one went unanswered: the leader may have restarted)."""
        if self.locator is None or self.unanswered >= 3:
            self.locator = self.createActor(
                "actors.cluster.locator.DirectoryLocator", targetActorRequirements={LEADER_CAPABILITY: True}
            )
            self.unanswered = 0
        self.unanswered += 1
        self.send(self.locator, "where")

    def receiveMsg_ActorAddress(self, msg: Any, sender: Any) -> None:
        """A locator's answer: where the leader's directory is now."""
        if sender != self.locator:
            return
        self.unanswered = 0
        if msg != self.upstream and self.config is not None and self.configuring is None:
            log().info("the leader's directory is at a new address (the leader restarted): registering again")
            self.upstream = msg
            self.send(self.upstream, RegisterNode(self._record()))

    def receiveMsg_ActorSystemConventionUpdate(self, msg: ActorSystemConventionUpdate, sender: Any) -> None:
        node = node_name(msg.remoteAdminAddress)
        left = self.membership.nodes.get(node) if not msg.remoteAdded else None
        changed = self.membership.convention_update(
            node, json_capabilities(msg.remoteCapabilities or {}), bool(msg.remoteAdded)
        )
        if left is not None:
            self.members.pop(node, None)
            for address in left.hosts:
                for turn_id in self._lost_host(address):
                    if left.store_id is None:  # a durable one is taken over: its caller follows it
                        self._lost(turn_id, f"node {node} left the cluster; its turns kept no store")
        if changed:
            self._nodes_changed()

    def receiveMsg_FindPool(self, msg: FindPool, sender: Any) -> None:
        self.send(sender, PoolFound(msg.requires, self.membership.find_pool(msg.requires)))

    # -- placement and routing ------------------------------------------------------------

    def receiveMessage(self, message: Any, sender: Any) -> Any:
        if isinstance(message, Relay):  # forwarded by another directory: answer the original sender
            message, sender = message.message, message.reply_to
        return super().receiveMessage(message, sender)  # to receiveMsg_<Class>

    def receiveMsg_StartTurn(self, msg: StartTurn, sender: Any) -> None:
        """Placed as the Runtime places its own: rendezvous over the hosts on this node's
        store whose node has ``requires``."""
        refused = unaddressed(msg)
        hosts = dict(self.membership.hosts(self.store_id, msg.requires))
        chosen = rendezvous(msg.turn_id, hosts) if refused is None else None
        if chosen is None:
            why = (
                f"no host can run it (requires {msg.requires})" if msg.requires else "this directory knows no TurnHost"
            )
            return self.send(sender, refused or reply_for(msg, False, "invalid", why))
        self.routes.learn(msg.turn_id, hosts[chosen])
        self.routed[msg.turn_id] = sender
        while len(self.routed) > _REMEMBER_ROUTED:
            self.routed.popitem(last=False)
        self.send(hosts[chosen], Relay(msg, sender))

    def receiveMsg_TurnCommand(self, msg: TurnCommand, sender: Any) -> None:
        self._route(msg, sender)

    def receiveMsg_Subscribe(self, msg: Subscribe, sender: Any) -> None:
        self._route(msg, sender)

    def _route(self, msg: Any, reply_to: Any) -> None:
        refused = unaddressed(msg)
        if refused is not None:
            return self.send(reply_to, refused)
        self.routes.send(msg.turn_id, msg, reply_to, dict(self.membership.hosts(self.store_id)), self.store)

    def receiveMsg_Find(self, msg: Find, sender: Any) -> None:
        hosts = [a for r in self.membership.records() for _, a in r.host_ids()]
        self.routes.find(msg.turn_id, sender, hosts)
        if self.routes.finding and not self.locate_timer:
            self.locate_timer = True
            self._every("locate", 1.0)

    def receiveMsg_Located(self, msg: Located, sender: Any) -> None:
        self.routes.located(msg.turn_id, msg.here, sender)

    # -- timers ---------------------------------------------------------------------------

    def _every(self, name: str, seconds: float) -> None:
        self.wakeupAfter(timedelta(seconds=seconds), payload=name)

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: Any) -> None:
        if msg.payload == "reregister" and self.upstream is not None and not self.closing:
            self.send(self.upstream, RegisterNode(self._record()))
            self._look_for_leader()
            self._every("reregister", REREGISTER)
        elif msg.payload == "locate":
            self.routes.expire(time.monotonic())
            self.locate_timer = bool(self.routes.finding)
            if self.locate_timer:
                self._every("locate", 1.0)

    # -- hosts that die -------------------------------------------------------------------

    def receiveMsg_ChildActorExited(self, msg: ChildActorExited, sender: Any) -> None:
        if msg.childAddress == self.locator:
            self.locator = None  # the leader is away: a new one is made at the next look
            return
        if msg.childAddress not in self.hosts or self.closing:
            if msg.childAddress == self.pool and not self.closing and not lifeline.is_cut():
                log().error("the tool pool exited: the processes it lent serve on, but no new one is forked")
            return
        slot = self.hosts.index(msg.childAddress)
        log().error("TurnHost %d exited; its turns are %s", slot, "recovered" if self.store else "lost")
        self._drop_lease(self.identities.pop(slot, None))
        if self.pool is not None:
            self.send(self.pool, HostGone(msg.childAddress))
        self.replacing[slot] = self._lost_host(msg.childAddress)
        self.hosts[slot] = self._new_host(slot)

    def _drop_lease(self, dead: str | None) -> None:
        """A host that died gives up its lease: its replacement claims its turns at once."""
        try:
            if dead is not None and self.store is not None:
                self.store.hosts.drop(dead)
        except StoreError as exc:
            log().warning("cannot drop the lease of host %s (its turns wait for it to run out): %s", dead, exc)

    def _lost_host(self, address: Any) -> list[str]:
        """Forget the routes to a host that is gone; the turns started through here it ran."""
        return [t for t in self.routes.forget_host(address) if t in self.routed]

    def _host_replaced(self, slot: int, recovered: list[str]) -> None:
        for watcher in self.membership.watchers:
            self.send(watcher, HostReplaced(slot, self.hosts[slot], recovered, self.host_id(slot)))
        for turn_id in self.replacing.pop(slot, []):
            if turn_id in recovered:
                self.routes.learn(turn_id, self.hosts[slot])
                self.send(self.hosts[slot], Relay(Subscribe(turn_id=turn_id, since=0), self.routed[turn_id]))
            elif self.store is None:
                self._lost(turn_id, "the process that ran this turn died; without a store it cannot be recovered")
        self._register_local()

    def _lost(self, turn_id: str, detail: str) -> None:
        """Tell who started a turn through here that it is lost."""
        who = self.routed.pop(turn_id, None)
        if who is not None:
            for event in host_lost(turn_id, -1, detail):
                self.send(who, event)

    # -- membership -----------------------------------------------------------------------

    def receiveMsg_WatchMembership(self, msg: WatchMembership, sender: Any) -> None:
        if self.upstream is not None:
            return self.send(self.upstream, Relay(WatchMembership(), sender))
        self.membership.watch(sender)

    def receiveMsg_ListNodes(self, msg: ListNodes, sender: Any) -> None:
        if self.upstream is not None:
            return self.send(self.upstream, Relay(msg, sender))
        self.send(sender, self.membership.listing(msg))

    def receiveMsg_PoisonMessage(self, msg: Any, sender: Any) -> None:
        """A watcher that cannot be reached any more is dropped."""
        self.membership.unwatch(sender)

    # -- the end --------------------------------------------------------------------------

    def receiveMsg_Shutdown(self, msg: Shutdown, sender: Any) -> None:
        """The runtime is closing (it tells each host itself): stop replacing hosts and
        forking tool processes."""
        self.closing = True
        if self.pool is not None:
            self.send(self.pool, msg)

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        if self.store is not None:
            self.store.close()

    def receiveUnrecognizedMessage(self, msg: Any, sender: Any) -> None:
        log().debug("DirectoryActor ignored %r", type(msg).__name__)
