"""Threads kept parked for what a stop starts, so that a stop does not wait for thread starts.

A stop starts each ``on_stop`` callback on a thread of its own, a deadline for them, and
(``run_command``) a SIGKILL after the grace. ``threading.Thread.start`` waits until the new
thread runs, and in a tool process whose other threads want the GIL as well, three or four
such starts held the stop's actor thread for about 1 ms (docs/benchmarks.md, "The cost of a
turn"). Here:

- ``run(fn, name)`` runs ``fn`` on a parked thread if one is idle, else on a new one: each
  ``fn`` has a thread of its own, never queued behind another; the thread parks again once
  ``fn`` returns (at most ``KEEP`` of them stay parked);
- ``later(delay, fn, *args)`` calls ``fn(*args)`` after ``delay`` seconds on the one timer
  thread and returns what ``cancel()`` stops; ``fn`` must return quickly (it holds every
  later timer up);
- ``warm(n)`` parks ``n`` threads and starts the timer thread now, off a stop's path (a tool
  process does it as its first call starts).

The threads are daemons and hold nothing between jobs. A forked child starts with none (its
parent's threads are not in it).
"""

from __future__ import annotations

import heapq
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..logs import logger

__all__ = ["KEEP", "Later", "later", "run", "warm"]

KEEP = 4  # parked threads kept per process

log = logger("greenroom.tools")

Job = tuple[Callable[[], Any], str]


class _State:
    """This process's parked threads and its timer (a new one after a fork)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[queue.SimpleQueue[Job]] = []
        self.timer: _Timer | None = None


_state = _State()
os.register_at_fork(after_in_child=lambda: globals().__setitem__("_state", _State()))


def run(fn: Callable[[], Any], name: str) -> None:
    """Run ``fn`` on a thread of its own, named ``name`` while it runs; an exception it
    raises is logged."""
    state = _state
    with state.lock:
        slot = state.idle.pop() if state.idle else None
    if slot is not None:
        slot.put((fn, name))
        return
    threading.Thread(target=_serve, args=(state, queue.SimpleQueue(), (fn, name)), name=name, daemon=True).start()


def warm(n: int = 2) -> None:
    """Park threads until ``n`` (at most ``KEEP``) are idle, and start the timer thread."""
    state = _state
    with state.lock:
        missing = min(n, KEEP) - len(state.idle)
    for _ in range(missing):
        slot: queue.SimpleQueue[Job] = queue.SimpleQueue()
        threading.Thread(target=_serve, args=(state, slot, None), name="greenroom standby", daemon=True).start()
    _timer(state)


def _serve(state: _State, slot: queue.SimpleQueue[Job], job: Job | None) -> None:
    me = threading.current_thread()
    while True:
        if job is not None:
            fn, me.name = job
            try:
                fn()
            except BaseException:  # noqa: BLE001 - a job's failure is its own; the thread goes on
                log().exception("%s raised", me.name)
            me.name, job = "greenroom standby", None
        with state.lock:
            if len(state.idle) >= KEEP or state is not _state:
                return
            state.idle.append(slot)
        job = slot.get()


class Later:
    """A call ``later`` will make; ``cancel()`` stops it if it has not been made."""

    __slots__ = ("args", "cancelled", "fn")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args, self.cancelled = fn, args, False

    def cancel(self) -> None:
        self.cancelled = True


def later(delay: float, fn: Callable[..., Any], *args: Any) -> Later:
    """Call ``fn(*args)`` on the timer thread in ``delay`` seconds (see the module docstring)."""
    handle = Later(fn, args)
    _timer(_state).add(delay, handle)
    return handle


def _timer(state: _State) -> _Timer:
    with state.lock:
        if state.timer is None:
            state.timer = _Timer()
        return state.timer


class _Timer:
    """One thread that makes every ``later`` call of its process, earliest first."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Later]] = []
        self._seq = itertools.count()
        threading.Thread(target=self._loop, name="greenroom timer", daemon=True).start()

    def add(self, delay: float, handle: Later) -> None:
        with self._cond:
            heapq.heappush(self._heap, (_now() + delay, next(self._seq), handle))
            if self._heap[0][2] is handle:
                self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > _now():
                    self._cond.wait(self._heap[0][0] - _now() if self._heap else None)
                _, _, handle = heapq.heappop(self._heap)
            if handle.cancelled:
                continue
            try:
                handle.fn(*handle.args)
            except BaseException:  # noqa: BLE001 - one call's failure stops no other
                log().exception("a timed call raised")


_now = time.monotonic
