"""What a store keeps of sessions (``TurnStore.sessions``): the records and the protocol; the
SQL is ``sessions``. Re-exported by ``base``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from messages import ChatMessage

__all__ = ["SessionLog", "SessionOwned", "SessionRecord", "SessionSummary"]

T = TypeVar("T")


@dataclass(frozen=True)
class SessionRecord:
    """A session as its store has it: its turns in order, and its history (the concatenation
    of what each of them added)."""

    session_id: str
    turns: list[str]
    messages: list[ChatMessage]
    created_at: float = 0.0
    updated_at: float = 0.0
    running: str | None = None  # the turn running on it
    queued: list[str] = field(default_factory=list)  # the messages waiting, the next first


@dataclass
class SessionOwned:
    """A session as the one transaction that decides for it holds it (``SessionLog.decide``):
    its history, the turn running on it (and how many messages of that turn's history it was
    given before its message: ``opening``), the turn being rolled back, the messages waiting
    (id and messages, the next first). What the decision changes is written back."""

    session_id: str
    turns: list[str]
    messages: list[ChatMessage]
    running: str | None = None
    opening: int = 0
    dropping: str | None = None
    queue: list[tuple[str, list[ChatMessage]]] = field(default_factory=list)
    added: list[list[ChatMessage]] = field(default_factory=list)  # what each turn appended here added
    decided_at: float = 0.0  # when the last decision that changed it was written (``time.time()``)

    def append(self, turn_id: str, added: Sequence[ChatMessage]) -> None:
        self.turns.append(turn_id)
        self.messages.extend(added)
        self.added.append(list(added))


@dataclass(frozen=True)
class SessionSummary:
    """One line of a list of sessions."""

    session_id: str
    turns: int
    created_at: float
    updated_at: float


class SessionLog(Protocol):
    """Sessions: each an ordered list of turns and what each added to its history."""

    def create(self, session_id: str) -> None:
        """Make the session (empty) unless it exists."""

    def exists(self, session_id: str) -> bool:
        """Whether the store has the session."""

    def load(self, session_id: str) -> SessionRecord:
        """The session; ``KeyError`` if unknown, ``SnapshotError`` if unreadable."""

    def append(self, session_id: str, position: int, turn_id: str, added: Sequence[ChatMessage]) -> None:
        """Record that the session's turn ``position`` (0-based) is ``turn_id`` and added
        ``added``; idempotent; ``SessionConflict`` (nothing written) if that position is
        another turn's or the session has not exactly ``position`` turns."""

    def summaries(self) -> list[SessionSummary]:
        """Every session, most recently changed first."""

    def decide(self, session_id: str, decide: Callable[[SessionOwned], T]) -> T:
        """Run ``decide`` on the session in one transaction that holds its row (PostgreSQL:
        ``FOR UPDATE``; SQLite: the write lock), so decisions on one session from any
        process are taken one at a time; write back what it changed (turns appended, the
        running turn, the queue); its result. ``KeyError`` if the session is unknown."""
