"""How a worker thread hands results to its actor without calling Thespian.

The thread only puts an item on a queue and writes one byte to a pipe; the actor returns
``ThespianWatch([handoff.fd])`` from every handler and drains the queue on ``WatchMessage``.
Only the actor's thread ever calls Thespian (``send`` is not thread-safe). Not public.

An actor may also say it is awake (``with handoff:`` around a handler, which calls
``wake()`` on entry and ``settle()`` on exit, also when the handler raises; the handler
drains once more before it ends): an item put in between needs no wake-up byte, since the
actor drains before it sleeps, and a wake-up byte costs the actor a pass of Thespian's loop.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any

__all__ = ["Handoff"]


class Handoff:
    """A queue a worker thread fills and an actor drains, with a pipe to wake the actor."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._q: deque[Any] = deque()  # append and popleft are atomic: any thread may put
        self._awake = False

    @property
    def fd(self) -> int:
        return self._r

    def put(self, item: Any) -> None:
        """Called from any thread: queue ``item``, then write one wake-up byte for it, unless
        the actor is awake (it drains before it sleeps: ``settle``)."""
        self._q.append(item)
        if self._awake:
            return
        self._write()

    def wake(self) -> None:
        """Called on the actor thread when a handler starts: puts need no wake-up byte."""
        self._awake = True

    def settle(self) -> None:
        """Called on the actor thread when a handler ends, after its last ``drain``: from now on
        every put writes its byte, and an item put without one since that drain gets one now.

        A put that wrote no byte saw the actor awake, so its item was queued before this
        clears the flag, and this finds it queued (or the drain before took it)."""
        self._awake = False
        if self._q:
            self._write()

    def __enter__(self) -> Handoff:
        self.wake()
        return self

    def __exit__(self, *exc: object) -> None:
        self.settle()

    def _write(self) -> None:
        try:
            os.write(self._w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups: the actor will wake and drain anyway

    def drain(self) -> list[Any]:
        """Called on the actor thread: everything queued so far, in order.

        The wake-up bytes are read *before* the queue is drained. Every ``put`` writes its
        byte after queueing its item, so an item still queued after this returns has its
        byte still in the pipe, and the actor wakes for it. (A single "armed" flag instead
        of one byte per item lost wake-ups: a byte written after the flag was cleared
        could be read by the same drain, leaving the flag set and the pipe empty.)
        """
        try:
            while os.read(self._r, 65536):
                pass
        except BlockingIOError:
            pass
        q = self._q
        return [q.popleft() for _ in range(len(q))]

    def close(self) -> None:
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
