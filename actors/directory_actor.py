"""DirectoryActor: starts turns and finds them again by ``turn_id``.

The directory is the one address a caller, a supervisor or another process needs: it
creates a TurnActor for each ``StartTurn`` and forwards every command that names a
``turn_id`` (stop, cancel, approvals, ``StopTool``, ``Subscribe``) to that turn, keeping the
original sender as the one to answer. For a turn that has ended and gone, a stop or a cancel
is answered "no effect" (not an error) and anything else ``turn_finished``; an id it never
saw is ``unknown_turn``. A turn id is never reused.
"""

from __future__ import annotations

import logging
import os
import time
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

from messages import ControlReply, ListNodes, MembershipChanged, NodeInfo, NodeList, StartTurn, WatchMembership

from .errors import SnapshotError
from .llm_actor import LLMActor, PoolSize
from .plumbing import Hello, Relay, Welcome
from .store import SQLiteStore
from .tool_actor import ToolActor
from .turn_actor import Launch, LendToolActor, LentToolActorExited, LLMActorLost, ToolActorLent, TurnActor, TurnEnded

__all__ = [
    "Configure",
    "Configured",
    "Quiesce",
    "Quiesced",
    "DIRECTORY_NAME",
    "DirectoryActor",
    "DirectoryLocator",
    "LEADER_CAPABILITY",
    "json_capabilities",
]


def log() -> logging.Logger:
    """This module's logger, looked up at call time: Thespian replaces the logging manager
    in every actor process, so a logger created before the fork would log nowhere."""
    return logging.getLogger("greenroom.directory")


DIRECTORY_NAME = "greenroom.directory"
LEADER_CAPABILITY = "greenroom.leader"


def node_name(admin_address: Any) -> str:
    """``host:port`` of a node's admin address."""
    details = getattr(admin_address, "addressDetails", None)
    sockname = getattr(details, "sockname", None)
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        return f"{sockname[0]}:{sockname[1]}"
    return str(admin_address)


_THESPIAN_KEYS = ("Thespian", "Python Version", "Admin Port", "Convention Address.IPv4")


def json_capabilities(capabilities: dict[str, Any]) -> dict[str, Any]:
    """The capabilities a person set: plain JSON data, without Thespian's own entries."""
    out: dict[str, Any] = {}
    for k, v in (capabilities or {}).items():
        if k.startswith(_THESPIAN_KEYS):
            continue
        if isinstance(v, tuple):
            v = list(v)
        if isinstance(v, (str, int, float, bool, type(None), list)):
            out[k] = v
    return out


_REMEMBER_ENDED = 10_000


class Configure:
    """From the Runtime: use the store at ``store_path`` and recover its unfinished turns;
    or, on a member node, forward everything to the leader's directory ``upstream``."""

    def __init__(
        self,
        store_path: str | None = None,
        upstream: Any = None,
        llm_actors: int = 0,
        spare_turns: int = 0,
        spare_tools: int = 0,
    ) -> None:
        self.store_path = store_path
        self.upstream = upstream
        self.llm_actors = llm_actors
        self.spare_turns = spare_turns
        self.spare_tools = spare_tools


class DirectoryLocator(ActorTypeDispatcher):
    """Created on the leader (the node advertising ``greenroom.leader``) by a member, to
    learn the address of the leader's directory: global names do not span a convention."""

    @staticmethod
    def actorSystemCapabilityCheck(capabilities: dict[str, Any], requirements: dict[str, Any] | None) -> bool:
        return bool(capabilities.get(LEADER_CAPABILITY))

    def receiveMessage(self, msg: Any, sender: Any) -> None:
        if msg == "where":
            # the address may still be local until Thespian resolves the global name: the
            # reply waits for that, so this actor must not exit at once
            self.send(sender, self.createActor(DirectoryActor, globalName=DIRECTORY_NAME))
            self.wakeupAfter(timedelta(seconds=30), payload="done")
        elif isinstance(msg, WakeupMessage):
            self.send(self.myAddress, ActorExitRequest())


class Quiesce:
    """From the Runtime before it shuts down: fork no more spares, retire the idle ones, and
    answer ``Quiesced`` once they have exited.

    Thespian's shutdown can miss a child whose creation handshake is still under way, and
    its parent then waits for it for ever; retiring the spares first avoids that."""


class Quiesced:
    pass


class Configured:
    """The answer to ``Configure``: the turns recovered, and those that could not be."""

    def __init__(self, recovered: list[str], errors: dict[str, str]) -> None:
        self.recovered = recovered
        self.errors = errors


class DirectoryActor(ActorTypeDispatcher):
    """Maps turn ids to TurnActors. Create it with ``globalName=DIRECTORY_NAME``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.turns: dict[str, Any] = {}
        self.ended: OrderedDict[str, str] = OrderedDict()
        self.store_path: str | None = None
        self.store: SQLiteStore | None = None
        self.upstream: Any = None  # set on a member node: the leader's directory
        self.members: dict[str, dict[str, Any]] = {}
        self.watchers: list[Any] = []
        self.watching = False
        self.llm_pool: list[Any] = []  # LLMActors shared by this directory's turns
        self._next_llm = 0
        self.spares: list[Any] = []  # TurnActors forked ahead of need
        self.spare_target = 0
        self.tool_spares: list[Any] = []  # ToolActors forked ahead of need, lent to turns
        self.tool_spare_target = 0
        self.lent: list[tuple[Any, Any]] = []  # (lent ToolActor, the TurnActor using it); addresses are not hashable
        self.replenish_scheduled = False
        self.quiet = False  # no more forks: the runtime is shutting down
        self.quiesce_waiters: list[Any] = []

    def receiveMsg_Configure(self, msg: Configure, sender: Any) -> None:
        """Recover every unfinished turn of the store; a turn that cannot be read is skipped."""
        recovered: list[str] = []
        errors: dict[str, str] = {}
        if msg.upstream is not None:
            self.upstream = msg.upstream
            self.send(sender, Configured(recovered, errors))
            return
        if not self.watching:
            self.watching = True
            self.notifyOnSystemRegistrationChanges(True)
        while len(self.llm_pool) < msg.llm_actors:
            self.llm_pool.append(self.createActor(LLMActor))
        for addr in self.llm_pool:
            self.send(addr, PoolSize(len(self.llm_pool)))
        self.spare_target = msg.spare_turns
        self.tool_spare_target = msg.spare_tools
        self._replenish()
        if msg.store_path is not None and self.store is None:
            self.store_path = msg.store_path
            self.store = SQLiteStore(msg.store_path)
            for turn_id in self.store.unfinished():
                if turn_id in self.turns:
                    continue
                try:
                    self.store.load(turn_id)
                except (SnapshotError, KeyError) as exc:
                    errors[turn_id] = str(exc)
                    log().error("cannot recover turn %s: %s", turn_id, exc)
                    continue
                addr = self._turn_actor()
                self.turns[turn_id] = addr
                self.send(addr, Launch(None, self.store_path, recover_id=turn_id, llm=self._llm()))
                recovered.append(turn_id)
        self.send(sender, Configured(recovered, errors))

    def receiveMsg_Hello(self, msg: Hello, sender: Any) -> None:
        self.send(sender, Welcome(sender, os.getpid(), os.getsid(0)))

    def receiveMsg_Relay(self, relay: Relay, sender: Any) -> None:
        self._dispatch(relay.message, relay.reply_to, relay.announce)

    def receiveMsg_StartTurn(self, msg: StartTurn, sender: Any) -> None:
        self._dispatch(msg, sender)

    def _forward(self, msg: Any, sender: Any) -> None:
        self._dispatch(msg, sender)

    receiveMsg_StopTurn = _forward
    receiveMsg_CancelTurn = _forward
    receiveMsg_ToolApprovalResponse = _forward
    receiveMsg_RespondToApprovals = _forward
    receiveMsg_StopTool = _forward
    receiveMsg_Subscribe = _forward

    # -- membership -----------------------------------------------------------------------

    def receiveMsg_ActorSystemConventionUpdate(self, msg: ActorSystemConventionUpdate, sender: Any) -> None:
        node = node_name(msg.remoteAdminAddress)
        capabilities = json_capabilities(msg.remoteCapabilities or {})
        if msg.remoteAdded:
            self.members[node] = capabilities
        else:
            capabilities = self.members.pop(node, capabilities)
        change = MembershipChanged(node=node, joined=bool(msg.remoteAdded), capabilities=capabilities, at=time.time())
        log().info("node %s %s", node, "joined" if change.joined else "left")
        for watcher in self.watchers:
            self.send(watcher, change)

    def receiveMsg_WatchMembership(self, msg: WatchMembership, sender: Any) -> None:
        if self.upstream is not None:
            return self.send(self.upstream, Relay(msg, sender))
        self._watch(sender)

    def _watch(self, who: Any) -> None:
        if who not in self.watchers:
            self.watchers.append(who)
        for node, capabilities in self.members.items():
            self.send(who, MembershipChanged(node=node, joined=True, capabilities=capabilities))

    def receiveMsg_ListNodes(self, msg: ListNodes, sender: Any) -> None:
        self._list(msg, sender)

    def _list(self, msg: ListNodes, who: Any) -> None:
        if self.upstream is not None:
            return self.send(self.upstream, Relay(msg, who))
        nodes = [NodeInfo(node=n, capabilities=c) for n, c in sorted(self.members.items())]
        self.send(who, NodeList(request_id=msg.request_id, nodes=nodes))

    # -- turns ----------------------------------------------------------------------------

    def _dispatch(self, msg: Any, reply_to: Any, announce: bool = False) -> None:
        if isinstance(msg, WatchMembership):
            return self._watch(reply_to) if self.upstream is None else self.send(self.upstream, Relay(msg, reply_to))
        if isinstance(msg, ListNodes):
            return self._list(msg, reply_to)
        if self.upstream is not None:  # a member node's directory: the leader runs the turns
            return self.send(self.upstream, Relay(msg, reply_to))
        if isinstance(msg, StartTurn):
            if msg.turn_id in self.turns or msg.turn_id in self.ended or self._stored(msg.turn_id):
                return self._reply(
                    reply_to, msg.turn_id, "start_turn", False, "invalid", f"turn id {msg.turn_id} is already in use"
                )
            addr = self._turn_actor()
            self.turns[msg.turn_id] = addr
            lend = self._lend(addr) if any(not t.requires for t in msg.tools) else None
            self.send(
                addr, Launch(reply_to, self.store_path, start=msg, llm=self._llm(), tool_actor=lend, announce=announce)
            )
            self._schedule_replenish()
            return
        turn_id = getattr(msg, "turn_id", None)
        command = getattr(msg, "kind", type(msg).__name__)
        if not turn_id:
            return self._reply(
                reply_to, "", command, False, "invalid", f"{command} must name a turn_id when sent to the directory"
            )
        addr = self.turns.get(turn_id)
        if addr is not None:
            self.send(addr, Relay(msg, reply_to))
        elif command == "subscribe" and self._stored(turn_id):
            assert self.store is not None
            for event in self.store.events(turn_id, msg.since):
                self.send(reply_to, event)
        elif turn_id in self.ended or self._stored(turn_id):
            if command in ("stop_turn", "cancel_turn"):
                if getattr(msg, "request_id", None) is not None:
                    self._reply(reply_to, turn_id, command, True, None, "the turn has already ended", msg.request_id)
            else:
                reason = self.ended.get(turn_id, "see the store")
                self._reply(
                    reply_to,
                    turn_id,
                    command,
                    False,
                    "turn_finished",
                    f"turn {turn_id} has ended ({reason})",
                    getattr(msg, "request_id", None),
                )
        else:
            self._reply(
                reply_to,
                turn_id,
                command,
                False,
                "unknown_turn",
                f"no turn {turn_id}",
                getattr(msg, "request_id", None),
            )

    # -- spares: forked here, off every turn's path ---------------------------------------

    def _turn_actor(self) -> Any:
        return self.spares.pop(0) if self.spares else self.createActor(TurnActor)

    def _lend(self, turn: Any) -> Any:
        if not self.tool_spares or self.quiet:
            return None
        addr = self.tool_spares.pop(0)
        self.lent.append((addr, turn))
        return addr

    def receiveMsg_LendToolActor(self, msg: LendToolActor, sender: Any) -> None:
        addr = self._lend(sender)
        if addr is not None:
            self.send(sender, ToolActorLent(addr))
            self._schedule_replenish()
        elif not self.quiet:  # none ready: fork one now for this turn
            addr = self.createActor(ToolActor)
            self.lent.append((addr, sender))
            self.send(sender, ToolActorLent(addr))

    def _schedule_replenish(self) -> None:
        """Fork spares a moment later: a fork blocks this actor, and what it just sent should
        go out first (a self-sent message would be handled before the sends complete)."""
        if not self.replenish_scheduled:
            self.replenish_scheduled = True
            self.wakeupAfter(timedelta(milliseconds=5), payload="replenish")

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: Any) -> None:
        if msg.payload == "replenish":
            self.replenish_scheduled = False
            self._replenish()
        elif msg.payload == "quiesce":
            self._quiesced(force=True)

    def receiveMsg_Quiesce(self, msg: Quiesce, sender: Any) -> None:
        """Retire every idle spare and answer once they have all exited (at most 3 s)."""
        self.quiet = True
        self.quiesce_waiters.append(sender)
        for addr in self.spares + self.tool_spares:
            self.send(addr, ActorExitRequest())
        self.wakeupAfter(timedelta(seconds=3), payload="quiesce")
        self._quiesced()

    def _quiesced(self, force: bool = False) -> None:
        if self.quiesce_waiters and (force or not (self.spares or self.tool_spares)):
            for who in self.quiesce_waiters:
                self.send(who, Quiesced())
            self.quiesce_waiters = []

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        self.quiet = True

    def _replenish(self) -> None:
        if self.quiet:
            return
        while len(self.spares) < self.spare_target:
            self.spares.append(self.createActor(TurnActor))
        while len(self.tool_spares) < self.tool_spare_target:
            self.tool_spares.append(self.createActor(ToolActor))

    def _llm(self) -> Any:
        """The next LLMActor of the pool (round robin), or None: the turn starts its own."""
        if not self.llm_pool:
            return None
        self._next_llm = (self._next_llm + 1) % len(self.llm_pool)
        return self.llm_pool[self._next_llm]

    def _stored(self, turn_id: str) -> bool:
        return self.store is not None and self.store.exists(turn_id)

    def _reply(
        self,
        to: Any,
        turn_id: str,
        command: str,
        ok: bool,
        code: str | None,
        message: str,
        request_id: str | None = None,
    ) -> None:
        self.send(
            to,
            ControlReply(turn_id=turn_id, request_id=request_id, command=command, ok=ok, code=code, message=message),  # type: ignore[arg-type]
        )

    def receiveMsg_PoisonMessage(self, msg: Any, sender: Any) -> None:
        """A watcher that cannot be reached any more is dropped."""
        if isinstance(msg.poisonMessage, MembershipChanged) and sender in self.watchers:
            self.watchers.remove(sender)

    def receiveMsg_TurnEnded(self, msg: TurnEnded, sender: Any) -> None:
        self._remember(msg.turn_id, msg.finish_reason)

    def receiveMsg_ChildActorExited(self, msg: ChildActorExited, sender: Any) -> None:
        if msg.childAddress in self.spares or msg.childAddress in self.tool_spares:
            for pool in (self.spares, self.tool_spares):
                if msg.childAddress in pool:
                    pool.remove(msg.childAddress)
            self._quiesced()
            return
        for pair in self.lent:
            if pair[0] == msg.childAddress:
                self.lent.remove(pair)
                self.send(pair[1], LentToolActorExited(msg.childAddress))
                return
        if msg.childAddress in self.llm_pool:  # replace it; its streams are lost
            i = self.llm_pool.index(msg.childAddress)
            self.llm_pool[i] = self.createActor(LLMActor)
            self.send(self.llm_pool[i], PoolSize(len(self.llm_pool)))
            for addr in self.turns.values():
                self.send(addr, LLMActorLost(msg.childAddress))
            return
        for pair in list(self.lent):
            if pair[1] == msg.childAddress:  # the turn is gone: so is what it borrowed
                self.lent.remove(pair)
                self.send(pair[0], ActorExitRequest())
        for turn_id, addr in list(self.turns.items()):
            if addr == msg.childAddress:
                del self.turns[turn_id]
                if turn_id not in self.ended:
                    self._remember(turn_id, "lost")

    def _remember(self, turn_id: str, reason: str) -> None:
        self.ended[turn_id] = reason
        while len(self.ended) > _REMEMBER_ENDED:
            self.ended.popitem(last=False)

    def receiveUnrecognizedMessage(self, msg: Any, sender: Any) -> None:
        log().debug("DirectoryActor ignored %r", type(msg).__name__)
