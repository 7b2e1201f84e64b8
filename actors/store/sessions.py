"""Sessions over SQL (``base.SessionLog``): a conversation as the ordered turns it is made of.

Two tables (store schema 4): ``sessions`` (one row a session) and ``session_turns`` (one
row a turn of it: its ``position``, its ``turn_id`` and ``added``, the messages that turn
added to the session's history, encoded as one msgpack array of ``ChatMessage``). A
session's history is the concatenation of its turns' ``added``, by position.

Schema 7 (``SCHEMA_7_COLUMNS``, ``SCHEMA_7_QUEUE``, applied by each backend's migration): the session's owner state on
its row (``running``, ``opening``, ``dropping``) and the messages waiting for it,
``session_queue`` (one row a message: its id, its ``position`` in the queue, its messages).
``decide`` reads and writes them in one transaction that holds the session's row.

``append`` is idempotent by ``(session_id, position, turn_id)``: written twice it is stored
once. A position already taken by another turn (a second process appended to the same
session in between) raises ``SessionConflict`` and writes nothing, so a history is never
interleaved; the caller reloads and decides again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from messages import ChatMessage, encode
from messages.codec import CodecError, decode_many, join_encoded

from ..errors import SnapshotError, StoreError
from .database import Database
from .session_log import SessionOwned, SessionRecord, SessionSummary, T

__all__ = ["SCHEMA_7_COLUMNS", "SCHEMA_7_QUEUE", "SQLSessions", "SessionConflict"]

# store schema 7, the same on both backends (BLOB is BYTEA on PostgreSQL): the columns added to
# ``sessions``, and the queue's table
SCHEMA_7_COLUMNS = [("running", "TEXT"), ("opening", "INTEGER NOT NULL DEFAULT 0"), ("dropping", "TEXT")]
SCHEMA_7_QUEUE = (
    "CREATE TABLE IF NOT EXISTS session_queue (session_id TEXT NOT NULL, message_id TEXT NOT NULL,"
    " position INTEGER NOT NULL, messages BLOB NOT NULL, PRIMARY KEY (session_id, message_id))"
)


class SessionConflict(StoreError):
    """The session's next position was taken by another turn meanwhile: nothing was written."""


class SQLSessions:
    """A ``SessionLog`` over a ``Database``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, session_id: str) -> None:
        now = time.time()
        with self.db.tx(f"create session {session_id}"):
            self.db.run(
                "INSERT INTO sessions (session_id, created_at, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (session_id) DO NOTHING",
                (session_id, now, now),
            )

    def exists(self, session_id: str) -> bool:
        rows = self.db.rows("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,), f"read session {session_id}")
        return bool(rows)

    def load(self, session_id: str) -> SessionRecord:
        what = f"read session {session_id}"
        head = self.db.rows("SELECT created_at, updated_at FROM sessions WHERE session_id = ?", (session_id,), what)
        if not head:
            raise KeyError(session_id)
        rows = self.db.rows(
            "SELECT position, turn_id, added FROM session_turns WHERE session_id = ? ORDER BY position",
            (session_id,),
            what,
        )
        turns, messages = _history(session_id, rows)
        owner = self.db.rows("SELECT running FROM sessions WHERE session_id = ?", (session_id,), what)
        queued = self.db.rows(
            "SELECT message_id FROM session_queue WHERE session_id = ? ORDER BY position", (session_id,), what
        )
        created, updated = float(head[0][0]), float(head[0][1])
        running = str(owner[0][0]) if owner and owner[0][0] is not None else None
        return SessionRecord(session_id, turns, messages, created, updated, running, [str(q[0]) for q in queued])

    def decide(self, session_id: str, decide: Callable[[SessionOwned], T]) -> T:
        db = self.db
        with db.tx(f"decide for session {session_id}"):
            head = db.run(
                "SELECT running, opening, dropping, updated_at FROM sessions WHERE session_id = ?" + db.for_update,
                (session_id,),
            ).fetchone()
            if head is None:
                raise KeyError(session_id)
            rows = db.run(
                "SELECT position, turn_id, added FROM session_turns WHERE session_id = ? ORDER BY position",
                (session_id,),
            ).fetchall()
            turns, messages = _history(session_id, rows)
            queue = [
                (str(m), _decoded(session_id, -1, bytes(data)))
                for m, data in db.run(
                    "SELECT message_id, messages FROM session_queue WHERE session_id = ? ORDER BY position",
                    (session_id,),
                ).fetchall()
            ]
            running, opening, dropping, updated = head
            owned = SessionOwned(
                session_id, list(turns), list(messages), running, int(opening or 0), dropping, list(queue)
            )
            owned.decided_at = float(updated)
            before = (len(turns), running, owned.opening, dropping, [m for m, _ in queue])
            out = decide(owned)
            after = (len(owned.turns), owned.running, owned.opening, owned.dropping, [m for m, _ in owned.queue])
            if after != before:  # a decision that changed nothing writes nothing (updated_at stays)
                self._write_back(owned, len(turns), before[4])
        return out

    def _write_back(self, owned: SessionOwned, had: int, queued: list[str]) -> None:
        """Inside ``decide``'s transaction: the turns it appended, its owner state, its queue."""
        db, sid = self.db, owned.session_id
        for i, (turn_id, added) in enumerate(zip(owned.turns[had:], owned.added, strict=True)):
            db.run(
                "INSERT INTO session_turns (session_id, position, turn_id, added) VALUES (?, ?, ?, ?)",
                (sid, had + i, turn_id, join_encoded([encode(m) for m in added])),
            )
        ids = [m for m, _ in owned.queue]
        for gone in set(queued) - set(ids):
            db.run("DELETE FROM session_queue WHERE session_id = ? AND message_id = ?", (sid, gone))
        for position, (message_id, data) in enumerate(owned.queue):
            if message_id in queued:
                db.run(
                    "UPDATE session_queue SET position = ? WHERE session_id = ? AND message_id = ?",
                    (position, sid, message_id),
                )
            else:
                db.run(
                    "INSERT INTO session_queue (session_id, message_id, position, messages) VALUES (?, ?, ?, ?)",
                    (sid, message_id, position, join_encoded([encode(m) for m in data])),
                )
        db.run(
            "UPDATE sessions SET running = ?, opening = ?, dropping = ?, updated_at = ? WHERE session_id = ?",
            (owned.running, owned.opening, owned.dropping, time.time(), sid),
        )

    def append(self, session_id: str, position: int, turn_id: str, added: Sequence[ChatMessage]) -> None:
        db = self.db
        data = join_encoded([encode(m) for m in added])
        with db.tx(f"append turn {turn_id} to session {session_id}"):
            taken = db.run(
                "SELECT turn_id FROM session_turns WHERE session_id = ? AND position = ?", (session_id, position)
            ).fetchone()
            if taken is not None:
                if str(taken[0]) == turn_id:
                    return  # written already
                raise SessionConflict(
                    f"session {session_id} changed meanwhile: its turn {position} is {taken[0]}, not {turn_id}"
                )
            count = db.run("SELECT count(*) FROM session_turns WHERE session_id = ?", (session_id,)).fetchone()
            if int(count[0]) != position:
                raise SessionConflict(
                    f"session {session_id} changed meanwhile: it has {count[0]} turns, not {position}"
                )
            db.run(
                "INSERT INTO session_turns (session_id, position, turn_id, added) VALUES (?, ?, ?, ?)",
                (session_id, position, turn_id, data),
            )
            db.run("UPDATE sessions SET updated_at = ? WHERE session_id = ?", (time.time(), session_id))

    def summaries(self) -> list[SessionSummary]:
        rows = self.db.rows(
            "SELECT s.session_id, s.created_at, s.updated_at, (SELECT count(*) FROM session_turns t"
            " WHERE t.session_id = s.session_id) FROM sessions s ORDER BY s.updated_at DESC"
        )
        return [SessionSummary(str(r[0]), int(r[3]), float(r[1]), float(r[2])) for r in rows]


def _history(session_id: str, rows: Sequence[Sequence[Any]]) -> tuple[list[str], list[ChatMessage]]:
    """The turns and the history of ``session_turns`` rows, by position."""
    turns: list[str] = []
    messages: list[ChatMessage] = []
    for position, turn_id, added in rows:
        if position != len(turns):
            raise SnapshotError(f"session {session_id}: position {len(turns)} is missing")
        turns.append(str(turn_id))
        messages.extend(_decoded(session_id, len(turns) - 1, bytes(added)))
    return turns, messages


def _decoded(session_id: str, position: int, data: bytes) -> list[ChatMessage]:
    try:
        out = decode_many(data)
    except CodecError as exc:
        raise SnapshotError(f"session {session_id}, turn {position}: {exc}") from None
    if not all(isinstance(m, ChatMessage) for m in out):
        raise SnapshotError(f"session {session_id}, turn {position}: not a list of chat messages")
    return [m for m in out if isinstance(m, ChatMessage)]
