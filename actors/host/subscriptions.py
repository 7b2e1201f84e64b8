"""Who reads a turn, how far each has been sent, and how far each may be sent.

A turn's events are numbered 0, 1, 2, ... and kept (in the turn's log, or in the store),
so a subscriber is a cursor into them: ``next_seq``, the first event it has not been sent.
A subscriber with a ``window`` is sent at most ``window`` events past the last one it said
it read (``Consumed``); the rest waits in the log until it reads, so a slow reader holds
nothing but its cursor in the host and at most its window in its own process. One without a
window (a supervisor) is sent everything as it happens.

The first ``Finish`` a subscriber is sent carries the whole history (``whole_finish``):
a subscriber that started reading at ``since`` > 0 has not seen the ``Finish`` events before
it, and later ones only carry what is new.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from messages import Finish, decode, encode

__all__ = ["Subscription", "whole_finish"]


@dataclass
class Subscription:
    """One subscriber of one turn."""

    address: Any
    key: str  # str(address), computed once: the host's outboxes are keyed by it
    next_seq: int
    window: int | None = None
    limit: int | None = None  # it may be sent the events numbered below this (None: all)
    whole: bool = False  # it has been sent a Finish with the whole history, or every Finish

    @classmethod
    def of(cls, address: Any, since: int, window: int | None) -> Subscription:
        return cls(address, str(address), since, window, None if window is None else since + window, since == 0)

    def may_send(self, seq: int) -> bool:
        return self.limit is None or seq < self.limit

    def read(self, seq: int) -> None:
        """It has read every event up to ``seq``: it may be sent ``window`` more past it."""
        if self.window is not None:
            self.limit = max(self.limit or 0, seq + 1 + self.window)


def whole_finish(payload: bytes, history: list[Any]) -> bytes:
    """``payload`` (an encoded ``Finish``) re-encoded with the whole history it ends, taken
    from ``history`` (a turn's history only grows, so its start is the same as then)."""
    finish = decode(payload)
    assert isinstance(finish, Finish)
    if finish.history_from == 0:
        return payload
    whole = finish.model_copy(update={"messages": list(history[: finish.history_length]), "history_from": 0})
    return encode(whole)
