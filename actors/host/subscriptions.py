"""Who reads a turn, how far each has been sent, and how far each may be sent.

A turn's events are numbered 0, 1, 2, ... and kept (in the turn's log, or in the store),
so a subscriber is a cursor into them: ``next_seq``, the first event it has not been sent.
A subscriber with a ``window`` is sent at most ``window`` events past the last one it said
it read (``Consumed``, or a ``Subscribe``'s ``unread_from``); the rest waits in the log until
it reads, so a slow reader holds nothing but its cursor in the host and at most its window in
its own process. A subscriber that asks again for what follows (a ``Subscribe`` from the
first event it has not received) says where its reading is (``unread_from``), so that asking
again never widens its window. One without a window (a supervisor) is sent everything as it
happens.

The first ``Finish`` a subscriber is sent carries the whole history (``whole_finish``):
a subscriber that started reading at ``since`` > 0 has not seen the ``Finish`` events before
it, and later ones only carry what is new.

``Readers`` are one turn's subscribers: what a subscriber missed is sent from the turn's log
(no store) or read from the store off the actor thread, and the events carried out meanwhile
wait behind it, so each subscriber gets every event once, in order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from messages import Error, Finish, TurnState, decode, encode

from ..logs import logger
from .journal import Journal

__all__ = ["Readers", "Subscription", "whole_finish"]


log = logger("greenroom.turn")


@dataclass
class Subscription:
    """One subscriber of one turn."""

    address: Any
    key: str  # str(address), computed once: the host's outboxes are keyed by it
    next_seq: int
    window: int | None = None
    limit: int | None = None  # it may be sent the events numbered below this (None: all)
    whole: bool = False  # it has been sent a Finish with the whole history, or every Finish
    reading: bool = False  # what it missed is being read from the store for it

    @classmethod
    def of(cls, address: Any, since: int, window: int | None, unread_from: int | None = None) -> Subscription:
        """From ``since``; with a ``window``, it may be sent ``window`` events past
        ``unread_from`` (the first it has not read: ``since`` if not given, never past it)."""
        start = since if unread_from is None else min(unread_from, since)
        return cls(address, str(address), since, window, None if window is None else start + window, since == 0)

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


class ReaderHost(Protocol):
    """What a turn's readers need of its host."""

    @property
    def journal(self) -> Journal | None: ...

    def deliver(self, key: str, to: Any, payload: bytes, kind: str) -> None: ...

    def hold_outbox(self, key: str) -> None: ...

    def release_outbox(self, key: str) -> None: ...


class Readers:
    """The subscribers of one turn, by ``str(address)``; see the module docstring.
    ``state()`` is the turn's state now; ``emitted`` the seq past the last event carried out."""

    def __init__(self, host: ReaderHost, turn_id: str, state: Callable[[], TurnState], emitted: int) -> None:
        self.host, self.turn_id, self.state = host, turn_id, state
        self.subs: dict[str, Subscription] = {}
        self.log: list[tuple[str, bytes]] = []  # (kind, encoded event) by seq, kept when there is no store
        self.emitted = emitted
        self.closed = False

    def add(self, who: Any, since: int, window: int | None, unread_from: int | None = None) -> Subscription:
        """Subscribe ``who`` from ``since`` (a new subscription from the same address
        replaces the old) and send it what it missed; see ``Subscription.of``."""
        sub = Subscription.of(who, since, window, unread_from)
        if sub.key not in self.subs:
            self.host.hold_outbox(sub.key)
        self.subs[sub.key] = sub
        self.catch_up(sub)
        return sub

    def remove(self, key: str) -> None:
        if self.subs.pop(key, None) is not None:
            self.host.release_outbox(key)

    def read(self, key: str, seq: int) -> None:
        """The subscriber ``key`` has read up to ``seq`` (``Consumed``)."""
        sub = self.subs.get(key)
        if sub is not None:
            sub.read(seq)
            self.catch_up(sub)

    def emit(self, seq: int, kind: str, payload: bytes) -> None:
        """Event ``seq`` was carried out: to each subscriber that is there and may be sent it."""
        self.emitted = seq + 1
        for sub in self.subs.values():
            if sub.next_seq == seq and sub.may_send(seq) and not sub.reading:
                self._send(sub, kind, payload)

    def tell_all(self, event: Error) -> None:
        """``event`` (seq -1: about the readers, not one of the turn's events) to every
        subscriber, who is let go."""
        for sub in list(self.subs.values()):
            self.host.deliver(sub.key, sub.address, encode(event), event.kind)
        self.drop_all()

    def drop_all(self) -> None:
        for key in list(self.subs):
            self.remove(key)

    def let_go(self, ended_at: float) -> float | None:
        """The turn has ended: let go of its subscribers and return None, or, while one is
        still behind (its window holds back events it has not read), return how long to wait.
        One still behind ``reader_grace`` seconds after the end is dropped and told so (an
        ``Error(reader_dropped)`` with seq -1: not one of the turn's events)."""
        state = self.state()
        options = state.options
        lagging = [s for s in self.subs.values() if s.next_seq < state.next_seq]
        left = ended_at + options.reader_grace - time.monotonic()
        if lagging and left > 0:
            return min(left, max(options.linger, 1.0))
        why = f"this reader was still behind {options.reader_grace:g} s after the turn ended, and was dropped"
        for sub in lagging:
            lost = Error(turn_id=self.turn_id, seq=-1, error_type="reader_dropped", message=why)
            self.host.deliver(sub.key, sub.address, encode(lost), lost.kind)
        for key in list(self.subs):
            self.remove(key)
        return None

    def catch_up(self, sub: Subscription) -> None:
        """Send ``sub`` the events it may be sent and has not been: from the log, or read from
        the store off the actor thread (live events wait behind them, in order)."""
        end = self.emitted if sub.limit is None else min(self.emitted, sub.limit)
        if sub.next_seq >= end or sub.reading:
            return
        journal = self.host.journal
        if journal is None:
            for kind, payload in self.log[sub.next_seq : end]:
                self._send(sub, kind, payload)
            return
        sub.reading = True
        turn_id, since = self.turn_id, sub.next_seq

        def read(rows: Any, error: BaseException | None) -> None:
            sub.reading = False
            if self.subs.get(sub.key) is not sub or self.closed:
                return
            if error is not None:  # the reader asks again for what it misses (``TurnStream``)
                log().warning("turn %s: cannot read its events for %s: %s", turn_id, sub.key, error)
                return
            for kind, payload in rows:
                if sub.next_seq >= end:
                    break
                self._send(sub, kind, payload)
            self.catch_up(sub)  # what was emitted meanwhile

        journal.read(lambda store: store.log.event_payloads(turn_id, since, end), read)

    def _send(self, sub: Subscription, kind: str, payload: bytes) -> None:
        if kind == "finish":
            if not sub.whole:
                payload = whole_finish(payload, self.state().messages)
            sub.whole = True
        self.host.deliver(sub.key, sub.address, payload, kind)
        sub.next_seq += 1
