"""DirectoryActor: the one address a caller needs; it starts the hosts and finds every turn.

On the leader it starts the node's ``ToolPool`` and one ``TurnHost`` per slot, recovers the
store's unfinished turns onto their hosts, and forwards anything that names a ``turn_id``
(``StartTurn`` from a supervisor, stop, cancel, approvals, ``StopTool``, ``Subscribe``) to
the host of its slot, keeping the original sender as the one to answer. The Runtime skips
it: it knows the hosts and sends to them directly.

A host that dies is replaced in its slot at once. With a store, the new host recovers the
slot's unfinished turns and the Runtime re-subscribes its handles; without one, those
turns are lost, and each of their callers gets ``Error(host_lost)`` and
``Finish(error)`` (from the Runtime for its own turns, from here for turns a supervisor
started through the directory; these two carry ``seq=-1``: they are not the turn's own).

On a member node it starts the node's pool, registers it with the leader's directory and
forwards every turn command there. It never runs a thread, so it may fork.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from datetime import timedelta
from typing import Any

from thespian.actors import (
    ActorExitRequest,
    ActorSystemConventionUpdate,
    ActorTypeDispatcher,
    ChildActorExited,
    WakeupMessage,
)

from messages import ListNodes, StartTurn, Subscribe, TurnCommand, WatchMembership, host_lost, reply_for, unaddressed

from ..host.turn_host import TurnHost
from ..lifecycle import lifeline
from ..logs import logger
from ..store import TurnStore, open_store
from ..store.base import is_url
from ..tools.pool import ToolPool
from ..wire.dispatch import Dispatcher
from ..wire.protocol import (
    Configure,
    Configured,
    FindPool,
    Hello,
    HostConfig,
    HostGone,
    HostReady,
    HostReplaced,
    PoolConfig,
    PoolFound,
    PoolInfo,
    PoolsChanged,
    Recover,
    Recovered,
    RegisterPool,
    Relay,
    Shutdown,
    Welcome,
)
from .membership import Membership
from .names import DIRECTORY_NAME, LEADER_CAPABILITY, json_capabilities, node_name, slot_of

__all__ = ["DirectoryActor", "DirectoryLocator"]

_REMEMBER_ROUTED = 10_000


log = logger("greenroom.directory")


class DirectoryLocator(ActorTypeDispatcher):
    """Created on the leader by a member node, to learn the address of the leader's
    directory: global names do not span a convention."""

    @staticmethod
    def actorSystemCapabilityCheck(capabilities: dict[str, Any], requirements: dict[str, Any] | None) -> bool:
        return bool(capabilities.get(LEADER_CAPABILITY))

    def receiveMessage(self, msg: Any, sender: Any) -> None:
        if msg == "where":
            self.send(sender, self.createActor(DirectoryActor, globalName=DIRECTORY_NAME))
            self.wakeupAfter(timedelta(seconds=30), payload="done")
        elif isinstance(msg, WakeupMessage):
            self.send(self.myAddress, ActorExitRequest())


class DirectoryActor(Dispatcher):
    """Create it with ``globalName=DIRECTORY_NAME``; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config: Configure | None = None
        self.hosts: list[Any] = []
        self.pool: Any = None
        self.store: TurnStore | None = None
        self.upstream: Any = None
        self.membership = Membership(self.send)
        self.routed: OrderedDict[str, Any] = OrderedDict()  # turn id -> who started it through here
        self.configuring: Any = None
        self.owner: Any = None
        self.waiting: set[int] = set()  # slots whose HostReady / Recovered is awaited
        self.recovered: list[str] = []
        self.errors: dict[str, str] = {}
        self.replacing: set[int] = set()
        self.closing = False

    # -- configuration and recovery -------------------------------------------------------

    def receiveMsg_Hello(self, msg: Hello, sender: Any) -> None:
        self.send(sender, Welcome(sender, os.getpid(), os.getsid(0)))

    def receiveMsg_Configure(self, msg: Configure, sender: Any) -> None:
        if self.config is not None:
            return  # a redelivery: configuration happens once
        self.config = msg
        self.pool = self.createActor(ToolPool)
        config = PoolConfig(msg.tool_processes, msg.recycle_after, self.myAddress, msg.node, msg.max_tool_processes)
        self.send(self.pool, config)
        local = PoolInfo(msg.node, dict(msg.capabilities), self.pool)
        if msg.upstream is not None:
            self.upstream = msg.upstream
            self.send(self.upstream, RegisterPool(local))
            self.send(sender, Configured([], [], {}))
            return
        self.membership.register(local, local=True)
        self.owner = sender  # the Runtime: its hosts send it their spans
        self.notifyOnSystemRegistrationChanges(True)
        if msg.store is not None:
            self.store = open_store(msg.store)
        self.configuring = sender
        count = max(1, msg.hosts)
        self.hosts = [self._new_host(slot, count) for slot in range(count)]
        self.waiting = set(range(len(self.hosts)))

    def _new_host(self, slot: int, count: int) -> Any:
        assert self.config is not None
        host = self.createActor(TurnHost)
        c = self.config
        config = HostConfig(
            slot, count, c.store, self.pool, self.myAddress, c.inline_async_tools, self.owner, c.node, c.command_hold
        )
        self.send(host, config)
        return host

    def receiveMsg_HostReady(self, msg: HostReady, sender: Any) -> None:
        if msg.slot in self.replacing:
            return self._recover_slot(msg.slot)
        self.waiting.discard(msg.slot)
        if self.waiting or self.configuring is None:
            return
        self.waiting = set(range(len(self.hosts)))
        for slot in range(len(self.hosts)):
            self._recover_slot(slot)

    def _recover_slot(self, slot: int) -> None:
        turn_ids = [t for t in self._unfinished() if slot_of(t, len(self.hosts)) == slot]
        self.send(
            self.hosts[slot], Recover(turn_ids, force=not is_url(self.config.store or "") if self.config else True)
        )

    def _unfinished(self) -> list[str]:
        if self.store is None:
            return []
        try:
            return self.store.unfinished()
        except Exception as exc:  # a damaged store: say so once, recover nothing
            self.errors["*"] = f"cannot list the store's turns: {exc}"
            log().error("cannot list the unfinished turns of the store: %s", exc)
            return []

    def receiveMsg_Recovered(self, msg: Recovered, sender: Any) -> None:
        if msg.slot in self.replacing:
            self.replacing.discard(msg.slot)
            self._host_replaced(msg.slot, msg.recovered)
            return
        self.recovered.extend(msg.recovered)
        self.errors.update(msg.errors)
        self.waiting.discard(msg.slot)
        if not self.waiting and self.configuring is not None:
            self.send(self.configuring, Configured(list(self.hosts), self.recovered, self.errors))
            self.configuring = None

    # -- routing --------------------------------------------------------------------------

    def receiveMessage(self, message: Any, sender: Any) -> Any:
        if isinstance(message, Relay):  # forwarded by a member's directory: answer the original sender
            message, sender = message.message, message.reply_to
        return super().receiveMessage(message, sender)  # to receiveMsg_<Class>

    def receiveMsg_StartTurn(self, msg: StartTurn, sender: Any) -> None:
        if self.upstream is None and msg.turn_id and self.hosts:
            self.routed[msg.turn_id] = sender
            while len(self.routed) > _REMEMBER_ROUTED:
                self.routed.popitem(last=False)
        self._to_host(msg, sender)

    def receiveMsg_TurnCommand(self, msg: TurnCommand, sender: Any) -> None:
        self._to_host(msg, sender)

    def receiveMsg_Subscribe(self, msg: Subscribe, sender: Any) -> None:
        self._to_host(msg, sender)

    def _to_host(self, msg: Any, reply_to: Any) -> None:
        """To the host of the turn's slot (from a member: to the leader's directory)."""
        if self.upstream is not None:
            return self.send(self.upstream, Relay(msg, reply_to))
        refused = unaddressed(msg)
        if refused is None and not self.hosts:
            refused = reply_for(msg, False, "invalid", "this directory runs no TurnHost yet")
        if refused is not None:
            return self.send(reply_to, refused)
        self.send(self.hosts[slot_of(msg.turn_id, len(self.hosts))], Relay(msg, reply_to))

    # -- hosts that die -------------------------------------------------------------------

    def receiveMsg_ChildActorExited(self, msg: ChildActorExited, sender: Any) -> None:
        if msg.childAddress not in self.hosts or self.closing:
            if msg.childAddress == self.pool and not self.closing and not lifeline.is_cut():
                log().error("the tool pool exited; tool calls can no longer start")
            return
        slot = self.hosts.index(msg.childAddress)
        log().error("TurnHost %d exited; its turns are %s", slot, "recovered" if self.store else "lost")
        if self.pool is not None:
            self.send(self.pool, HostGone(msg.childAddress))
        self.replacing.add(slot)
        self.hosts[slot] = self._new_host(slot, len(self.hosts))

    def _host_replaced(self, slot: int, recovered: list[str]) -> None:
        for watcher in self.membership.watchers:
            self.send(watcher, HostReplaced(slot, self.hosts[slot], recovered))
        for turn_id, who in list(self.routed.items()):
            if slot_of(turn_id, len(self.hosts)) != slot:
                continue
            if turn_id in recovered:
                self.send(self.hosts[slot], Relay(Subscribe(turn_id=turn_id, since=0), who))
            else:
                detail = "the process that ran this turn died; without a store the turn cannot be recovered"
                for event in host_lost(turn_id, -1, detail):
                    self.send(who, event)
                del self.routed[turn_id]

    # -- membership and placement ---------------------------------------------------------

    def receiveMsg_ActorSystemConventionUpdate(self, msg: ActorSystemConventionUpdate, sender: Any) -> None:
        node = node_name(msg.remoteAdminAddress)
        changed = self.membership.convention_update(
            node, json_capabilities(msg.remoteCapabilities or {}), bool(msg.remoteAdded)
        )
        if changed:
            self._pools_changed()

    def receiveMsg_RegisterPool(self, msg: RegisterPool, sender: Any) -> None:
        self.membership.register(msg.pool)
        self._pools_changed()

    def _pools_changed(self) -> None:
        for host in self.hosts:
            self.send(host, PoolsChanged(list(self.membership.pools.values())))

    def receiveMsg_FindPool(self, msg: FindPool, sender: Any) -> None:
        self.send(sender, PoolFound(msg.requires, self.membership.find_pool(msg.requires)))

    def receiveMsg_WatchMembership(self, msg: WatchMembership, sender: Any) -> None:
        self._watch(sender)

    def _watch(self, who: Any) -> None:
        if self.upstream is not None:
            return self.send(self.upstream, Relay(WatchMembership(), who))
        self.membership.watch(who)

    def receiveMsg_ListNodes(self, msg: ListNodes, sender: Any) -> None:
        self._list(msg, sender)

    def _list(self, msg: ListNodes, who: Any) -> None:
        if self.upstream is not None:
            return self.send(self.upstream, Relay(msg, who))
        self.send(who, self.membership.listing(msg))

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

    def receiveUnrecognizedMessage(self, msg: Any, sender: Any) -> None:
        log().debug("DirectoryActor ignored %r", type(msg).__name__)
