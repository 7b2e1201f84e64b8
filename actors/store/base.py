"""What a turn store is: the interface every backend implements, and the summary it lists.

A store keeps, per turn, its latest snapshot and its event log, written together in one
transaction before the turn acts on them; and a command inbox for commands written by
other processes. ``sqlite.SQLiteStore`` is the embedded backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel

from messages import Message, TurnEvent, TurnState

__all__ = ["EncodedEvent", "TurnStore", "TurnSummary"]

EncodedEvent = tuple[int, str, bytes]  # (seq, kind, msgpack bytes)


class TurnSummary(BaseModel):
    """One line of ``turns list``."""

    turn_id: str
    status: str
    finish_reason: str | None = None
    round: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    waiting_since: float | None = None
    pending_approvals: list[str] = []
    parent_turn_id: str | None = None
    error: str | None = None


class TurnStore(Protocol):
    """What the runtime needs from a store. Every method is safe to call from any process."""

    def save(self, state: TurnState, events: Sequence[EncodedEvent]) -> None:
        """Write the snapshot and append the (already encoded) events, atomically; on any
        failure nothing is written and ``StoreError`` says why."""

    def load(self, turn_id: str) -> TurnState:
        """The latest snapshot; ``KeyError`` if unknown, ``SnapshotError`` if unreadable."""

    def summaries(self) -> list[TurnSummary]:
        """Every turn, newest first; unreadable ones carry ``error``."""

    def unfinished(self) -> list[str]:
        """Ids of turns that have not ended."""

    def exists(self, turn_id: str) -> bool:
        """Whether the store has a record of the turn (readable or not)."""

    def events(self, turn_id: str, since: int = 0) -> list[TurnEvent]:
        """The turn's events with ``seq >= since``, in order."""

    def event_payloads(self, turn_id: str, since: int = 0, until: int | None = None) -> list[tuple[str, bytes]]:
        """The turn's events with ``since <= seq < until`` as ``(kind, bytes)``, in order."""

    def add_command(self, turn_id: str, command: Message) -> int:
        """Queue a command for the turn; returns its id."""

    def take_commands(self, turn_id: str) -> list[Message]:
        """The turn's queued commands in order, marked as taken."""

    def pending_commands(self, turn_id: str) -> list[Message]:
        """The turn's queued commands in order, not taken."""

    def has_commands(self, turn_id: str) -> bool:
        """Whether any command waits for the turn (cheap: checked at every step)."""

    def turns_with_commands(self) -> list[str]:
        """Turns for which a command waits (polled by each host)."""

    def close(self) -> None: ...
