"""The embedded turn store: one SQLite file, for one machine.

The runtime writes, in one transaction and *before* carrying the decisions out, the turn's
events of each transition and, at the transitions that need one (started, LLM response
recorded, each tool result, paused, each approval decision, stop/cancel marker, finished),
its snapshot. So a call recorded as running was never reported done, and an event a
subscriber saw is always in the log. What every store does is in ``sql`` and ``base``.

Snapshots are ``messages.codec.encode_snapshot`` (msgpack, with a schema version); events
are ``messages.codec.encode``. A record that cannot be read (unknown version, corrupted
bytes) raises ``SnapshotError`` for that turn alone; listing and recovery go on with the
others. A store written by greenroom 0.1.0 (schema 1) is brought to schema 2 when opened;
one from a newer greenroom is refused, saying so. The same holds from schema 2 to 3, and from 3 to 4 (the
sessions' tables, ``sessions``, created empty), from 4 to 5 (``turns.requires`` and
``hosts.capabilities``, empty for the turns and hosts already there), to 6 (the rate limits',
``rates``), to 7 (the session's owner state: ``sessions.SCHEMA_7_COLUMNS``), and to 8 (whether
each host drains: ``hosts.draining``).

Only processes of one machine reach the file: with members, a runtime on a SQLite store
places its (durable) turns on its own hosts. The command line's commands reach a turn
within half a second (its host looks for them that often: SQLite cannot notify).

A write the file refuses for a reason that may pass (``database is locked``, a read-only
file, a full disk: ``sqlite3.OperationalError``) is ``StoreUnavailable``, and the turn that
wrote it waits and writes it again; a corrupted file is a ``StoreError``.

Durability: ``synchronous=NORMAL`` in WAL mode survives the death of any process (SIGKILL),
not the loss of the machine's power.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from ..errors import StoreError
from .base import STORE_SCHEMA, EncodedEvent, TurnStore, TurnSummary, refuse_newer
from .database import Database
from .rates import SCHEMA_6
from .sessions import SCHEMA_7_COLUMNS, SCHEMA_7_QUEUE
from .sql import SQLStore

__all__ = ["EncodedEvent", "SQLiteStore", "TurnStore", "TurnSummary"]  # the last three: see ``base``

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS turns (
    turn_id TEXT PRIMARY KEY, status TEXT NOT NULL, finish_reason TEXT, round INTEGER NOT NULL DEFAULT 0,
    parent_turn_id TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL, waiting_since REAL,
    pending TEXT NOT NULL DEFAULT '', snapshot BLOB NOT NULL, owner TEXT, epoch INTEGER NOT NULL DEFAULT 0,
    claimed_at REAL
);
CREATE TABLE IF NOT EXISTS events (
    turn_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, data BLOB NOT NULL, at REAL,
    PRIMARY KEY (turn_id, seq)
);
CREATE TABLE IF NOT EXISTS commands (
    id INTEGER PRIMARY KEY AUTOINCREMENT, turn_id TEXT NOT NULL, data BLOB NOT NULL, created_at REAL NOT NULL,
    taken_at REAL, reply BLOB, replied_at REAL
);
CREATE INDEX IF NOT EXISTS commands_open ON commands (turn_id, taken_at);
CREATE TABLE IF NOT EXISTS hosts (
    host_id TEXT PRIMARY KEY, node TEXT NOT NULL, address BLOB NOT NULL, lease_until REAL NOT NULL,
    seen_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY, created_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS session_turns (
    session_id TEXT NOT NULL, position INTEGER NOT NULL, turn_id TEXT NOT NULL, added BLOB NOT NULL,
    PRIMARY KEY (session_id, position)
);
"""

_COLUMNS = {  # what every store, 0.1.0's included, has
    "turns": {
        "turn_id", "status", "finish_reason", "round", "parent_turn_id", "created_at", "updated_at",
        "waiting_since", "pending", "snapshot",
    },
    "events": {"turn_id", "seq", "kind", "data"},
    "commands": {"id", "turn_id", "data", "created_at", "taken_at"},
}  # fmt: skip
_TABLES = set(_COLUMNS)
_ADDED = [  # schema 1 -> 2 -> 3: (table, column, its definition)
    ("turns", "owner", "TEXT"),
    ("turns", "claimed_at", "REAL"),
    ("turns", "epoch", "INTEGER NOT NULL DEFAULT 0"),
    ("events", "at", "REAL"),
    ("commands", "reply", "BLOB"),
    ("commands", "replied_at", "REAL"),
]


# schema 4 -> 5, one step of its own: what each turn requires of its host, each host's capabilities
_STEP_5 = [
    ("turns", "requires", "TEXT NOT NULL DEFAULT ''"),
    ("hosts", "capabilities", "TEXT NOT NULL DEFAULT ''"),
]


def _step_5(conn: sqlite3.Connection) -> None:
    for table, column, definition in _STEP_5:
        if column not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")


# schema 7 -> 8, one step of its own: a host that drains says so with each renewal
_STEP_8 = [("hosts", "draining", "INTEGER NOT NULL DEFAULT 0")]


def _step_8(conn: sqlite3.Connection) -> None:
    for table, column, definition in _STEP_8:
        if column not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")


class SQLiteDatabase(Database):
    """One SQLite file. One connection per thread and process, opened lazily."""

    begin = "BEGIN IMMEDIATE"
    errors = (sqlite3.Error,)
    unreachable = (sqlite3.OperationalError,)  # locked, busy, read-only, full, I/O: these may pass

    def __init__(self, path: str | Path) -> None:
        self.path = self.location = str(path)
        self._local = threading.local()
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
            self._migrate(self.conn())
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path} is not a greenroom turn store: {exc}") from None

    def _migrate(self, conn: sqlite3.Connection) -> None:
        existing = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if existing and not _TABLES <= existing:  # never recreate a damaged store's tables empty
            missing = ", ".join(sorted(_TABLES - existing))
            raise StoreError(f"{self.path} is not a greenroom turn store: table(s) {missing} missing")
        if "meta" in existing:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            refuse_newer(str(self.path), int(row[0]) if row is not None else 1)
        conn.execute("BEGIN IMMEDIATE")
        try:
            for table in _TABLES & existing:
                columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
                if not _COLUMNS[table] <= columns:
                    lacking = ", ".join(sorted(_COLUMNS[table] - columns))
                    raise StoreError(f"{self.path} is not a greenroom turn store: table {table!r} lacks {lacking}")
                for t, column, definition in _ADDED:
                    if t == table and column not in columns:
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            _step_5(conn)
            conn.execute(SCHEMA_6)  # schema 4 to 6: the rate limits' table, empty
            # -- schema 7: the session's owner state and its queue (``sessions.SCHEMA_7_COLUMNS``, ``SCHEMA_7_QUEUE``) --
            columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
            for column, definition in SCHEMA_7_COLUMNS:
                if column not in columns:
                    conn.execute(f"ALTER TABLE sessions ADD COLUMN {column} {definition}")
            conn.execute(SCHEMA_7_QUEUE)
            _step_8(conn)  # -- schema 8: hosts.draining --
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(STORE_SCHEMA),),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def conn(self) -> Any:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():  # never across a fork
            try:
                conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open the turn store {self.path}: {exc}") from None
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def drop(self) -> None:
        self.close()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            conn.close()
        self._local.conn = None


class SQLiteStore(SQLStore):
    """A ``TurnStore`` in one SQLite file (``SQLiteStore(path)``)."""

    def __init__(self, path: str | Path) -> None:
        db = SQLiteDatabase(path)
        super().__init__(db)
        self.path = db.path
