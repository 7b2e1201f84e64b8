"""Who decides for a session: its single owner, which takes one decision at a time.

A session's decisions (a message, a turn's end, a withdrawal: ``busy``'s rules) are taken
on its ``SessionOwned`` state: the history, the turn running, the one rolled back, the
messages waiting. ``decide(fn)`` runs ``fn`` on that state with no other decision in
between, and keeps what it changed:

- ``LocalOwner`` (a Runtime without a store): the state in memory, under a lock; the
  session lives as long as its Runtime, in this process only;
- ``StoreOwner`` (with a store): the state is the session's row, its turns and its queue in
  the store, and ``decide`` is one transaction that holds the row (``SessionLog.decide``:
  PostgreSQL's ``FOR UPDATE``, SQLite's write lock). Every process that opens the session
  decides through it, so two messages from two processes are taken in the order their
  transactions commit, each on the state the one before left, whatever the timing.

``ended(turn_id, since)`` is what the owner knows of a turn's end: the store's turn log says
whether a turn that another process started has ended (terminally), and its history;
without a store only the turns this process follows end. A turn whose start was decided
(``since``, the decision's time) more than ``NEVER_STARTED`` seconds ago and that the log
still does not have never started (the process that decided it died first): it ends with
an empty history, adding nothing, so the session goes on. A turn this process still
follows is never taken so (``deciding``): one queued behind its host's ``max_running`` is
written nowhere until it starts. Another process's turn queued that long is (a limit).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol, TypeVar

from messages import TERMINAL_REASONS, ChatMessage

from ..store.base import SessionLog, SessionOwned, TurnLog

__all__ = ["NEVER_STARTED", "LocalOwner", "Owner", "StoreOwner", "bounded", "new_session_id"]

T = TypeVar("T")
NEVER_STARTED = 60.0  # seconds after its decision that a turn the store does not have is taken as never started


def new_session_id() -> str:
    """A fresh, unique session id."""
    return "session_" + uuid.uuid4().hex[:16]


def bounded(messages: list[ChatMessage], max_messages: int | None) -> list[ChatMessage]:
    """The most recent part of ``messages`` that a turn is given: at most ``max_messages``,
    beginning at a user message (so no tool call is cut from its result); ``None``: all."""
    if max_messages is None or len(messages) <= max_messages:
        return list(messages)
    for i in range(len(messages) - max_messages, len(messages)):
        if messages[i].role == "user":
            return list(messages[i:])
    return []


class Owner(Protocol):
    durable: bool

    def decide(self, fn: Callable[[SessionOwned], T]) -> T:
        """Run ``fn`` on the session's state, no other decision in between; keep what it changed."""

    def ended(self, turn_id: str, since: float) -> list[ChatMessage] | None:
        """The whole history of ``turn_id`` if the owner knows it has ended terminally (empty:
        it never started), else None; ``since``: when its start was decided."""


class LocalOwner:
    """A session in this process's memory (no store)."""

    durable = False

    def __init__(self, session_id: str) -> None:
        self._owned = SessionOwned(session_id, [], [])
        self._lock = threading.Lock()

    def decide(self, fn: Callable[[SessionOwned], T]) -> T:
        with self._lock:
            o = self._owned
            draft = SessionOwned(
                o.session_id, list(o.turns), list(o.messages), o.running, o.opening, o.dropping, list(o.queue)
            )
            out = fn(draft)  # an error keeps the session as it was, as a transaction rolled back would
            draft.added.clear()
            self._owned = draft
            return out

    def ended(self, turn_id: str, since: float) -> list[ChatMessage] | None:
        return None  # only the turns this process follows end, and their watchers say so


class StoreOwner:
    """A session in the store: every decision one transaction on its row."""

    durable = True

    def __init__(self, session_id: str, sessions: SessionLog, log: TurnLog) -> None:
        self.session_id = session_id
        self._sessions = sessions
        self._log = log

    def decide(self, fn: Callable[[SessionOwned], T]) -> T:
        return self._sessions.decide(self.session_id, fn)

    def ended(self, turn_id: str, since: float) -> list[ChatMessage] | None:
        try:
            state = self._log.load(turn_id)
        except KeyError:  # not written yet: its start is being carried out, or its decider died first
            return [] if time.time() - since > NEVER_STARTED else None
        if state.phase != "finished" or state.finish_reason not in TERMINAL_REASONS:
            return None
        return list(state.messages)
