"""The embedded runtime: a private actor system, turns as handles, nothing left behind.

``Runtime`` starts a ``multiprocTCPBase`` actor system on its own admin port, listening on ``host`` only
(``127.0.0.1`` by default) and authenticating every frame with a fresh key; in it a directory, one
``TurnHost`` per core and a ``ToolPool`` (``tree``). ``run()`` places the turn on a host of the cluster
(``routing``), sends ``StartTurn`` straight there and returns a ``TurnHandle``.

What a user can rely on when things end:

- ``close()`` (or leaving the ``with`` block) returns within ``close_timeout`` seconds
  whatever the runtime is doing, never hides the exception that left the block, and leaves
  no process: without a store, live turns end ``stopped`` first; with one they stay in the
  store, to be recovered by the next ``Runtime`` on it;
- if the owning process dies in any way, every process of the tree (tool subprocesses
  included) ends within milliseconds, through the lifeline (``lifeline``), and the store's
  lock is free again; SIGTERM and SIGINT close the runtime gracefully first (``owner``).

Thread-safe: any thread may start and steer turns; one pump thread owns the connection to
the actor system (``endpoint``), so no caller ever blocks on Thespian.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from thespian.actors import ActorSystem

from messages import (
    ControlReply,
    ForkOrigin,
    ProviderConfig,
    StartTurn,
    ToolSpec,
    TurnOptions,
    WatchMembership,
    new_turn_id,
)

from ..console import NO_CONSOLE, start_console
from ..errors import ConfigurationError, RuntimeClosedError, TurnTimeout
from ..host.admission import DEFAULT_MAX_QUEUED, DEFAULT_MAX_RUNNING, checked_limits
from ..lifecycle import owner
from ..lifecycle.cpus import usable_cpus
from ..lifecycle.processes import free_port
from ..store import TurnStore
from ..store.base import store_location
from ..telemetry.export import SpanSink
from ..telemetry.metrics import MetricSink
from ..tools.definition import Tool
from ..tools.pool import DEFAULT_MAX_TOOL_PROCESSES, DEFAULT_TOOL_PROCESSES
from ..wire.protocol import Configure, HostReplaced, NodesChanged
from ..wire.transport import TransportConfig
from .attaching import Attaching
from .follow import STORE_WAIT, Follower
from .handle import TurnHandle
from .inputs import History, checked_options, checked_provider, checked_requires, checked_tools, history
from .receiving import Inbound
from .routing import Hosts, addressed, waiting
from .session import Session
from .sessions import Sessions
from .starting import Room, admission, admit_later, admitted_as, checked_admission, elsewhere
from .stream import TurnResult, TurnStream

__all__ = ["History", "Runtime", "TurnHandle", "TurnResult", "history"]

ToolLike = Tool | Callable[..., Any] | ToolSpec


class Runtime(Attaching, Sessions):
    """An embedded greenroom: its own actor system, its turns, and a clean end.

    ``provider`` is the default for ``run()``; ``admin_port`` defaults to a free port; ``host`` is the
    only interface anything listens on. With ``store`` (a SQLite file path, or a ``postgresql://`` URL)
    every turn is durable: unfinished turns are recovered at start; on SQLite the command line finds
    this runtime through ``<store>.runtime.json``, on PostgreSQL through the store itself, and the turns
    go to every node on that store. ``hosts`` TurnHost processes (default: one per CPU this process may
    use, its affinity and its cgroup quota: ``lifecycle.cpus``; 0 leaves the turns to the members) run
    the turns; at most ``max_tool_processes`` tool processes run on this node (calls beyond them wait
    for one, and can be stopped or cancelled while they wait); each host keeps one tool process for its
    next call, and the pool ``tool_processes`` more forked ahead of need, shared by the node's hosts;
    every tool process is recycled after ``recycle_after`` calls; ``inline_async_tools`` runs every
    ``async def`` tool in its turn's host. ``transport`` sets encryption and the limits of the wire
    (``transport.TransportConfig``); the first Runtime of a process decides them for the process. Turns
    are traced with OpenTelemetry when ``tracer_provider`` (default: the global one) is configured
    (``telemetry.export``); metrics likewise with ``meter_provider`` (``telemetry.metrics``).
    ``console`` serves the console (``console``). ``event_window`` bounds what each turn handle holds
    unread: the turn's host sends it at most that many events past what its readers have read, and keeps
    the rest in the turn's log until they read on (``None``: no bound). A command for a turn its host
    does not know yet (it overtook the turn's start, from another process) is held ``command_hold``
    seconds (the transport's ``deliver_within``) before ``unknown_turn``, and never more than three
    quarters of the time its sender waits for the answer (what the command says in ``answer_within``:
    ``control()`` and the handles set their ``timeout``).

    Starting a Runtime changes Thespian in this process and every process it forks: frames
    are signed and sockets bound to ``host`` (``transport``), a lost node is noticed in
    seconds, and a few internals are used for ACK-clocked batches and the non-blocking
    endpoint: ``thespian_compat`` lists them, and refuses an untested Thespian version.
    """

    def __init__(
        self,
        provider: ProviderConfig | None = None,
        *,
        store: str | os.PathLike[str] | None = None,
        admin_port: int | None = None,
        host: str = "127.0.0.1",
        key: bytes | None = None,
        capabilities: dict[str, Any] | None = None,
        hosts: int | None = None,
        tool_processes: int = DEFAULT_TOOL_PROCESSES,
        max_tool_processes: int = DEFAULT_MAX_TOOL_PROCESSES,
        recycle_after: int = 100,
        inline_async_tools: bool = False,
        handle_signals: bool = True,
        transport: TransportConfig | None = None,
        start_timeout: float = 30.0,
        close_timeout: float = 5.0,
        tracer_provider: Any = None,
        event_window: int | None = 1024,
        command_hold: float | None = None,
        meter_provider: Any = None,
        console: Any = None,
        store_wait: float = STORE_WAIT,
        max_running: int = DEFAULT_MAX_RUNNING,
        max_queued: int = DEFAULT_MAX_QUEUED,
    ) -> None:
        self.provider = provider
        self.event_window = event_window
        self.command_hold = (
            command_hold if command_hold is not None else (transport or TransportConfig()).deliver_within
        )
        self.store_path = store_location(store)  # a SQLite file's absolute path, or a URL without its password
        self.recovered: list[str] = []
        self.unrecoverable: dict[str, str] = {}
        self.capabilities = dict(capabilities or {})
        self.hosts = hosts if hosts is not None else usable_cpus()  # affinity and cgroup quota (``lifecycle.cpus``)
        self.tool_processes = tool_processes
        self.max_tool_processes = max(1, max_tool_processes)
        self.recycle_after = recycle_after
        self.inline_async_tools = inline_async_tools
        self.handle_signals = handle_signals
        self.host = host
        self.admin_port = admin_port
        self._key = key
        self._transport = transport
        self._start_timeout = start_timeout
        self._close_timeout = close_timeout
        self._session: Session | None = None
        self._hosts: Hosts | None = None
        self._spans, self._metrics = SpanSink(tracer_provider), MetricSink(meter_provider)
        self._room = Room()  # what each host can still take: a start it has room for need not wait
        self._inbound = Inbound(
            lambda: self._closed, self._hosts_changed, self._spans.put, self._forgotten, self._metrics.put
        )
        self._inbound.on_moved = lambda turn_id, stream, why, owner, epoch: self._running().moved(
            turn_id, stream, why, owner, epoch
        )
        try:
            self.limits = checked_limits(max_running, max_queued)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        if store_wait <= 0:
            raise ConfigurationError(f"store_wait must be a number of seconds > 0, not {store_wait!r}")
        self._follower = Follower(
            self._need_store, lambda t, stream, at: self._running().found(t, stream, at), store_wait
        )
        self._console_config, self._console = console, NO_CONSOLE
        self._closed = False
        self._started = False
        self._lock = threading.RLock()
        self._main_names: set[str] = set()
        self._store: TurnStore | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Runtime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Runtime:
        """Start the actor system (blocks until its hosts are up and recovery is done)."""
        if self._start_once():
            owner.adopt(self, self.handle_signals)
        return self

    def _start_once(self) -> bool:
        """Start unless started; True if this call started it."""
        with self._lock:
            if self._started:
                return False
            if self._closed:
                raise RuntimeClosedError("this Runtime was closed; create a new one")
            self._started = True
            try:
                self._start()
            except BaseException:
                self.close()
                raise
            return True

    def _start(self) -> None:
        main = sys.modules.get("__main__")
        self._main_names = set(vars(main)) if main is not None else set()  # importable by the tree
        if self.admin_port is None:
            self.admin_port = free_port(self.host)
        configure = Configure(
            self.store_path,
            hosts=self.hosts,
            tool_processes=self.tool_processes,
            max_tool_processes=self.max_tool_processes,
            command_hold=self.command_hold,
            recycle_after=self.recycle_after,
            inline_async_tools=self.inline_async_tools,
            node=f"{self.host}:{self.admin_port}",
            capabilities=self.capabilities,
            max_running=self.limits.max_running,
            max_queued=self.limits.max_queued,
        )
        self._session, configured = Session.open(
            configure,
            self._inbound,
            host=self.host,
            admin_port=self.admin_port,
            capabilities=self.capabilities,
            key=self._key,
            transport_config=self._transport,
            event_window=self.event_window,
            start_timeout=self._start_timeout,
            forking=self._metrics.forking,  # the tree records metrics when a MeterProvider is configured
            follow=self._follower.follow,
        )
        self._hosts = self._session.hosts
        self._inbound.table_ready()
        self.recovered, self.unrecoverable = configured.recovered, configured.errors
        self._session.endpoint.send(self._session.directory, WatchMembership())
        self._console = start_console(self, self._console_config)  # NO_CONSOLE without one

    def _hosts_changed(self, msg: HostReplaced | NodesChanged) -> None:
        if self._hosts is None:
            return
        if isinstance(msg, HostReplaced):
            self._hosts.replaced(msg)
        else:
            self._hosts.nodes_changed(msg)

    def close(self) -> None:
        """End the runtime: bounded, whatever it is doing; see the module docstring."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        deadline = time.monotonic() + self._close_timeout
        self._follower.close()
        self._console.close(timeout=1.0)
        session = self._session
        if session is not None:
            session.close(deadline, keep_turns=self.store_path is not None, store_path=self.store_path)
        self._inbound.close()
        self._spans.close(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
        if self._store is not None:
            self._store.close()
        if session is not None:
            session.end_tree(deadline)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def admin_sid(self) -> int | None:
        """The session of the runtime's actor system (every process of the tree is in it,
        or below one that is)."""
        return self._session.tree.sid if self._session is not None else None

    # -- commands -------------------------------------------------------------------------

    def _running(self) -> Hosts:
        if not self._started:
            self.start()
        if self._closed or self._hosts is None:
            raise RuntimeClosedError("the Runtime is not running")
        return self._hosts

    def _command(self, command: Any) -> concurrent.futures.Future[ControlReply]:
        """Send a command to its turn's host (``Hosts.command``), checked before anything starts."""
        addressed(command)
        return self._running().command(command)

    def control(self, command: Any, timeout: float = 10.0) -> ControlReply:
        """Send a command (any ``TurnCommand``: ``StopTurn``, ``SendInput``, ``PauseTurn``, ...;
        ``ToolApprovalResponse`` with a ``turn_id``) to its turn and return the turn's reply.
        A refusal is returned as a reply with ``ok=False``, not raised. A host that does not
        know the turn answers ``unknown_turn`` within ``timeout`` (the command says so:
        ``answer_within``), having held it that long in case it overtook its turn's start."""
        future = self._command(waiting(command, timeout))
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()  # and the Runtime forgets it
            raise TurnTimeout(f"no answer to {command.kind} after {timeout:g} s") from None

    # -- turns ----------------------------------------------------------------------------

    def run(
        self,
        messages: History,
        *,
        tools: Iterable[ToolLike] = (),
        provider: ProviderConfig | None = None,
        options: TurnOptions | None = None,
        turn_id: str | None = None,
        system: str | None = None,
        timeout: float = 10.0,
        requires: dict[str, Any] | None = None,
        priority: int = 0,
        tenant: str = "",
        wait: bool = False,
        forked_from: ForkOrigin | None = None,
    ) -> TurnHandle:
        """Start a turn; its handle once its host started or queued it (at once if the host is
        known to have room: ``starting.Room``). ``messages``: a string (one user message), chat
        messages, or a provider's wire history (``TurnResult.messages_as``). An explicit
        ``turn_id`` already in use raises ``ControlRejected`` (waiting for the first event,
        ``timeout`` at most). ``requires`` places the turn on a node with those capabilities
        (``ConfigurationError`` if none has them). Admission, per host (``Runtime(max_running=,
        max_queued=)``): a full host queues the turn (``status == "queued"``; highest ``priority``
        first, ``tenant``s in turn); a full queue raises ``Overloaded``, or ``wait=True`` waits.
        ``forked_from``: ``fork``'s."""
        self._running()
        stream, admitted = self._start_turn(
            messages, tools, provider, options, turn_id, system, requires, priority, tenant, wait, forked_from
        )
        if admit_later(self._inbound, self._room, stream, admitted, wait or turn_id is not None):
            return TurnHandle(self._command, stream)
        reply = admission(self._inbound, self._room, stream, admitted, None if wait else timeout)
        if reply is None:  # its host could not be reached: the handle says so
            return TurnHandle(self._command, stream)
        admitted_as(self._inbound, stream, reply)
        if turn_id is not None and stream.admitted == "running":
            stream.wait_index(0, timeout)  # raises ControlRejected if the id is taken
        return TurnHandle(self._command, stream)

    def _start_turn(
        self,
        messages: History,
        tools: Iterable[ToolLike],
        provider: ProviderConfig | None,
        options: TurnOptions | None,
        turn_id: str | None,
        system: str | None,
        requires: dict[str, Any] | None = None,
        priority: int = 0,
        tenant: str = "",
        wait: bool = False,
        forked_from: ForkOrigin | None = None,
    ) -> tuple[TurnStream, concurrent.futures.Future[ControlReply]]:
        """Send ``StartTurn``, checked, without blocking: its stream, and its admission's future."""
        hosts = self._running()
        checked_admission(priority, tenant, wait)
        requires = checked_requires(requires)
        tid = turn_id or new_turn_id()
        start = StartTurn(
            turn_id=tid,
            request_id=f"start:{tid}",
            priority=priority,
            tenant=tenant,
            wait=wait,
            messages=history(messages, system),
            tools=checked_tools(tools, self._main_names, elsewhere(f"{self.host}:{self.admin_port}", hosts, requires)),
            provider=(chosen := checked_provider(provider or self.provider)),
            options=checked_options(options or TurnOptions(), chosen),
            trace_context=self._spans.trace_context(),  # None unless a TracerProvider is configured
            requires=requires,
            forked_from=forked_from,
        )
        admitted = self._inbound.expect_start(tid)  # after every check, which would leave it there
        try:
            return hosts.start(start), admitted
        except BaseException:
            self._inbound.forget(f"start:{tid}")
            raise

    @property
    def directory(self) -> Any:
        """The DirectoryActor's address, for actors that start and steer turns themselves."""
        return self._session.directory if self._session is not None else None

    @property
    def actor_system(self) -> ActorSystem:
        if self._session is None or self._closed:
            raise RuntimeClosedError("the Runtime is not running")
        return cast(ActorSystem, self._session.system)  # an ActorSystem whose calls take turns
