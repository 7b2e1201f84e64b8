"""The turn store on PostgreSQL: one store every node reaches (``greenroom[postgres]``, psycopg 3).

``Runtime(store="postgresql://user@db:5432/greenroom")``, ``greenroom node --store ...`` and
``greenroom turns --store ...`` all take the same URL, libpq's multi-host form included
(``postgresql://db1,db2/greenroom?target_session_attrs=read-write``: after a failover the
next connection finds the new primary). A password in it is never shown nor sent:
``location`` (and every error) is the URL without it, and the password stays in this
process and the ones it forks (``urls``). The store has the same guarantees as the SQLite
one (``base``, ``log``, ``inbox``), and uses what the database is good at:

- transactions at READ COMMITTED, where a write of a turn locks its row until it commits, so
  a host taking a turn over waits for the write in flight and then raises the epoch; the
  write of a held turn is one statement (one round trip);
- ``LISTEN``/``NOTIFY`` for the command inbox: a command queued for a turn wakes the host
  that owns it at once (``listen``, channel ``greenroom_commands``); the listening
  connection is made again whenever it drops, and while it is down its host polls; a
  recorded reply wakes whoever waits for it (``wait_reply``, channel ``greenroom_replies``);
- the schema is created and migrated by greenroom itself under an advisory lock (any number
  of nodes may start at once), with its version in ``meta``; a newer one is refused, and so
  is a store with a table missing (never recreated empty). Schema 3 to 4 adds the sessions'
  tables (``sessions``), empty; 4 to 5 (``_STEP_5``) what each turn requires of its host
  and each host's capabilities; 6 the rate limits' (``rates``), empty; 7 the session's
  owner state (``sessions.SCHEMA_7_COLUMNS``, ``SCHEMA_7_QUEUE``); 8 (``_STEP_8``) whether
  each host drains (``hosts.draining``).

Every connection is bounded in time: connecting (``connect_timeout``), data sent and not
acknowledged (TCP's ``tcp_user_timeout``), a silent peer (keepalives), a statement or an
idle transaction on the server (``statement_timeout``, ``idle_in_transaction_session_timeout``),
so a lost link fails a call within seconds; a server that is paused (it answers TCP but
nothing else) holds a call until it resumes, which is why a TurnHost never calls the store
on its actor thread. A call that fails for want of the server is ``StoreUnavailable``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from messages import ControlReply

from ..errors import ConfigurationError, StoreError, StoreUnavailable
from ..logs import logger
from .base import STORE_SCHEMA, EncodedEvent, TurnWrite, refuse_newer
from .database import Database
from .inbox import COMMANDS, REPLIES, SQLInbox
from .log import SQLLog
from .ownership import HELD, held
from .rates import SCHEMA_6
from .sessions import SCHEMA_7_COLUMNS, SCHEMA_7_QUEUE
from .sql import SQLStore
from .urls import connectable, keep, redacted, scrub

try:
    import psycopg
    import psycopg.errors
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ConfigurationError(f"a PostgreSQL store needs psycopg 3: pip install '.[postgres]' ({exc})") from None

__all__ = ["CHANNEL", "REPLIES", "PostgresStore", "redacted"]

CHANNEL = COMMANDS  # payload: the turn id a command was queued for
_LOCK = 7_362_551_013  # the advisory lock that serializes schema changes

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS turns (
    turn_id TEXT PRIMARY KEY, status TEXT NOT NULL, finish_reason TEXT, round INTEGER NOT NULL DEFAULT 0,
    parent_turn_id TEXT, created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    waiting_since DOUBLE PRECISION, pending TEXT NOT NULL DEFAULT '', snapshot BYTEA NOT NULL, owner TEXT,
    epoch INTEGER NOT NULL DEFAULT 0, claimed_at DOUBLE PRECISION
);
ALTER TABLE turns ADD COLUMN IF NOT EXISTS claimed_at DOUBLE PRECISION;
CREATE INDEX IF NOT EXISTS turns_open ON turns (status, owner);
CREATE TABLE IF NOT EXISTS events (
    turn_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, data BYTEA NOT NULL, at DOUBLE PRECISION,
    PRIMARY KEY (turn_id, seq)
);
CREATE TABLE IF NOT EXISTS commands (
    id BIGSERIAL PRIMARY KEY, turn_id TEXT NOT NULL, data BYTEA NOT NULL, created_at DOUBLE PRECISION NOT NULL,
    taken_at DOUBLE PRECISION, reply BYTEA, replied_at DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS commands_open ON commands (turn_id, taken_at);
CREATE TABLE IF NOT EXISTS hosts (
    host_id TEXT PRIMARY KEY, node TEXT NOT NULL, address BYTEA NOT NULL, lease_until DOUBLE PRECISION NOT NULL,
    seen_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY, created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS session_turns (
    session_id TEXT NOT NULL, position INTEGER NOT NULL, turn_id TEXT NOT NULL, added BYTEA NOT NULL,
    PRIMARY KEY (session_id, position)
)
"""

# schema 4 -> 5, one step of its own: what each turn requires of its host, each host's capabilities
_STEP_5 = """
ALTER TABLE turns ADD COLUMN IF NOT EXISTS requires TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN IF NOT EXISTS capabilities TEXT NOT NULL DEFAULT ''
"""

# schema 7 -> 8, one step of its own: a host that drains says so with each renewal
_STEP_8 = "ALTER TABLE hosts ADD COLUMN IF NOT EXISTS draining INTEGER NOT NULL DEFAULT 0"

_TABLES = ("turns", "events", "commands")  # what every greenroom store has had
_UNNEST = "unnest(CAST(? AS INTEGER[]), CAST(? AS TEXT[]), CAST(? AS BYTEA[])) AS v(seq, kind, data)"


def _columns(events: tuple[EncodedEvent, ...]) -> tuple[list[int], list[str], list[bytes]]:
    return [e[0] for e in events], [e[1] for e in events], [bytes(e[2]) for e in events]


log = logger("greenroom.store")


class PostgresDatabase(Database):
    """A PostgreSQL server. One connection per thread and process."""

    placeholder = "%s"
    for_share = " FOR SHARE"
    for_update = " FOR UPDATE"
    now = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
    errors = (psycopg.Error,)
    # not reached, no answer, shut down, a standby after a failover, a conflict worth retrying
    unreachable = (
        psycopg.OperationalError,
        psycopg.InterfaceError,
        psycopg.errors.ReadOnlySqlTransaction,
        psycopg.errors.SerializationFailure,
        psycopg.errors.DeadlockDetected,
    )

    def __init__(self, url: str, connect_timeout: float, quick: bool) -> None:
        self.location = keep(url)  # the URL without its password (``urls``)
        self._timeout = connect_timeout
        self._links: dict[str, Any] = links(quick)
        self._local = threading.local()

    def connect(self, **extra: Any) -> Any:
        """A new connection (autocommit: ``tx`` begins its own transactions)."""
        try:
            return psycopg.connect(
                connectable(self.location), autocommit=True, connect_timeout=max(1, int(self._timeout)),
                **self._links, **extra,
            )  # fmt: skip
        except psycopg.Error as exc:
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            failed = StoreUnavailable if isinstance(exc, self.unreachable) else StoreError
            raise failed(f"cannot reach the turn store at {self.location}: {scrub(why, self.location)}") from None

    def failure(self, what: str, exc: BaseException) -> StoreError:
        failed = super().failure(what, exc)
        return type(failed)(scrub(str(failed), self.location))

    def conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed or getattr(self._local, "pid", None) != os.getpid():  # never across a fork
            conn = self.connect()
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def drop(self) -> None:
        conn, self._local.conn = getattr(self._local, "conn", None), None
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            try:
                conn.close()
            except psycopg.Error:
                pass

    def notify(self, channel: str, payload: str) -> None:
        self.run("SELECT pg_notify(?, ?)", (channel, payload))

    def close(self) -> None:
        self.drop()

    def migrate(self, create: bool) -> None:
        with self.tx(f"prepare the turn store at {self.location}"):
            self.run("SELECT pg_advisory_xact_lock(?)", (_LOCK,))
            found = self.run("SELECT to_regclass('meta') IS NOT NULL").fetchone()[0]
            if not found and not create:
                raise StoreError(f"no turn store at {self.location}: the database has no greenroom tables")
            if found:
                gone = [t for t in _TABLES if self.run("SELECT to_regclass(?) IS NULL", (t,)).fetchone()[0]]
                if gone:  # never recreate a damaged store's tables empty
                    raise StoreError(
                        f"{self.location} is not a greenroom turn store: table(s) {', '.join(gone)} missing"
                    )
                row = self.run("SELECT value FROM meta WHERE key = 'schema'").fetchone()
                refuse_newer(self.location, int(row[0]) if row is not None else 1)
                if row is not None and int(row[0]) == STORE_SCHEMA:
                    return  # current: no ALTER TABLE, which would lock the hosts' table against every renewal
            for statement in (_SCHEMA + ";" + _STEP_5).split(";"):
                if statement.strip():
                    self.run(statement)
            self.run(SCHEMA_6)  # schema 4 to 6: the rate limits' table, empty
            # -- schema 7: the session's owner state and its queue (``sessions.SCHEMA_7_COLUMNS``, ``SCHEMA_7_QUEUE``) --
            for column, definition in SCHEMA_7_COLUMNS:
                self.run(f"ALTER TABLE sessions ADD COLUMN IF NOT EXISTS {column} {definition}")
            self.run(SCHEMA_7_QUEUE.replace("BLOB", "BYTEA"))
            self.run(_STEP_8)  # -- schema 8: hosts.draining --
            self.run(
                "INSERT INTO meta (key, value) VALUES ('schema', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(STORE_SCHEMA),),
            )


def links(quick: bool) -> dict[str, Any]:
    """Connection parameters that bound every call in time: ``quick`` (a TurnHost's) fails a
    call whose data is not acknowledged within 1.5 s, or whose peer is silent for 3 s;
    otherwise within 5 s and 10 s. The server ends a statement after 10 s and a transaction
    left idle after 10 s (its locks are freed for whoever waits)."""
    user_timeout, idle, count = (1500, 1, 2) if quick else (5000, 2, 4)
    return {
        "tcp_user_timeout": user_timeout, "keepalives": 1, "keepalives_idle": idle, "keepalives_interval": 1,
        "keepalives_count": count, "options": "-c statement_timeout=10000 -c idle_in_transaction_session_timeout=10000",
    }  # fmt: skip


class PostgresLog(SQLLog):
    """The log, with a held turn's write in one statement (so one round trip): the turn's row
    is updated (or, for events alone, locked FOR SHARE) on condition of ``HELD``, and the
    events are inserted only if it was, in the statement's own transaction."""

    def _held(self, write: TurnWrite) -> bool:
        owner = write.owner
        if write.taken or write.replies or owner is None:
            return False
        w, s, db = write, write.snapshot, self.db
        if s is not None:
            row = db.one(
                "WITH u AS (UPDATE turns SET status=?, finish_reason=?, round=?, updated_at=?, waiting_since=?,"
                f" pending=?, snapshot=? WHERE {HELD} RETURNING turn_id), e AS (INSERT INTO events"
                " (turn_id, seq, kind, data, at) SELECT u.turn_id, v.seq, v.kind, v.data, ? FROM u, " + _UNNEST +
                " ON CONFLICT DO NOTHING) SELECT count(*) FROM u",
                (s.status, s.finish_reason, s.round, s.updated_at, s.waiting_since, s.pending, s.data,
                 *held(w.turn_id, owner), time.time(), *_columns(w.events)),
                f"write turn {w.turn_id}",
            )  # fmt: skip
            return bool(row[0] == 1)
        inserted = db.one(
            "WITH e AS (INSERT INTO events (turn_id, seq, kind, data, at) SELECT ?, v.seq, v.kind, v.data, ? FROM "
            + _UNNEST + f" WHERE EXISTS (SELECT 1 FROM turns WHERE {HELD} FOR SHARE)"
            " ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) FROM e",
            (w.turn_id, time.time(), *_columns(w.events), *held(w.turn_id, owner)),
            f"write the events of turn {w.turn_id}",
        )  # fmt: skip
        return bool(inserted[0] == len(w.events))


class PostgresInbox(SQLInbox):
    """The inbox, woken by ``NOTIFY``."""

    db: PostgresDatabase

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(db)
        self._listening: threading.Event | None = None

    def wait_reply(self, command_id: int, timeout: float) -> ControlReply | None:
        """The reply to a queued command, woken by its notification (and looking again each
        second, should one be missed); None if none was recorded within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        conn = self.db.connect()
        try:
            conn.execute(f"LISTEN {REPLIES}")  # before looking: a reply recorded from now on is notified
            while (reply := self.reply_to(command_id)) is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                for note in conn.notifies(timeout=min(left, 1.0)):
                    if note.payload == str(command_id):
                        break
            return reply
        except psycopg.Error as exc:
            raise self.db.failure(f"wait for the reply to command {command_id}", exc) from None
        finally:
            conn.close()

    def listen(self, on_command: Callable[[str], None], on_state: Callable[[bool], None]) -> bool:
        """``on_command(turn_id)`` from a thread of its own, at each command queued for a turn;
        the connection is made again whenever it drops (every 0.2 s, then up to every 2 s),
        with ``on_state(False)`` meanwhile and ``on_state(True)`` once it listens again."""
        if self._listening is not None:
            return True
        stop = self._listening = threading.Event()
        threading.Thread(
            target=self._serve, args=(stop, on_command, on_state), name="greenroom store notifications", daemon=True
        ).start()
        return True

    def _serve(
        self, stop: threading.Event, on_command: Callable[[str], None], on_state: Callable[[bool], None]
    ) -> None:
        pause, up = 0.2, True  # taken as listening until the first attempt says otherwise
        while not stop.is_set():
            try:
                conn = self.db.connect()
            except StoreError as exc:
                if up:
                    log().warning("the turn store's notifications stopped: %s; looking every tick", exc)
                    up = False
                    on_state(False)
                stop.wait(pause)
                pause = min(2.0, pause * 2)
                continue
            try:
                conn.execute(f"LISTEN {CHANNEL}")
                if not up:
                    log().info("the turn store's notifications are back (%s)", self.db.location)
                on_state(True)  # also after the first connection: look once for what came before it
                up, pause = True, 0.2
                while not stop.is_set():
                    for note in conn.notifies(timeout=0.5):
                        on_command(note.payload)
            except Exception as exc:  # noqa: BLE001 - the connection went away: made again
                if not stop.is_set():
                    log().warning("the turn store's notifications stopped (%s): %s", self.db.location, exc)
                    up = False
                    on_state(False)
            finally:
                try:
                    conn.close()
                except psycopg.Error:
                    pass

    def close(self) -> None:
        if self._listening is not None:
            self._listening.set()


class PostgresStore(SQLStore):
    """A ``TurnStore`` on a PostgreSQL server; see the module docstring."""

    def __init__(self, url: str, connect_timeout: float = 10.0, create: bool = True, quick: bool = False) -> None:
        """Connect and bring the schema to this greenroom's (``create=False``: refuse a
        database without one); a ``StoreError`` that names the URL, never its password,
        says what failed. ``quick``: a TurnHost's connections, bounded tighter (``links``)."""
        db = PostgresDatabase(url, connect_timeout, quick)
        db.migrate(create)
        super().__init__(db, PostgresLog(db), PostgresInbox(db))
