"""MCP client sessions in a TurnHost: one per server, shared by its calls, on the host's loop.

An MCP server's tools run inline (``ToolSpec.inline``): each call is a task on the host's
event loop thread (``tool_runner``), and so is the session it goes through.

- ``connection(server)`` is this process's session with ``server``, started on first use
  (for a stdio server, its process is started then) and shared by every call of every turn
  of the host after that;
- a session is owned by one task (``Connection._run``), which enters the ``mcp`` client (the
  transport's and the session's task groups) and leaves it when it is closed, when the
  server's stream ends (a stdio server exited), when the server no longer knows it (HTTP
  404: ``expire``), or when the transport fails; calls in flight then fail
  (``mcp_client.call``), and the next call starts a new session;
- ``close_all(on_done)`` (thread-safe) closes every session of this process gracefully (a
  stdio server's stdin is closed, an HTTP session deleted); ``on_done`` runs, on the loop
  thread, once none is left. The host calls it on ``Shutdown``. A server process still
  alive when the host ends is ended with it: by the lifeline, like any descendant, or, when
  the host alone was SIGKILLed, by the kernel (``processes.dies_with_parent``);
- what a stdio server writes to its stderr (a traceback, its own logging) never reaches the
  application's stderr: each line becomes an INFO line of the ``greenroom.mcp`` logger
  (``log_stderr``), shown at ``GREENROOM_LOG_LEVEL=INFO`` and kept by ``GREENROOM_LOG_FILE``.
  The thread that reads it hands each line to ``route_stderr``'s sink, which logs it at
  once by default; a TurnHost routes it through its own thread, the only one of an actor
  process that may call Thespian (which carries its log records).

Nothing here imports ``mcp``: ``client`` does, and runs each session's task (``client.serve``).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ToolError
from ..logs import logger

__all__ = [
    "Connection",
    "ServerParams",
    "close_all",
    "connection",
    "log_stderr",
    "open_count",
    "route_stderr",
    "stderr_line",
]


log = logger("greenroom.mcp")


class ServerParams(BaseModel):
    """Where an MCP server is and how to reach it: plain data, in each tool's ``ToolSpec.config``.

    Never a secret: ``env_from`` (variables copied into a stdio server's environment) and
    ``headers_env`` (HTTP header -> variable) name variables of the process that connects,
    read when it connects."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    command: list[str] = Field(default_factory=list)
    url: str | None = None
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    env_from: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)
    headers_env: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(default=30.0, gt=0)

    @property
    def key(self) -> str:
        return json.dumps(self.model_dump(), sort_keys=True)

    @property
    def where(self) -> str:
        return f"MCP server {self.label!r}"

    def secrets(self) -> tuple[dict[str, str], dict[str, str]]:
        """The environment and the headers read from this process's variables, now."""
        names = [*self.env_from, *self.headers_env.values()]
        missing = sorted({n for n in names if not os.environ.get(n)})
        if missing:
            listed = ", ".join(f"${n}" for n in missing)
            raise ToolError(f"{self.where} cannot be reached: {listed} is not set in this process")
        env = {n: os.environ[n] for n in self.env_from}
        return env, {h: os.environ[n] for h, n in self.headers_env.items()}

    def lost(self, detail: str) -> str:
        """The tool message of a call in flight when the server went away."""
        if self.url is not None:
            return f"{self.where} dropped the connection during the call ({detail}); the next call connects again"
        return f"{self.where} exited during the call ({detail}); the next call starts it again"


class Connection:
    """One MCP client session, owned by one task on the host's loop and shared by calls."""

    def __init__(
        self,
        server: ServerParams,
        loop: asyncio.AbstractEventLoop,
        serve: Callable[[Connection], Coroutine[Any, Any, None]],
    ) -> None:
        self.server = server
        self.loop = loop
        self.ready: asyncio.Future[Any] = loop.create_future()  # the mcp Client, or ToolError
        self.open = True  # takes new calls
        self.expired = False  # the server no longer knows this session (HTTP 404)
        self._closing = asyncio.Event()
        self.task = loop.create_task(serve(self), name=f"greenroom mcp {server.label}")

    def started(self, client: Any) -> None:
        """The session is open: calls waiting for it go on."""
        if not self.ready.done():
            self.ready.set_result(client)

    async def until_closed(self) -> None:
        await self._closing.wait()

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def ended(self, failure: BaseException | None) -> None:
        """The session's task ends (``failure``: why it could not open): calls waiting fail."""
        self.open = False
        if not self.ready.done():
            self.ready.set_exception(failure or ToolError(f"{self.server.where} was closed before it answered"))
        if not self.ready.cancelled():
            self.ready.exception()  # retrieved: nobody may be waiting any more
        _ended(self)

    def close(self) -> None:
        """Take no new call; leave the session (on the loop thread). Idempotent."""
        self.open = False
        self._closing.set()

    def expire(self) -> None:
        """The server no longer knows this session: calls it refused may be sent again."""
        self.expired = True
        self.close()


def log_stderr(where: str, line: str) -> None:
    """One line a stdio server wrote to its stderr, as a ``greenroom.mcp`` INFO line."""
    log().info("%s stderr: %s", where, line)


_stderr_sink: Callable[[str, str], None] = log_stderr


def route_stderr(sink: Callable[[str, str], None] | None) -> None:
    """Hand this process's stdio servers' stderr lines, ``(server, line)``, to ``sink``
    (called on the thread that reads them); None: log them there (``log_stderr``)."""
    global _stderr_sink
    _stderr_sink = sink or log_stderr


def stderr_line(where: str, line: str) -> None:
    """A line a stdio server wrote to its stderr (from the thread that reads it)."""
    _stderr_sink(where, line)


_lock = threading.Lock()
_current: dict[tuple[int, str], Connection] = {}  # (id of the loop, server key) -> its session
_alive: set[Connection] = set()  # sessions whose task has not ended, closing ones included
_when_closed: list[Callable[[], None]] = []


def connection(server: ServerParams, serve: Callable[[Connection], Coroutine[Any, Any, None]]) -> Connection:
    """This process's session with ``server``, started (its task runs ``serve``) if there is
    none that takes calls. Called on the loop that runs the calls."""
    loop = asyncio.get_running_loop()
    key = (id(loop), server.key)
    with _lock:
        found = _current.get(key)
        if found is not None and found.open:
            return found
        started = Connection(server, loop, serve)
        _current[key] = started
        _alive.add(started)
    return started


def _ended(conn: Connection) -> None:
    with _lock:
        _alive.discard(conn)
        key = (id(conn.loop), conn.server.key)
        if _current.get(key) is conn:
            del _current[key]
        waiters = list(_when_closed) if not _alive else []
        if waiters:
            _when_closed.clear()
    for done in waiters:
        done()


def open_count() -> int:
    """How many sessions this process has whose task has not ended."""
    with _lock:
        return len(_alive)


def close_all(on_done: Callable[[], None] | None = None) -> None:
    """Close every session of this process (thread-safe, does not wait); ``on_done`` runs
    once none is left (at once if there is none)."""
    with _lock:
        alive = list(_alive)
        if on_done is not None and alive:
            _when_closed.append(on_done)
    for conn in alive:
        try:
            conn.loop.call_soon_threadsafe(conn.close)
        except RuntimeError:  # its loop has closed: nothing runs there any more
            _ended(conn)
    if on_done is not None and not alive:
        on_done()
