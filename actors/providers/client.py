"""The HTTP side of a provider stream: one client per stream in flight, abortable at once.

- ``ssl_context()``: one verifying SSL context per process tree (built before the forks);
- ``ProviderClient``: an ``httpx.Client`` that knows its sockets, so that ``shutdown()``
  aborts its stream from any thread, and that runs its streams on a thread of its own,
  kept from one stream to the next;
- ``DEADLINES``: one thread per process that aborts streams past their total timeout.

``httpcore`` (and what it imports: h11, anyio, trio where installed) is imported here,
where httpx would import it on a host's first stream: in the process that starts the actor
system, before it forks, so that every process of the tree shares those modules' memory
instead of each host holding its own copy (about 4 MiB with trio installed).
"""

from __future__ import annotations

import heapq
import itertools
import os
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import httpcore  # noqa: F401  (see the module docstring)
import httpx

from ..logs import logger

__all__ = ["DEADLINES", "ProviderClient", "ssl_context"]

log = logger("greenroom.llm")


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


class _Deadlines:
    """One thread per process that calls each registered function at its time, unless it
    was cancelled first: the streams' total timeouts, without a timer thread per stream.
    A cancelled entry keeps no reference to its function; the heap is compacted once most
    of it is cancelled."""

    def __init__(self) -> None:
        self._ids = itertools.count()
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a child has no thread and a fresh lock

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[list[Any]] = []  # [when, token, fn or None once cancelled]
        self._entries: dict[int, list[Any]] = {}
        self._pid: int | None = None  # the process whose thread serves the heap

    def add(self, delay: float, fn: Callable[[], None]) -> int:
        with self._cond:
            if self._pid != os.getpid():  # first use in this process (a fork has no thread)
                self._pid, self._heap, self._entries = os.getpid(), [], {}
                threading.Thread(target=self._run, name="greenroom stream deadlines", daemon=True).start()
            token = next(self._ids)
            entry = [time.monotonic() + delay, token, fn]
            self._entries[token] = entry
            heapq.heappush(self._heap, entry)
            self._cond.notify()
            return token

    def cancel(self, token: int) -> None:
        with self._cond:
            entry = self._entries.pop(token, None)
            if entry is not None:
                entry[2] = None
            if len(self._heap) > 64 and 2 * len(self._entries) < len(self._heap):
                self._heap = [e for e in self._heap if e[2] is not None]
                heapq.heapify(self._heap)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                _, token, fn = heapq.heappop(self._heap)
                if fn is None:
                    continue
                del self._entries[token]
            try:
                fn()
            except Exception:  # one failing function must not end the deadlines of the process
                log().exception("a stream deadline failed")


DEADLINES = _Deadlines()


class ProviderClient:
    """An ``httpx.Client`` that knows its sockets, so that its stream can be aborted, and
    a thread of its own that runs its streams.

    One client serves one stream at a time (the LLMActor keeps idle ones for reuse and
    drops one that was aborted), so shutting down all its sockets aborts exactly that
    stream, whether the connection was fresh or reused from the pool. Its thread is started
    by its first stream and kept for the next; it ends, closing the client, once the client
    is spent (``shutdown``) or closed.
    """

    def __init__(self) -> None:
        self.client = httpx.Client(verify=ssl_context())
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._shut = False
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def spent(self) -> bool:
        """It was aborted (``spend``): it must not serve another stream."""
        return self._shut

    def run(self, job: Callable[[], None]) -> None:
        """Run ``job`` on this client's thread, after the jobs before it. Called by one
        thread only (its host's); a spent or closed client runs nothing more."""
        if self._shut or self._closed:
            raise RuntimeError("this ProviderClient is spent or closed; it runs no more streams")
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="greenroom stream", daemon=True)
            self._thread.start()
        self._jobs.put(job)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()
            if self._shut:  # aborted: the client is spent and nobody will give it work again
                break
        self.client.close()

    def trace(self, name: str, info: dict[str, Any]) -> None:
        if name != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is None:
            return
        with self._lock:
            self._sockets = [s for s in self._sockets if s.fileno() != -1]
            self._sockets.append(sock)
            late = self._shut
        if late:
            _shutdown(sock)

    def spend(self) -> None:
        """Mark it spent, touching no socket: from now on it serves no other stream."""
        with self._lock:
            self._shut = True

    def shutdown(self) -> None:
        """Shut down every socket now (also one still connecting); the client is spent."""
        with self._lock:
            self._shut = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)

    def close(self) -> None:
        self._closed = True
        if self._thread is None:
            self.client.close()
        else:
            self._jobs.put(None)  # its thread closes it after the job it may be running


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
