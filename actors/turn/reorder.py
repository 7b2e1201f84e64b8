"""Items numbered 0, 1, 2, ... taken in that order, whatever order they arrive in.

Thespian does not order delivery, not even between one sender and one receiver, so every
stream of numbered items (a provider stream's messages in a turn, a turn's events in the
caller's process) goes through a ``Reorder``: an item that arrives early waits for the ones
before it, a duplicate or an item already taken changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Reorder"]

T = TypeVar("T")


class Reorder(Generic[T]):
    """The next expected number, and the items that arrived ahead of it. Not thread-safe."""

    __slots__ = ("early", "next")

    def __init__(self, first: int = 0) -> None:
        self.next = first
        self.early: dict[int, T] = {}

    def add(self, seq: int, item: T) -> list[T]:
        """Take ``item`` numbered ``seq``; return the items now in order (often none or one).
        An item numbered below ``next``, or one already waiting, is dropped."""
        if seq < self.next or seq in self.early:
            return []
        if seq != self.next:
            self.early[seq] = item
            return []
        ready = [item]
        self.next += 1
        while self.next in self.early:
            ready.append(self.early.pop(self.next))
            self.next += 1
        return ready

    def fill_gaps(self, make: Callable[[int], T]) -> list[T]:
        """Give every missing number below the last waiting item ``make(seq)`` (items that
        will never come), and return the items now in order."""
        if not self.early:
            return []
        for seq in range(self.next, max(self.early)):
            self.early.setdefault(seq, make(seq))
        ready = []
        while self.next in self.early:
            ready.append(self.early.pop(self.next))
            self.next += 1
        return ready

    @property
    def waiting(self) -> bool:
        """Whether items wait for one that has not arrived (a gap)."""
        return bool(self.early)
