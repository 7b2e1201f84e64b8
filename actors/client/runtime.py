"""The embedded runtime: a private actor system, turns as handles, nothing left behind.

``Runtime`` starts a ``multiprocTCPBase`` actor system on its own admin port, listening on
``host`` only (``127.0.0.1`` by default) and authenticating every frame with a fresh key;
in it a directory, one ``TurnHost`` per core and a ``ToolPool`` (``tree``). ``run()`` sends
``StartTurn`` straight to the host of the turn's slot (``hosts``) and returns a ``TurnHandle``.

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
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from thespian.actors import ActorSystem

from messages import ControlReply, ListNodes, MembershipChanged, NodeInfo, ProviderConfig, StartTurn, Subscribe
from messages import ToolSpec, TurnEvent, TurnOptions, WatchMembership, new_turn_id

from ..cluster.directory import DirectoryActor
from ..cluster.names import DIRECTORY_NAME, LEADER_CAPABILITY
from ..console import NO_CONSOLE, start_console
from ..errors import ConfigurationError, ControlRejected, RuntimeClosedError, TurnTimeout
from ..lifecycle import owner
from ..lifecycle.processes import free_port
from ..lifecycle.tree import ProcessTree
from ..store.files import remove_runtime_file, write_runtime_file
from ..store.sqlite import SQLiteStore, TurnSummary
from ..telemetry.export import SpanSink
from ..telemetry.metrics import MetricSink
from ..tools.definition import Tool
from ..wire import transport
from ..wire.protocol import Configure, Configured, Hello, HostReplaced, Shutdown, Welcome
from ..wire.transport import TransportConfig
from .endpoint import Endpoint
from .handle import TurnHandle
from .inputs import History, checked_provider, checked_tools, history
from .receiving import Inbound
from .routing import Hosts, addressed
from .stream import TurnResult, TurnStream

__all__ = ["History", "Runtime", "TurnHandle", "TurnResult", "history"]

ToolLike = Tool | Callable[..., Any] | ToolSpec


class Runtime:
    """An embedded greenroom: its own actor system, its turns, and a clean end.

    ``provider`` is the default for ``run()``; ``admin_port`` defaults to a free port;
    ``host`` is the only interface anything listens on. With ``store`` (a SQLite file
    path) every turn is durable: unfinished turns are recovered at start, and the command
    line finds this runtime through ``<store>.runtime.json``. ``hosts`` TurnHost processes
    (default: one per CPU) run the turns; ``tool_processes`` idle tool processes are kept
    forked ahead of need, each recycled after ``recycle_after`` calls;
    ``inline_async_tools`` runs every ``async def`` tool in its turn's host. ``transport``
    sets encryption and the limits of the wire (``transport.TransportConfig``); the first
    Runtime of a process decides them for the process. Turns are traced with OpenTelemetry
    when ``tracer_provider`` (default: the global one) is configured (``telemetry_export``); metrics
    likewise with ``meter_provider`` (``telemetry.metrics``). ``console`` serves the console (``console``).

    Starting a Runtime changes Thespian in this process and every process it forks: frames
    are signed and sockets bound to ``host`` (``transport``), a lost node is noticed in
    seconds (``thespian_compat.tune_convention``), and a few internals are used for
    ACK-clocked batches and the non-blocking endpoint. ``thespian_compat`` lists each of
    them and refuses, at start, a Thespian version they were not tested with.
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
        tool_processes: int = 2,
        recycle_after: int = 100,
        inline_async_tools: bool = False,
        handle_signals: bool = True,
        transport: TransportConfig | None = None,
        start_timeout: float = 30.0,
        close_timeout: float = 5.0,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        console: Any = None,
    ) -> None:
        self.provider = provider
        self.store_path = os.path.abspath(os.fspath(store)) if store is not None else None
        self.recovered: list[str] = []
        self.unrecoverable: dict[str, str] = {}
        self.capabilities = dict(capabilities or {})
        self.hosts = hosts if hosts is not None else max(1, os.cpu_count() or 1)
        self.tool_processes = tool_processes
        self.recycle_after = recycle_after
        self.inline_async_tools = inline_async_tools
        self.handle_signals = handle_signals
        self.host = host
        self.admin_port = admin_port
        self._key = key
        self._transport = transport
        self._start_timeout = start_timeout
        self._close_timeout = close_timeout
        self._tree = ProcessTree()
        self._endpoint: Endpoint | None = None
        self._directory: Any = None
        self._hosts: Hosts | None = None
        self._spans, self._metrics = SpanSink(tracer_provider), MetricSink(meter_provider)
        self._inbound = Inbound(lambda: self._closed, self._host_replaced, self._spans.put, self._metrics.put)
        self._console_config, self._console = console, NO_CONSOLE
        self._closed = False
        self._started = False
        self._lock = threading.RLock()
        self._main_names: set[str] = set()
        self._store: SQLiteStore | None = None

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
        capabilities = {"Admin Port": self.admin_port, LEADER_CAPABILITY: True, **self.capabilities}
        with self._metrics.forking():  # the tree records metrics when a MeterProvider is configured
            asys = self._tree.start(
                capabilities, host=self.host, key=self._key, transport_config=self._transport,
                store_path=self.store_path,
            )  # fmt: skip
        self._directory = asys.createActor(DirectoryActor, globalName=DIRECTORY_NAME)
        self._endpoint = Endpoint(asys, self._inbound.on_message, self._inbound.on_idle)
        self._endpoint.start()
        self._tree.sid = self._ask(self._directory, Hello(), Welcome).sid
        configure = Configure(
            self.store_path,
            hosts=self.hosts,
            tool_processes=self.tool_processes,
            recycle_after=self.recycle_after,
            inline_async_tools=self.inline_async_tools,
            node=f"{self.host}:{self.admin_port}",
            capabilities=self.capabilities,
        )
        configured = self._ask(self._directory, configure, Configured)
        self._hosts = Hosts(self._endpoint, self._inbound, configured.hosts)
        self.recovered, self.unrecoverable = configured.recovered, configured.errors
        self._endpoint.send(self._directory, WatchMembership())
        if self.store_path is not None:
            info = {"pid": os.getpid(), "host": self.host, "admin_port": self.admin_port}
            write_runtime_file(self.store_path, {**info, "key": transport.current_key().hex()})
        self._console = start_console(self, self._console_config)  # NO_CONSOLE without one

    def _ask(self, to: Any, message: Any, expect: type) -> Any:
        """Send ``message`` and wait (bounded) for the first reply of type ``expect``."""
        future = self._inbound.expect(expect.__name__)
        assert self._endpoint is not None
        undelivered = RuntimeError(f"{type(message).__name__} was not delivered")
        self._endpoint.send(to, message, lambda: future.set_exception(undelivered))
        try:
            return future.result(self._start_timeout)
        except concurrent.futures.TimeoutError:
            raise RuntimeError(
                f"the actor system did not answer {type(message).__name__} within {self._start_timeout} s"
            ) from None

    def _host_replaced(self, msg: HostReplaced) -> None:
        if self._hosts is not None:
            self._hosts.replaced(msg)

    def close(self) -> None:
        """End the runtime: bounded, whatever it is doing; see the module docstring."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        deadline = time.monotonic() + self._close_timeout
        self._console.close(timeout=1.0)
        if self._endpoint is not None and self._directory is not None and self._hosts is not None:
            shutdown = Shutdown(keep_turns=self.store_path is not None)
            self._endpoint.send(self._directory, shutdown)
            self._hosts.shut_down(shutdown, min(2.0, deadline - time.monotonic() - 1.0))
        if self.store_path is not None and self._tree.lock_fd is not None:  # ours: we hold the lock
            remove_runtime_file(self.store_path)
        self._inbound.close()  # readers and callers still waiting raise RuntimeClosedError
        if self._endpoint is not None:
            self._endpoint.stop(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
        self._spans.close(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
        if self._store is not None:
            self._store.close()
        self._tree.end(deadline)  # and the store's lock is free once the tree is gone

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def admin_sid(self) -> int | None:
        """The session of the runtime's actor system (every process of the tree is in it,
        or below one that is)."""
        return self._tree.sid

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
        """Send a command (``StopTurn``, ``CancelTurn``, ``RespondToApprovals``, ``StopTool``,
        ``ToolApprovalResponse`` with a ``turn_id``) to its turn and return the turn's reply.
        A refusal is returned as a reply with ``ok=False``, not raised."""
        try:
            return self._command(command).result(timeout)
        except concurrent.futures.TimeoutError:
            raise TurnTimeout(f"no answer to {command.kind} after {timeout} s") from None

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
    ) -> TurnHandle:
        """Start a turn and return its handle.

        ``messages`` is a string (one user message), chat messages, or a history in a
        provider's wire format (``TurnResult.messages_as``). With an explicit ``turn_id``
        already in use, ``ControlRejected`` is raised at once (this waits for the turn's
        first event, ``timeout`` at most)."""
        self._running()
        stream = self._start_turn(messages, tools, provider, options, turn_id, system)
        if turn_id is not None:
            stream.wait_index(0, timeout)  # raises ControlRejected if the id is taken
        return TurnHandle(self, stream)

    def _start_turn(
        self,
        messages: History,
        tools: Iterable[ToolLike],
        provider: ProviderConfig | None,
        options: TurnOptions | None,
        turn_id: str | None,
        system: str | None,
    ) -> TurnStream:
        """Check and send ``StartTurn`` without blocking; the turn's stream follows it."""
        hosts = self._running()
        start = StartTurn(
            turn_id=turn_id or new_turn_id(),
            messages=history(messages, system),
            tools=checked_tools(tools, self._main_names),
            provider=checked_provider(provider or self.provider),
            options=options or TurnOptions(),
            trace_context=self._spans.trace_context(),  # None unless a TracerProvider is configured
        )
        return hosts.start(start)

    def attach(self, turn_id: str, since: int = 0, timeout: float = 10.0) -> TurnHandle:
        """A handle on a turn started elsewhere (or recovered), with its events from ``since``
        on, then as they happen. An unknown turn raises ``ControlRejected("unknown_turn")``."""
        stream, subscribed = self._subscribe(turn_id, since)
        if subscribed is not None:
            try:
                reply = subscribed.result(timeout)
            except concurrent.futures.TimeoutError:
                raise TurnTimeout(f"the host of turn {turn_id} did not answer within {timeout} s") from None
            self._subscribed(turn_id, stream, reply)
        return TurnHandle(self, stream, since)

    def _subscribe(self, turn_id: str, since: int) -> tuple[TurnStream, concurrent.futures.Future[ControlReply] | None]:
        """The turn's stream; and the host's answer to our subscription, unless we have it."""
        self._running()
        mine = self._inbound.stream(turn_id)
        if mine is not None and since >= mine._base:  # started here: already subscribed
            return mine, None
        stream = self._inbound.open_stream(turn_id, since, fresh=False)
        return stream, self._command(Subscribe(turn_id=turn_id, since=since))

    def _subscribed(self, turn_id: str, stream: TurnStream, reply: ControlReply) -> None:
        if not reply.ok:
            self._inbound.drop(turn_id, stream)
            raise ControlRejected(reply.code or "invalid", reply.message)

    # -- nodes ----------------------------------------------------------------------------

    def nodes(self, timeout: float = 10.0) -> list[NodeInfo]:
        """The nodes that joined this runtime's convention, as its directory sees them."""
        self._running()
        request = ListNodes(request_id=uuid.uuid4().hex)
        future = self._inbound.expect(request.request_id or "")
        self._endpoint.send(self._directory, request)  # type: ignore[union-attr]
        try:
            return list(future.result(timeout).nodes)
        except concurrent.futures.TimeoutError:
            raise TurnTimeout(f"the directory did not list its nodes within {timeout} s") from None

    def wait_for_node(self, capabilities: dict[str, Any], timeout: float = 30.0) -> str:
        """Wait until a node advertising ``capabilities`` has joined; return its name."""
        node = self._inbound.wait_for_node(capabilities, timeout)
        if node is None:
            raise TurnTimeout(f"no node with {capabilities} joined within {timeout} s")
        return node

    @property
    def membership(self) -> list[MembershipChanged]:
        """Every join and leave seen so far, in order."""
        return list(self._inbound.membership)

    # -- the store ------------------------------------------------------------------------

    def turns(self) -> list[TurnSummary]:
        """Every turn of the store, newest first (needs ``store=``)."""
        return self._need_store().summaries()

    def updates(self, turn_id: str, since: int = 0) -> list[TurnEvent]:
        """The stored events of a turn from ``seq`` ``since`` on (needs ``store=``)."""
        return self._need_store().events(turn_id, since)

    def _need_store(self) -> SQLiteStore:
        if self.store_path is None:
            raise ConfigurationError("this Runtime has no store: pass store= to Runtime()")
        if self._store is None:
            self._store = SQLiteStore(self.store_path)  # opened after the forks, in this process only
        return self._store

    @property
    def directory(self) -> Any:
        """The DirectoryActor's address, for actors that start and steer turns themselves."""
        return self._directory

    @property
    def actor_system(self) -> ActorSystem:
        if self._tree.asys is None or self._closed:
            raise RuntimeClosedError("the Runtime is not running")
        return self._tree.asys
