"""Many timers of one actor on a few Thespian wakeups.

Thespian keeps an actor's wakeups in one list that it sorts again on every ``wakeupAfter``
(a Python comparison per pending wakeup), so a host with a timer per turn (each turn's
``linger``, its approval windows) pays for every turn it holds on every timer it sets. A
``Timers`` keeps them in a heap instead and asks Thespian for a wakeup only when a timer is
due before every wakeup already asked for: a handful are pending at any time.

Guarantees: every payload added is returned by ``due()`` once, not before its delay has
passed, and in the order of its due time (in the order added, for equal times); ``arm(delay)``
is called so that a wakeup comes at or after the earliest due time.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Timers"]

_EARLY = 0.0005  # seconds: a wakeup asked for this much before another is taken as the same


class Timers:
    """Payloads due at given times, behind one wakeup; owned by one actor's thread."""

    def __init__(self, arm: Callable[[float], None]) -> None:
        self._arm = arm  # ask Thespian for a wakeup after ``delay`` seconds
        self._heap: list[tuple[float, int, Any]] = []
        self._order = itertools.count()
        self._armed: list[float] = []  # the due times of the wakeups asked for (a heap)

    def add(self, delay: float, payload: Any) -> None:
        """``payload`` is due ``delay`` seconds from now."""
        due = time.monotonic() + max(0.0, delay)
        heapq.heappush(self._heap, (due, next(self._order), payload))
        self._rearm(due)

    def due(self) -> list[Any]:
        """Call once on every wakeup asked for through ``arm``: the payloads due by now, in order.

        Thespian delivers the wakeups in the order of their times, one per ``arm``, so each
        call consumes the earliest one asked for (whatever clock skew made it early or late)."""
        if self._armed:
            heapq.heappop(self._armed)
        now = time.monotonic()
        out = []
        while self._heap and self._heap[0][0] <= now:
            out.append(heapq.heappop(self._heap)[2])
        if self._heap:
            self._rearm(self._heap[0][0])
        return out

    def _rearm(self, due: float) -> None:
        if self._armed and self._armed[0] <= due + _EARLY:
            return  # a wakeup comes by then; it re-arms for what is still waiting
        heapq.heappush(self._armed, due)
        self._arm(max(0.0, due - time.monotonic()))

    def __len__(self) -> int:
        return len(self._heap)
