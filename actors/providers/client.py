"""The HTTP side of provider streams: one asyncio loop per process reads all of them.

- ``ssl_context()``: one verifying SSL context per process tree (built before the forks);
- ``STREAMS``: the process's stream loop, a thread of its own running an asyncio event
  loop, started by the process's first stream. Each stream is a task on that loop
  (``streaming.StreamWorker``) with an ``httpx.AsyncClient`` of its own for as long as it
  runs (``take``), given back after (``give``) and kept, with its connection, for the next
  stream (``IDLE`` at most): a stream whose body was read to its end leaves its connection
  fit for the next request. A task cancelled closes its own connection, and only that one,
  at once. A client per stream, not one for all: httpcore's pool walks its connections
  for every request and response (quadratically, in 1.0.9), which with a hundred streams
  on one client cost more than reading them (measured, ``docs/benchmarks.md``).

``httpcore`` and ``anyio``'s asyncio backend (what httpx's async client runs on) are
imported here, where httpx would import them on a host's first stream: in the process that
starts the actor system, before it forks, so that every process of the tree shares those
modules' memory instead of each host holding its own copy (about 4 MiB with trio installed).
"""

from __future__ import annotations

import asyncio
import os
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio._backends._asyncio  # noqa: F401  (see the module docstring)
import anyio.streams.tls  # noqa: F401
import anyio.to_thread  # noqa: F401
import httpcore  # noqa: F401
import httpx

from ..logs import logger

__all__ = ["EXPIRY", "IDLE", "LIMITS", "STREAMS", "WAITS", "StreamLoop", "ssl_context"]

log = logger("greenroom.llm")

T = TypeVar("T")

# a stream's client: its one connection kept between two streams for EXPIRY s at most, under
# the idle timeout of common servers (5 s): a server closing it as it is reused would cost a retry
EXPIRY = 2.0
LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=1, keepalive_expiry=EXPIRY)
IDLE = 64  # clients kept for the next streams, per process
WAITS = 4  # threads for the rate limit's calls that may wait for the store, per process

_SSL_CONTEXT: ssl.SSLContext | None = None


def ssl_context() -> ssl.SSLContext:
    """One verifying SSL context per process tree.

    Loading the CA bundle takes ~40 ms; the Runtime builds the context before its actor
    system forks, so every LLMActor inherits it instead of loading it again.
    """
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = httpx.create_ssl_context()
    return _SSL_CONTEXT


class StreamLoop:
    """The stream loop of this process (see the module docstring); ``loop()`` starts it."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a child has no thread and a fresh lock

    def _reset(self) -> None:
        inherited = getattr(self, "_loop", None)
        if inherited is not None:  # a forked child: the parent's loop has no thread here; it is
            _INHERITED.append((inherited, [c for _, c in self._idle]))  # kept, never collected (nor warned of)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waits: ThreadPoolExecutor | None = None
        # only the loop's thread touches what follows
        self._idle: list[tuple[float, httpx.AsyncClient]] = []  # (given back at, client), oldest first
        self._pruning: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Task[None]] = set()

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started on first use in this process): schedule on it with
        ``call_soon_threadsafe``."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=_serve, args=(loop,), name="greenroom streams", daemon=True).start()
                self._loop = loop
            return self._loop

    def wait_on(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """The loop's thread: ``fn(*args)`` on one of ``WAITS`` threads of this process's own
        (a call that may wait for the store: never on the loop, nor on its default executor,
        which resolves the streams' host names)."""
        if self._waits is None:
            self._waits = ThreadPoolExecutor(WAITS, thread_name_prefix="greenroom-stream-waits")
        return asyncio.get_running_loop().run_in_executor(self._waits, fn, *args)

    def take(self) -> httpx.AsyncClient:
        """The loop's thread: a client for one stream, the one given back last if any."""
        self._prune()
        return self._idle.pop()[1] if self._idle else httpx.AsyncClient(verify=ssl_context(), limits=LIMITS)

    def give(self, client: httpx.AsyncClient) -> None:
        """The loop's thread: ``client``'s stream has ended; kept for the next, ``IDLE`` at
        most (the oldest closed first, with its connection) and ``EXPIRY`` s at most."""
        self._idle.append((time.monotonic(), client))
        while len(self._idle) > IDLE:
            self._close(self._idle.pop(0)[1])
        if self._pruning is None:
            self._pruning = asyncio.get_running_loop().call_later(EXPIRY, self._prune_later)

    def _prune(self) -> None:
        """Close the clients idle for longer than ``EXPIRY`` (their connection is of no use)."""
        old = time.monotonic() - EXPIRY
        while self._idle and self._idle[0][0] <= old:
            self._close(self._idle.pop(0)[1])

    def _prune_later(self) -> None:
        self._pruning = None
        self._prune()
        if self._idle:
            self._pruning = asyncio.get_running_loop().call_later(EXPIRY, self._prune_later)

    def _close(self, client: httpx.AsyncClient) -> None:
        task = asyncio.get_running_loop().create_task(client.aclose())
        self._closing.add(task)  # held until done: a task nothing holds may be collected
        task.add_done_callback(self._closing.discard)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


_INHERITED: list[tuple[asyncio.AbstractEventLoop, list[httpx.AsyncClient]]] = []

STREAMS = StreamLoop()
