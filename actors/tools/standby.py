"""Threads kept parked for what a stop starts, so that a stop does not wait for thread starts.

A stop starts each ``on_stop`` callback on a thread of its own, a deadline for them, and
(``run_command``) a SIGKILL after the grace. ``threading.Thread.start`` waits until the new
thread runs, and in a tool process whose other threads want the GIL as well, three or four
such starts held the stop's actor thread for about 1 ms (docs/benchmarks.md, "The cost of a
turn"). Here:

- ``run(fn, name)`` runs ``fn`` on a parked thread if one is idle, else on a new one: each
  ``fn`` has a thread of its own, never queued behind another, and a context of its own
  (``contextvars``: what one job sets, the next does not see; ``threading.local`` values do
  stay with the thread); the thread parks again once ``fn`` returns (at most ``KEEP`` of
  them stay parked);
- ``later(delay, fn, *args)`` calls ``fn(*args)`` after ``delay`` seconds on the one timer
  thread and returns what ``cancel()`` stops; ``fn`` must return quickly (it holds every
  later call up: hand longer work to ``run``);
- ``warm(n)`` returns once ``n`` threads are parked and the timer thread runs, so a stop
  after it starts nothing (``Cancellation.on_stop`` calls it as a callback is registered,
  on the tool's own thread, off the stop's path).

The threads are daemons. A forked child starts with none (its parent's threads are not in
it).
"""

from __future__ import annotations

import contextvars
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
LONGEST_WAIT = 3600.0  # the timer thread wakes at least this often (Condition.wait refuses a wait too long)

log = logger("greenroom.tools")
_now = time.monotonic

_Job = tuple[Callable[[], Any], str]


class _State:
    """This process's parked threads and its timer (a new one after a fork)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[queue.SimpleQueue[_Job]] = []
        self.timer: _Timer | None = None


_state = _State()


def _forget() -> None:
    global _state
    _state = _State()


os.register_at_fork(after_in_child=_forget)


def run(fn: Callable[[], Any], name: str) -> None:
    """Run ``fn`` on a thread of its own, named ``name`` while it runs; an exception it
    raises is logged."""
    state = _state
    with state.lock:
        slot = state.idle.pop() if state.idle else None
    if slot is not None:
        slot.put((fn, name))
        return
    _start(state, (fn, name), None, name)


def warm(n: int = 2) -> None:
    """Park threads until ``n`` (at most ``KEEP``) are idle and start the timer thread;
    return once the threads started here are parked (or have taken a job)."""
    state = _state
    with state.lock:
        missing = min(n, KEEP) - len(state.idle)
    parked = [threading.Event() for _ in range(missing)]
    for event in parked:
        _start(state, None, event, "greenroom standby")
    _timer(state)
    for event in parked:
        event.wait(1.0)  # bounded: a thread that never parks costs a stop a start, no more


def _start(state: _State, job: _Job | None, parked: threading.Event | None, name: str) -> None:
    slot: queue.SimpleQueue[_Job] = queue.SimpleQueue()
    threading.Thread(target=_serve, args=(state, slot, job, parked), name=name, daemon=True).start()


def _serve(state: _State, slot: queue.SimpleQueue[_Job], job: _Job | None, parked: threading.Event | None) -> None:
    me = threading.current_thread()
    while True:
        if job is not None:
            fn, me.name = job
            try:
                contextvars.Context().run(fn)
            except BaseException:  # noqa: BLE001 - a job's failure is its own; the thread goes on
                log().exception("%s raised", me.name)
            me.name, job = "greenroom standby", None
        with state.lock:
            keep = len(state.idle) < KEEP and state is _state
            if keep:
                state.idle.append(slot)
        if parked is not None:
            parked.set()
            parked = None
        if not keep:
            return
        job = slot.get()


class Later:
    """A call ``later`` will make; ``cancel()`` stops it if it has not been made."""

    __slots__ = ("call", "cancelled")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.call, self.cancelled = (fn, args), False

    def cancel(self) -> None:
        """Stop the call (it may be under way already) and let go of what it would call with."""
        self.call, self.cancelled = (_nothing, ()), True


def _nothing() -> None:
    pass


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
                    self._cond.wait(min(self._heap[0][0] - _now(), LONGEST_WAIT) if self._heap else None)
                _, _, handle = heapq.heappop(self._heap)
            if handle.cancelled:
                continue
            fn, args = handle.call  # one attribute: a cancel() now swaps it whole
            try:
                fn(*args)
            except BaseException:  # noqa: BLE001 - one call's failure stops no other
                log().exception("a timed call raised")
