"""The turn store: snapshots, the event log and a command inbox, durable across restarts.

``TurnStore`` is the small interface a backend implements; ``SQLiteStore`` (standard
library, one file, WAL mode) is the embedded default. The runtime writes, in one
transaction and *before* carrying the decisions out, the turn's snapshot and the events of
each transition: started, LLM response recorded, each tool result, paused for approval,
each approval decision, stop/cancel marker, finished. So a call recorded as running was
never reported done, and an event a subscriber saw is always in the log.

Snapshots are ``messages.codec.encode_snapshot`` (msgpack, with a schema version); events
are ``messages.codec.encode``. A record that cannot be read (unknown version, corrupted
bytes) raises ``SnapshotError`` for that turn alone; listing and recovery go on with the
others.

The command inbox holds commands (approvals, stop, cancel) written by another process,
such as the command line when no runtime answers. A running turn takes them at its next
step; a turn being recovered takes them first.

Durability: ``synchronous=NORMAL`` in WAL mode survives the death of any process (SIGKILL),
not the loss of the machine's power.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from messages import Message, TurnEvent, TurnState, decode, decode_snapshot, encode, encode_snapshot
from messages.codec import CodecError

from ..errors import SnapshotError, StoreError
from .base import EncodedEvent, TurnStore, TurnSummary

__all__ = ["EncodedEvent", "SQLiteStore", "TurnStore", "TurnSummary"]  # the last three: see ``base``


_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    turn_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    finish_reason TEXT,
    round INTEGER NOT NULL DEFAULT 0,
    parent_turn_id TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    waiting_since REAL,
    pending TEXT NOT NULL DEFAULT '',
    snapshot BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    turn_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data BLOB NOT NULL,
    at REAL,
    PRIMARY KEY (turn_id, seq)
);
CREATE TABLE IF NOT EXISTS commands (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    turn_id TEXT NOT NULL,
    data BLOB NOT NULL,
    created_at REAL NOT NULL,
    taken_at REAL
);
CREATE INDEX IF NOT EXISTS commands_open ON commands (turn_id, taken_at);
"""


_COLUMNS = {
    "turns": {
        "turn_id", "status", "finish_reason", "round", "parent_turn_id", "created_at", "updated_at",
        "waiting_since", "pending", "snapshot",
    },
    "events": {"turn_id", "seq", "kind", "data"},
    "commands": {"id", "turn_id", "data", "created_at", "taken_at"},
}  # fmt: skip


def _status(state: TurnState) -> str:
    if state.phase == "finished":
        return "finished"
    if state.phase == "awaiting_approval":
        return "awaiting_approval"
    return "running"


class SQLiteStore:
    """A ``TurnStore`` in one SQLite file. One connection per process, opened lazily."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._local = threading.local()
        self._pid = -1
        if os.path.isdir(self.path):
            raise StoreError(f"the turn store {self.path} is a directory, not a greenroom database")
        if not os.path.exists(self.path):
            # the database (and so its -wal and -shm) is readable by this user only
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                pass
            except OSError as exc:
                raise StoreError(f"cannot create the turn store {self.path}: {exc}") from None
        try:
            conn = self._conn()
            existing = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if existing and not _COLUMNS.keys() <= existing:  # never recreate a damaged store's tables empty
                missing = ", ".join(sorted(_COLUMNS.keys() - existing))
                raise StoreError(f"{self.path} is not a greenroom turn store: table(s) {missing} missing")
            conn.executescript(_SCHEMA)
            for table, columns in _COLUMNS.items():
                found = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
                if not columns <= found:
                    lacking = ", ".join(sorted(columns - found))
                    raise StoreError(f"{self.path} is not a greenroom turn store: table {table!r} lacks {lacking}")
                if table == "events" and "at" not in found:  # a store written before events had times
                    conn.execute("ALTER TABLE events ADD COLUMN at REAL")
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path} is not a greenroom turn store: {exc}") from None

    def _conn(self) -> sqlite3.Connection:
        import os

        conn = getattr(self._local, "conn", None)
        if conn is None or self._pid != os.getpid():  # never share a connection across a fork
            try:
                conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open the turn store {self.path}: {exc}") from None
            self._local.conn = conn
            self._pid = os.getpid()
        return conn

    def save(self, state: TurnState, events: Sequence[EncodedEvent]) -> None:
        conn = self._conn()
        try:
            snapshot = encode_snapshot(state)
        except Exception as exc:  # nothing was begun: nothing to roll back
            raise StoreError(f"cannot encode turn {state.turn_id}: {exc}") from None
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                """INSERT INTO turns (turn_id, status, finish_reason, round, parent_turn_id, created_at,
                                      updated_at, waiting_since, pending, snapshot)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT(turn_id) DO UPDATE SET status=excluded.status, finish_reason=excluded.finish_reason,
                       round=excluded.round, updated_at=excluded.updated_at, waiting_since=excluded.waiting_since,
                       pending=excluded.pending, snapshot=excluded.snapshot""",
                (
                    state.turn_id,
                    _status(state),
                    state.finish_reason,
                    state.round,
                    state.parent_turn_id,
                    state.created_at,
                    state.updated_at or time.time(),
                    state.waiting_since,
                    ",".join(state.pending_approvals),
                    snapshot,
                ),
            )
            if events:
                now = time.time()  # when the transition was written, before anything was carried out
                conn.executemany(
                    "INSERT OR IGNORE INTO events (turn_id, seq, kind, data, at) VALUES (?, ?, ?, ?, ?)",
                    [(state.turn_id, seq, kind, data, now) for seq, kind, data in events],
                )
            conn.execute("COMMIT")
        except Exception as exc:  # whatever failed, the transaction must not stay open
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise StoreError(f"cannot write turn {state.turn_id} to {self.path}: {exc}") from None

    def load(self, turn_id: str) -> TurnState:
        row = self._conn().execute("SELECT snapshot FROM turns WHERE turn_id = ?", (turn_id,)).fetchone()
        if row is None:
            raise KeyError(turn_id)
        try:
            return decode_snapshot(row[0])
        except CodecError as exc:
            raise SnapshotError(f"turn {turn_id}: {exc}") from None

    def summaries(self) -> list[TurnSummary]:
        out = []
        rows = self._conn().execute(
            "SELECT turn_id, status, finish_reason, round, created_at, updated_at, waiting_since, pending, parent_turn_id, snapshot "
            "FROM turns ORDER BY created_at DESC"
        )
        for turn_id, status, reason, round_, created, updated, waiting, pending, parent, blob in rows:
            error = None
            try:
                decode_snapshot(blob)
            except CodecError as exc:
                status, error = "unreadable", str(exc)
            out.append(
                TurnSummary(
                    turn_id=turn_id,
                    status=status,
                    finish_reason=reason,
                    round=round_,
                    created_at=created,
                    updated_at=updated,
                    waiting_since=waiting,
                    pending_approvals=[p for p in pending.split(",") if p],
                    parent_turn_id=parent,
                    error=error,
                )
            )
        return out

    def exists(self, turn_id: str) -> bool:
        return self._conn().execute("SELECT 1 FROM turns WHERE turn_id = ?", (turn_id,)).fetchone() is not None

    def unfinished(self) -> list[str]:
        rows = self._conn().execute("SELECT turn_id FROM turns WHERE status != 'finished' ORDER BY created_at")
        return [r[0] for r in rows]

    def events(self, turn_id: str, since: int = 0) -> list[TurnEvent]:
        rows = self._conn().execute(
            "SELECT seq, data FROM events WHERE turn_id = ? AND seq >= ? ORDER BY seq", (turn_id, since)
        )
        out = []
        for seq, data in rows:
            try:
                event = decode(data)
            except CodecError as exc:
                raise SnapshotError(f"turn {turn_id}: event {seq}: {exc}") from None
            out.append(event)
        return out  # type: ignore[return-value]

    def timed_events(self, turn_id: str, since: int = 0) -> list[tuple[TurnEvent, float | None]]:
        """The turn's events with ``seq >= since`` and when each was written (``time.time()``;
        None for events written before the store kept times), in order."""
        rows = self._conn().execute(
            "SELECT seq, data, at FROM events WHERE turn_id = ? AND seq >= ? ORDER BY seq", (turn_id, since)
        )
        out: list[tuple[TurnEvent, float | None]] = []
        for seq, data, at in rows:
            try:
                out.append((decode(data), at))  # type: ignore[arg-type]
            except CodecError as exc:
                raise SnapshotError(f"turn {turn_id}: event {seq}: {exc}") from None
        return out

    def version(self, turn_id: str | None = None) -> tuple[float, int] | None:
        """A cheap value that changes whenever the store (or one turn) changes: the latest
        ``updated_at`` and the number of turns (or the turn's last ``seq``); None for an
        unknown turn."""
        conn = self._conn()
        if turn_id is None:
            count, latest = conn.execute("SELECT count(*), max(updated_at) FROM turns").fetchone()
            return (latest or 0.0, count)
        row = conn.execute(
            "SELECT updated_at, (SELECT max(seq) FROM events WHERE turn_id = ?) FROM turns WHERE turn_id = ?",
            (turn_id, turn_id),
        ).fetchone()
        return None if row is None else (row[0], -1 if row[1] is None else row[1])

    def event_payloads(self, turn_id: str, since: int = 0, until: int | None = None) -> list[tuple[str, bytes]]:
        try:
            rows = self._conn().execute(
                "SELECT kind, data FROM events WHERE turn_id = ? AND seq >= ? AND seq < ? ORDER BY seq",
                (turn_id, since, until if until is not None else 2**62),
            )
            return [(kind, bytes(data)) for kind, data in rows]
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the events of turn {turn_id} from {self.path}: {exc}") from None

    def turns_with_commands(self) -> list[str]:
        try:
            rows = self._conn().execute("SELECT DISTINCT turn_id FROM commands WHERE taken_at IS NULL")
            return [r[0] for r in rows]
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the command inbox of {self.path}: {exc}") from None

    def add_command(self, turn_id: str, command: Message) -> int:
        cur = self._conn().execute(
            "INSERT INTO commands (turn_id, data, created_at) VALUES (?, ?, ?)", (turn_id, encode(command), time.time())
        )
        return int(cur.lastrowid or 0)

    def take_commands(self, turn_id: str) -> list[Message]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            rows = conn.execute(
                "SELECT id, data FROM commands WHERE turn_id = ? AND taken_at IS NULL ORDER BY id", (turn_id,)
            ).fetchall()
            if rows:
                conn.executemany("UPDATE commands SET taken_at = ? WHERE id = ?", [(time.time(), r[0]) for r in rows])
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise StoreError(f"cannot read commands of turn {turn_id}: {exc}") from None
        out = []
        for _, data in rows:
            try:
                out.append(decode(data))
            except CodecError:
                continue  # a command that cannot be read is dropped, not retried for ever
        return out

    def pending_commands(self, turn_id: str) -> list[Message]:
        """The turn's queued commands, not taken (for checking a new one against them)."""
        rows = (
            self._conn()
            .execute("SELECT data FROM commands WHERE turn_id = ? AND taken_at IS NULL ORDER BY id", (turn_id,))
            .fetchall()
        )
        out = []
        for (data,) in rows:
            try:
                out.append(decode(data))
            except CodecError:
                continue
        return out

    def has_commands(self, turn_id: str) -> bool:
        row = (
            self._conn()
            .execute("SELECT 1 FROM commands WHERE turn_id = ? AND taken_at IS NULL LIMIT 1", (turn_id,))
            .fetchone()
        )
        return row is not None

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
