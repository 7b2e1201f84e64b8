"""The HTTP side of provider streams: one asyncio loop per process reads all of them.

- ``ssl_context()``: one verifying SSL context per process tree (built before the forks);
- ``STREAMS``: the process's stream loop, an asyncio event loop created by the process's
  first stream and run by a thread of its own; in a TurnHost (``drive()``), by the host's
  actor thread itself while the process has few streams (below). Each stream is a task on
  that loop (``streaming.StreamWorker``) with an ``httpx.AsyncClient`` of its own for as
  long as it runs (``take``), given back after (``give``) and kept, with its connection,
  for the next stream (``IDLE`` at most): a stream whose body was read to its end leaves
  its connection fit for the next request. A task cancelled closes its own connection, and only that one,
  at once. A client per stream, not one for all: httpcore's pool walks its connections
  for every request and response (quadratically, in 1.0.9), which with a hundred streams
  on one client cost more than reading them (measured, ``docs/benchmarks.md``).

Who runs the loop, in a process that ``drive()``s it: its actor thread, between its
messages (``run_ready``: the loop's ready callbacks, at most ``BUDGET`` passes), watching the
loop's selector as Thespian watches its other descriptors (``fileno``), until the process
has more than ``HAND_OVER_PAST`` streams under way; a stream then reads without a hand-over
between two threads at each step, which is most of what a single turn waits for
(docs/benchmarks.md, "The cost of a turn"). Past ``HAND_OVER_PAST`` the loop moves to its
thread, where a host serving many turns reads them best (its own thread has its messages
to handle), and it comes back once they are down to ``OWN_UP_TO``: the thread is asked to
stop, and the actor thread takes the loop over once the thread has stopped and woken it
(``drive``'s ``wake``); never both at once. While the actor thread runs it, the loop's
timers wake the process through the timer thread ``drive`` was given (a host's:
``tools.standby.later``), and a run of ``BUDGET`` passes that ends with callbacks still
ready wakes it again at once.

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

from ..debug_trace import trace
from ..logs import logger

__all__ = [
    "BUDGET",
    "EXPIRY",
    "HAND_OVER_PAST",
    "IDLE",
    "LIMITS",
    "OWN_UP_TO",
    "STREAMS",
    "WAITS",
    "StreamLoop",
    "ssl_context",
]

log = logger("greenroom.llm")

T = TypeVar("T")

# a stream's client: its one connection kept between two streams for EXPIRY s at most, under
# the idle timeout of common servers (5 s): a server closing it as it is reused would cost a retry
EXPIRY = 2.0
LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=1, keepalive_expiry=EXPIRY)
IDLE = 64  # clients kept for the next streams, per process
WAITS = 4  # threads for the rate limit's calls that may wait for the store, per process
HAND_OVER_PAST = 8  # past this many streams a driving process's loop moves to its thread (module docstring)
OWN_UP_TO = 2  # ... and comes back to the actor thread once they are down to this many
BUDGET = 16  # loop passes per ``run_ready`` at most: a host's messages do not wait for a busy loop

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
        self._driven = False  # ``drive()`` was called: who runs the loop is ``_mode``
        self._later: Callable[..., Any] = _no_timer
        self._wake_driver: Callable[[], None] = _nothing
        self._mode = "thread"  # "own" (the actor thread), "thread", or "returning" (the thread asked to stop)
        self._go = threading.Event()  # the thread may run the loop
        self._parked = threading.Event()  # the thread has stopped running it
        self._thread_started = False
        self._armed = 0.0  # the loop time the standby timer wakes the actor thread at (own mode)
        self._streams = 0  # clients taken and not given back: streams under way
        # only the loop's thread touches what follows
        self._idle: list[tuple[float, httpx.AsyncClient]] = []  # (given back at, client), oldest first
        self._pruning: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Task[None]] = set()

    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop (created on first use in this process, and run: by its thread, or by the
        actor thread that drives it): schedule on it with ``call_soon_threadsafe``."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._mode = "own" if self._driven else "thread"
                if not self._driven:
                    self._start_thread()
            return self._loop

    def drive(self, later: Callable[..., Any], wake: Callable[[], None]) -> None:
        """The calling thread (a TurnHost's actor thread) runs this process's loop while it has
        few streams: it calls ``run_ready`` after each message and watches ``fileno()``;
        ``later(delay, fn, *args)`` calls ``fn(*args)`` on a thread of its own after ``delay``
        seconds (``tools.standby.later``): what wakes it for the loop's timers; ``wake()``,
        called on the loop's thread once it has given the loop back, wakes it to take it."""
        with self._lock:
            self._driven, self._later, self._wake_driver = True, later, wake

    def fileno(self) -> int | None:
        """The descriptor the driving thread watches, readable when the loop has work; None
        while the loop's own thread runs it, or is asked to give it back (``wake`` says when
        it has), or while there is no loop yet."""
        loop = self._loop
        if loop is None or self._mode != "own":
            return None
        return loop._selector.fileno()  # type: ignore[attr-defined]

    def ready(self) -> bool:
        """The driving thread: the loop has callbacks ready to run now (``run_ready`` again)."""
        loop = self._loop
        return loop is not None and self._mode == "own" and bool(loop._ready)  # type: ignore[attr-defined]

    def run_ready(self) -> None:
        """The driving thread: run what the loop has ready, if the loop is its to run; hand it
        over, or take it back, as the streams under way say (see the module docstring)."""
        loop = self._loop
        if loop is None or not self._driven or not self._handed_right():
            return
        for _ in range(BUDGET):
            loop.stop()
            loop.run_forever()  # one pass: its callbacks ready, what the selector has, its timers due
            if not loop._ready:  # type: ignore[attr-defined]
                break
        else:  # more is ready: the selector's descriptor is readable, so the actor wakes again
            loop.call_soon_threadsafe(_nothing)
        scheduled = loop._scheduled  # type: ignore[attr-defined]
        if scheduled:
            when, now = scheduled[0].when(), loop.time()
            if when < self._armed or self._armed <= now:
                self._armed = when
                self._later(max(0.0, when - now), _wake, loop)

    def _handed_right(self) -> bool:
        """Whether the driving thread runs the loop now, after moving it if the streams say so."""
        if self._mode != "own":
            if not self._parked.is_set():  # the loop's thread runs it
                if self._mode == "thread" and self._streams <= OWN_UP_TO:
                    self._mode = "returning"
                    self._loop.call_soon_threadsafe(self._loop.stop)  # type: ignore[union-attr]
                return False
            self._mode, self._armed = "own", 0.0  # given back (asked for, or its thread failed)
            trace("stream loop", "own", self._streams)
        if self._streams > HAND_OVER_PAST:
            self._mode = "thread"
            trace("stream loop", "thread", self._streams)
            self._parked.clear()
            self._go.set()
            if not self._thread_started:
                self._start_thread()
            return False
        return True

    def _start_thread(self) -> None:
        self._thread_started = True
        self._go.set()
        threading.Thread(target=self._serve, args=(self._loop,), name="greenroom streams", daemon=True).start()

    def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        while True:
            self._go.wait()
            self._go.clear()
            try:
                loop.run_forever()  # until the driving thread asks for it back (``loop.stop``)
            except BaseException:  # noqa: BLE001 - logged; the driving thread takes the loop back
                log().exception("the stream loop's thread failed")
                self._thread_started = False  # the next hand-over starts another
                return
            finally:  # given back: the driving thread takes it at its next message
                self._parked.set()
                self._wake_driver()

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
        client = self._idle.pop()[1] if self._idle else httpx.AsyncClient(verify=ssl_context(), limits=LIMITS)
        self._streams += 1  # once it has one: a stream whose client failed is not under way
        return client

    def give(self, client: httpx.AsyncClient) -> None:
        """The loop's thread: ``client``'s stream has ended; kept for the next, ``IDLE`` at
        most (the oldest closed first, with its connection) and ``EXPIRY`` s at most."""
        self._streams -= 1
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


def _nothing() -> None:
    pass


def _no_timer(delay: float, fn: Callable[..., Any], *args: Any) -> None:
    raise RuntimeError("a stream loop nobody drives has no timer")


def _wake(loop: asyncio.AbstractEventLoop) -> None:
    """The timer thread: a timer of the loop is due; its selector wakes the driving thread."""
    if not loop.is_closed():
        loop.call_soon_threadsafe(_nothing)


_INHERITED: list[tuple[asyncio.AbstractEventLoop, list[httpx.AsyncClient]]] = []

STREAMS = StreamLoop()
