"""The embedded runtime: a private Thespian system, turns as handles, nothing left behind.

``Runtime`` starts a ``multiprocTCPBase`` actor system on its own admin port, listening on
``127.0.0.1`` only and authenticating every frame with a fresh key, and a ``DirectoryActor``
in it. ``run()`` starts a turn and returns a ``TurnHandle``. On exit everything is shut
down and every process of the actor system is gone.

The Runtime is safe to use from several threads: commands go through one lock-guarded
Thespian endpoint, and one pump thread owns the endpoint that receives events and replies
and hands them to the handles.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from thespian.actors import ActorSystem

from messages import (
    CancelTurn,
    ChatMessage,
    ControlReply,
    Error,
    Finish,
    ListNodes,
    MembershipChanged,
    NodeInfo,
    NodeList,
    ProviderConfig,
    RespondToApprovals,
    StartTurn,
    StopTool,
    StopTurn,
    Subscribe,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolSpec,
    TurnEvent,
    TurnOptions,
    Usage,
    WatchMembership,
    new_turn_id,
)

from . import transport
from .directory_actor import DIRECTORY_NAME, LEADER_CAPABILITY, Configure, Configured, DirectoryActor, Quiesce
from .errors import ConfigurationError, ControlRejected, RuntimeClosedError, TurnTimeout
from .node import tune_convention
from .plumbing import Hello, Relay, TurnAttached, Welcome
from .providers.streaming import ssl_context
from .store import SQLiteStore, TurnSummary
from .tools import Tool, tool_specs
from .trace import trace

__all__ = [
    "Runtime",
    "TurnHandle",
    "TurnResult",
    "free_port",
    "group_processes",
    "history",
    "lock_store",
    "runtime_file",
    "session_processes",
    "store_in_use",
]


def log() -> logging.Logger:
    """This module's logger, looked up at call time: Thespian replaces the logging manager
    in every actor process, so a logger created before the fork would log nowhere."""
    return logging.getLogger("greenroom.runtime")


ToolLike = Tool | Callable[..., Any] | ToolSpec


def lock_store(store_path: str) -> int:
    """Take the store's exclusive lock, or raise ``ConfigurationError`` naming its holder.

    The lock is taken before the actor system starts, so every actor process inherits it:
    the kernel releases it only when the facade and all actors are gone, however they end.
    """
    path = os.path.abspath(store_path) + ".lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigurationError(
            f"the store {store_path} is used by another running runtime; use the command line or attach to it"
        ) from None
    return fd


def store_in_use(store_path: str) -> bool:
    """True if a runtime holds the store's lock."""
    path = os.path.abspath(store_path) + ".lock"
    if not os.path.exists(path):
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def runtime_file(store_path: str) -> str:
    """Where a runtime using ``store_path`` says how to reach it."""
    return os.path.abspath(store_path) + ".runtime.json"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _live_processes(field: int, value: int) -> list[int]:
    """Live (non-zombie) processes whose /proc stat ``field`` (after the name) is ``value``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[field]) == value:
            found.append(int(entry))
    return found


def session_processes(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``."""
    return _live_processes(3, sid)


def group_processes(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    return _live_processes(2, pgid)


def history(messages: Sequence[ChatMessage] | str, system: str | None = None) -> list[ChatMessage]:
    """A turn's opening history: a string is one user message; ``system`` goes first."""
    out = [ChatMessage.user(messages)] if isinstance(messages, str) else list(messages)
    if system is not None:
        out.insert(0, ChatMessage.system(system))
    return out


@dataclass(frozen=True)
class TurnResult:
    """A turn as of one ``Finish``: its history, why it finished, and what waits."""

    turn_id: str
    finish_reason: str
    messages: list[ChatMessage]
    usage: Usage
    round: int
    pending_approvals: list[ToolApprovalRequest] = field(default_factory=list)
    error: Error | None = None

    @property
    def text(self) -> str:
        """The last assistant message's text."""
        for m in reversed(self.messages):
            if m.role == "assistant":
                return m.content or ""
        return ""


class _Waiter:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: ControlReply | None = None


class TurnHandle:
    """A started turn seen from the caller: its events, its result, its controls.

    Events arrive in ``seq`` order. ``events()`` keeps a cursor and yields up to and
    including the next ``Finish`` it has not yielded. ``result()`` returns the turn as of
    its latest ``Finish``, waiting for one if there is none yet, or if this handle has
    resumed the turn since (the last approval of a round, a stop or cancel of a waiting
    turn). So after ``Finish(awaiting_approval)`` you approve and call either again.
    """

    def __init__(self, runtime: Runtime, turn_id: str, since: int = 0) -> None:
        self.turn_id = turn_id
        self._rt = runtime
        self._base = since  # the seq of self._events[0]
        self._cond = threading.Condition()
        self._events: list[TurnEvent] = []
        self._arrived: dict[int, float] = {}  # seq -> time.monotonic() the pump received it
        self._early: dict[int, TurnEvent] = {}
        self._cursor = 0
        self._floor = 0  # result() waits for a Finish with this seq or later
        self._async_wakers: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.rejections: list[ControlReply] = []
        self._address: Any = None  # the TurnActor, once it announced itself

    # -- delivery (pump thread) ----------------------------------------------------------

    def _deliver(self, event: TurnEvent) -> None:
        arrived = time.monotonic()
        with self._cond:
            if event.seq < self._base + len(self._events) or event.seq in self._early:
                return
            self._early[event.seq] = event
            self._arrived[event.seq] = arrived
            while self._base + len(self._events) in self._early:
                self._events.append(self._early.pop(self._base + len(self._events)))
            self._cond.notify_all()
            wakers, self._async_wakers = self._async_wakers, []
        for loop, fut in wakers:
            loop.call_soon_threadsafe(_set_done, fut)

    def _deliver_reply(self, reply: ControlReply) -> None:
        if not reply.ok:
            with self._cond:
                self.rejections.append(reply)
                self._cond.notify_all()

    # -- reading --------------------------------------------------------------------------

    @property
    def all_events(self) -> list[TurnEvent]:
        """Every event received so far, in order (a copy)."""
        with self._cond:
            return list(self._events)

    def received_at(self, seq: int) -> float | None:
        """When (``time.monotonic()``) this process received event ``seq``, for latency figures."""
        return self._arrived.get(seq)

    @property
    def finished(self) -> bool:
        """True once a terminal ``Finish`` has arrived."""
        with self._cond:
            return any(isinstance(e, Finish) and e.terminal for e in self._events)

    def _wait_for_index(self, index: int, timeout: float | None) -> TurnEvent:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while len(self._events) <= index:
                if self._rt._closed:
                    raise RuntimeClosedError("the Runtime has shut down")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TurnTimeout(f"turn {self.turn_id}: no event after {timeout} s")
                self._cond.wait(remaining if remaining is not None else 1.0)
            return self._events[index]

    def events(self, timeout: float | None = None) -> Iterator[TurnEvent]:
        """Yield events up to and including the next ``Finish``; ``timeout`` bounds each wait."""
        while True:
            event = self._wait_for_index(self._cursor, timeout)
            self._cursor += 1
            yield event
            if isinstance(event, Finish):
                return

    __iter__ = events

    async def aevents(self, timeout: float | None = None) -> AsyncIterator[TurnEvent]:
        """``events()`` for asyncio: the same cursor, awaited instead of blocking."""
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                ready = len(self._events) > self._cursor
                if not ready:
                    fut: asyncio.Future[None] = loop.create_future()
                    self._async_wakers.append((loop, fut))
            if not ready:
                try:
                    await asyncio.wait_for(fut, timeout)
                except asyncio.TimeoutError:
                    raise TurnTimeout(f"turn {self.turn_id}: no event after {timeout} s") from None
                continue
            event = self._events[self._cursor]
            self._cursor += 1
            yield event
            if isinstance(event, Finish):
                return

    def __aiter__(self) -> AsyncIterator[TurnEvent]:
        return self.aevents()

    def wait_for(self, predicate: Callable[[TurnEvent], bool], timeout: float = 30.0) -> TurnEvent:
        """The first event (from the start) that satisfies ``predicate``; waits for it."""
        index = 0
        deadline = time.monotonic() + timeout
        while True:
            event = self._wait_for_index(index, max(0.0, deadline - time.monotonic()))
            if predicate(event):
                return event
            index += 1

    def result(self, timeout: float | None = None, *, final: bool = False) -> TurnResult:
        """The turn as of its latest ``Finish`` (see the class docstring for when it waits).

        With ``final=True`` it waits for the turn's terminal ``Finish``, whoever resumes it.
        """
        index = max(0, self._floor - self._base)
        while True:
            self._wait_for_index(index, timeout)
            with self._cond:
                finishes = [
                    i
                    for i in range(index, len(self._events))
                    if isinstance(self._events[i], Finish) and (self._events[i].terminal or not final)  # type: ignore[union-attr]
                ]
                if finishes:
                    return self._result_at(finishes[-1] + 1)
                index = len(self._events)

    def _result_at(self, end: int) -> TurnResult:
        events = self._events[:end]
        finish = events[-1]
        assert isinstance(finish, Finish)
        requests = {e.call_id: e for e in events if isinstance(e, ToolApprovalRequest)}
        errors = [e for e in events if isinstance(e, Error)]
        return TurnResult(
            turn_id=self.turn_id,
            finish_reason=finish.finish_reason,
            messages=list(finish.messages),
            usage=finish.usage,
            round=finish.round,
            pending_approvals=[requests[c] for c in finish.pending_approvals if c in requests],
            error=errors[-1] if errors and finish.terminal else None,
        )

    # -- steering -------------------------------------------------------------------------

    def _command(self, command: Any, timeout: float) -> ControlReply:
        reply = self._rt.control(command, timeout, to=self._address)
        if not reply.ok:
            raise ControlRejected(reply.code or "invalid", reply.message)
        if reply.resumes_at is not None:
            with self._cond:
                self._floor = max(self._floor, reply.resumes_at)
        return reply

    def stop(self, reason: str = "stop requested", timeout: float = 10.0) -> None:
        """Stop now (idempotent; no effect once the turn has ended)."""
        if self.finished:
            return
        self._command(StopTurn(turn_id=self.turn_id, reason=reason), timeout)

    def cancel(self, reason: str = "cancel requested", grace: float | None = None, timeout: float = 10.0) -> None:
        """Cancel at the next safe boundary; a stop after ``grace`` seconds if given."""
        if self.finished:
            return
        self._command(CancelTurn(turn_id=self.turn_id, reason=reason, grace=grace), timeout)

    def approve(self, call_id: str, reason: str | None = None, timeout: float = 10.0) -> None:
        """Approve one pending call; ``ControlRejected`` says why if the turn refused."""
        self.respond([ToolApprovalResponse(call_id=call_id, approved=True, reason=reason)], timeout=timeout)

    def deny(self, call_id: str, reason: str | None = None, timeout: float = 10.0) -> None:
        """Deny one pending call; its tool message will be ``Rejected: {reason}``."""
        self.respond([ToolApprovalResponse(call_id=call_id, approved=False, reason=reason)], timeout=timeout)

    def respond(
        self,
        responses: Sequence[ToolApprovalResponse],
        *,
        deny_rest: bool = False,
        deny_reason: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        """Several decisions in one message; ``deny_rest`` denies every call still undecided."""
        self._command(
            RespondToApprovals(
                turn_id=self.turn_id, responses=list(responses), deny_rest=deny_rest, deny_reason=deny_reason
            ),
            timeout,
        )

    def stop_tool(self, call_id: str, reason: str = "tool stop requested", timeout: float = 10.0) -> None:
        """Stop one call; it ends interrupted and the turn goes on."""
        self._command(StopTool(turn_id=self.turn_id, call_id=call_id, reason=reason), timeout)


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Runtime:
    """An embedded greenroom: its own actor system, its turns, and a clean shutdown.

    ``provider`` is the default for ``run()``; ``admin_port`` defaults to a free port;
    ``host`` is the only interface anything listens on. With ``store`` (a SQLite file
    path) every turn is durable: unfinished turns of the store are recovered at start, and
    the command line can find this runtime through ``<store>.runtime.json``.
    ``llm_actors`` LLMActors (default: two per CPU) stream for all turns, and
    ``spare_turns`` TurnActors and ``spare_tools`` ToolActors are kept forked ahead of need
    by the directory, so that no turn waits for a fork.
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
        llm_actors: int | None = None,
        spare_turns: int = 2,
        spare_tools: int = 2,
        start_timeout: float = 30.0,
    ) -> None:
        self.provider = provider
        self.store_path = os.fspath(store) if store is not None else None
        self.store = SQLiteStore(self.store_path) if self.store_path is not None else None
        self.recovered: list[str] = []
        self.unrecoverable: dict[str, str] = {}
        self.capabilities = dict(capabilities or {})
        self.llm_actors = llm_actors if llm_actors is not None else 2 * max(1, os.cpu_count() or 1)
        self.spare_turns = spare_turns
        self.spare_tools = spare_tools
        self.membership: list[MembershipChanged] = []
        self._members: dict[str, dict[str, Any]] = {}
        self._members_cond = threading.Condition()
        self.host = host
        self.admin_port = admin_port
        self._key = key
        self._start_timeout = start_timeout
        self._asys: ActorSystem | None = None
        self._exits = contextlib.ExitStack()
        self._ctl: Any = None
        self._ctl_lock = threading.Lock()
        self._pump_ctx: Any = None
        self._pump: threading.Thread | None = None
        self._me: Any = None
        self._directory: Any = None
        self._handles: dict[str, TurnHandle] = {}
        self._waiters: dict[str, _Waiter] = {}
        self._closed = False
        self._started = False
        self._lock_fd: int | None = None
        self.admin_sid: int | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Runtime:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Runtime:
        if self._started:
            return self
        self._started = True
        transport.install(self.host, self._key)
        tune_convention()
        ssl_context()  # built once here, inherited by every forked LLMActor
        if self.store_path is not None:
            self._lock_fd = lock_store(self.store_path)
        if self.admin_port is None:
            self.admin_port = free_port(self.host)
        try:
            self._asys = ActorSystem(
                "multiprocTCPBase",
                {"Admin Port": self.admin_port, LEADER_CAPABILITY: True, **self.capabilities},
                logDefs=_log_defs(),
                transientUnique=True,
            )
            self._directory = self._asys.createActor(DirectoryActor, globalName=DIRECTORY_NAME)
            self._ctl = self._exits.enter_context(self._asys.private())
            self._pump_ctx = self._exits.enter_context(self._asys.private())
            welcome = self._pump_ctx.ask(self._directory, Hello(), self._start_timeout)
            if not isinstance(welcome, Welcome):
                raise RuntimeError(f"the directory did not answer (got {welcome!r})")
            self._me = welcome.address
            self.admin_sid = welcome.sid
            store = os.path.abspath(self.store_path) if self.store_path is not None else None
            configure = Configure(
                store, llm_actors=self.llm_actors, spare_turns=self.spare_turns, spare_tools=self.spare_tools
            )
            done = self._pump_ctx.ask(self._directory, configure, self._start_timeout)
            if not isinstance(done, Configured):
                raise RuntimeError(f"the directory did not configure itself (got {done!r})")
            self.recovered, self.unrecoverable = done.recovered, done.errors
            if self.store_path is not None:
                self._write_runtime_file()
        except BaseException:
            self.close()
            raise
        self._pump = threading.Thread(target=self._pump_loop, name="greenroom-pump", daemon=True)
        self._pump.start()
        self._send_to_directory(WatchMembership())
        return self

    def close(self) -> None:
        """Shut the actor system down and make sure none of its processes remains."""
        if self._closed:
            return
        self._closed = True
        if self.store_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(runtime_file(self.store_path))
        if self._ctl is not None and self._directory is not None:
            with contextlib.suppress(Exception), self._ctl_lock:
                self._ctl.ask(self._directory, Quiesce(), 5)  # no fork may be under way at shutdown
        if self._pump is not None and self._me is not None:
            with contextlib.suppress(Exception), self._ctl_lock:
                self._ctl.tell(self._me, _Wake())
            self._pump.join(5)
        with contextlib.suppress(Exception):
            self._exits.close()
        if self._asys is not None:
            with contextlib.suppress(Exception):
                self._asys.shutdown()
        for handle in list(self._handles.values()):
            with handle._cond:
                handle._cond.notify_all()
        self._reap()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # every actor process that inherited it is gone now

    def _reap(self) -> None:
        """End whatever of the actor system outlived ``shutdown()``, by PID, and reap ours."""
        sid = self.admin_sid
        if sid is None:
            return
        deadline = time.monotonic() + 5.0
        while session_processes(sid) and time.monotonic() < deadline:
            time.sleep(0.02)  # shutdown is asynchronous; poll the process table briefly
        leftovers = session_processes(sid)
        if leftovers:
            log().warning("shutdown left %d process(es) of the actor system; killing them", len(leftovers))
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while session_processes(sid) and time.monotonic() < deadline:
            time.sleep(0.01)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(sid, os.WNOHANG)  # the admin's first fork is our child

    # -- the pump -------------------------------------------------------------------------

    def _pump_loop(self) -> None:
        while not self._closed:
            try:
                msg = self._pump_ctx.listen(1.0)
            except Exception:
                if self._closed:
                    return
                log().exception("the event pump failed to receive")
                continue
            if msg is None or isinstance(msg, _Wake):
                continue
            if isinstance(msg, TurnEvent):
                trace("pump", msg.turn_id, msg.kind, msg.seq)
                handle = self._handles.get(msg.turn_id)
                if handle is not None:
                    handle._deliver(msg)
            elif isinstance(msg, TurnAttached):
                handle = self._handles.get(msg.turn_id)
                if handle is not None:
                    handle._address = msg.address
            elif isinstance(msg, MembershipChanged):
                with self._members_cond:
                    self.membership.append(msg)
                    if msg.joined:
                        self._members[msg.node] = msg.capabilities
                    else:
                        self._members.pop(msg.node, None)
                    self._members_cond.notify_all()
            elif isinstance(msg, NodeList):
                waiter = self._waiters.pop(msg.request_id or "", None)
                if waiter is not None:
                    waiter.reply = msg  # type: ignore[assignment]
                    waiter.event.set()
            elif isinstance(msg, ControlReply):
                waiter = self._waiters.pop(msg.request_id, None) if msg.request_id else None
                if waiter is not None:
                    waiter.reply = msg
                    waiter.event.set()
                    continue
                handle = self._handles.get(msg.turn_id)
                if handle is not None:
                    handle._deliver_reply(msg)

    def control(self, command: Any, timeout: float = 10.0, *, to: Any = None) -> ControlReply:
        """Send a command (``StopTurn``, ``CancelTurn``, ``RespondToApprovals``, ``StopTool``,
        ``ToolApprovalResponse``) to its turn by ``turn_id`` and return the turn's reply.
        A refusal is returned as a reply with ``ok=False``, not raised."""
        if command.request_id is None:
            command = command.model_copy(update={"request_id": uuid.uuid4().hex})
        waiter = _Waiter()
        self._waiters[command.request_id] = waiter
        self._send(to or self._directory, command)  # straight to the TurnActor when known
        if not waiter.event.wait(timeout):
            self._waiters.pop(command.request_id, None)
            raise TurnTimeout(f"no answer to {command.kind} after {timeout} s")
        assert waiter.reply is not None
        return waiter.reply

    def _send_to_directory(self, msg: Any) -> None:
        self._send(self._directory, msg)

    def _send(self, to: Any, msg: Any) -> None:
        if self._closed or self._ctl is None:
            raise RuntimeClosedError("the Runtime is not running")
        with self._ctl_lock:
            self._ctl.tell(to, Relay(msg, self._me, announce=isinstance(msg, StartTurn)))

    # -- turns ----------------------------------------------------------------------------

    def run(
        self,
        messages: Sequence[ChatMessage] | str,
        *,
        tools: Iterable[ToolLike] = (),
        provider: ProviderConfig | None = None,
        options: TurnOptions | None = None,
        turn_id: str | None = None,
        system: str | None = None,
    ) -> TurnHandle:
        """Start a turn and return its handle. A string is taken as one user message."""
        if not self._started:
            self.start()
        provider = provider or self.provider
        if provider is None:
            raise ConfigurationError("no provider: pass provider= to Runtime() or to run()")
        start = StartTurn(
            turn_id=turn_id or new_turn_id(),
            messages=history(messages, system),
            tools=tool_specs(tools),
            provider=provider,
            options=options or TurnOptions(),
        )
        handle = TurnHandle(self, start.turn_id)
        self._handles[start.turn_id] = handle
        self._send_to_directory(start)
        return handle

    def attach(self, turn_id: str, since: int = 0) -> TurnHandle:
        """A handle on a turn started elsewhere, receiving its events from ``since`` on."""
        handle = self._handles.get(turn_id)
        if handle is None:
            handle = TurnHandle(self, turn_id, since)
            self._handles[turn_id] = handle
        self._send_to_directory(Subscribe(turn_id=turn_id, since=since))
        return handle

    # -- nodes ----------------------------------------------------------------------------

    def nodes(self, timeout: float = 10.0) -> list[NodeInfo]:
        """The nodes that joined this runtime's convention, as its directory sees them."""
        request = ListNodes(request_id=uuid.uuid4().hex)
        waiter = _Waiter()
        self._waiters[request.request_id] = waiter  # type: ignore[index]
        self._send_to_directory(request)
        if not waiter.event.wait(timeout):
            raise TurnTimeout(f"the directory did not list its nodes within {timeout} s")
        return list(waiter.reply.nodes)  # type: ignore[union-attr]

    def wait_for_node(self, capabilities: dict[str, Any], timeout: float = 30.0) -> str:
        """Wait until a node advertising ``capabilities`` has joined; return its name."""

        def found() -> str | None:
            for node, caps in self._members.items():
                if all(caps.get(k) == v for k, v in capabilities.items()):
                    return node
            return None

        with self._members_cond:
            if not self._members_cond.wait_for(lambda: found() is not None, timeout):
                raise TurnTimeout(f"no node with {capabilities} joined within {timeout} s")
            return found()  # type: ignore[return-value]

    # -- the store ------------------------------------------------------------------------

    def _write_runtime_file(self) -> None:
        """Tell the command line where this runtime listens, readable by this user only."""
        assert self.store_path is not None and self.admin_port is not None
        info = {
            "pid": os.getpid(),
            "host": self.host,
            "admin_port": self.admin_port,
            "key": transport.current_key().hex(),
        }
        path = runtime_file(self.store_path)
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        os.replace(path + ".tmp", path)

    def turns(self) -> list[TurnSummary]:
        """Every turn of the store, newest first (needs ``store=``)."""
        return self._need_store().summaries()

    def updates(self, turn_id: str, since: int = 0) -> list[TurnEvent]:
        """The stored events of a turn from ``seq`` ``since`` on (needs ``store=``)."""
        return self._need_store().events(turn_id, since)

    def _need_store(self) -> SQLiteStore:
        if self.store is None:
            raise ConfigurationError("this Runtime has no store: pass store= to Runtime()")
        return self.store

    @property
    def directory(self) -> Any:
        """The DirectoryActor's address, for actors that start and steer turns themselves."""
        return self._directory

    @property
    def actor_system(self) -> ActorSystem:
        if self._asys is None:
            raise RuntimeClosedError("the Runtime is not running")
        return self._asys


class _Wake:
    """Wakes the pump so it notices the Runtime closing."""


def _log_defs() -> dict[str, Any]:
    """Actors log warnings and errors to stderr, or everything from ``$GREENROOM_LOG_LEVEL``
    on to ``$GREENROOM_LOG_FILE`` when it is set."""
    level = os.environ.get("GREENROOM_LOG_LEVEL", "WARNING").upper()
    handler: dict[str, Any] = {"class": "logging.StreamHandler", "formatter": "plain", "level": level}
    if os.environ.get("GREENROOM_LOG_FILE"):
        handler = {
            "class": "logging.FileHandler",
            "filename": os.environ["GREENROOM_LOG_FILE"],
            "formatter": "plain",
            "level": level,
        }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"}},
        "handlers": {"out": handler},
        "root": {"handlers": ["out"], "level": level},
    }
