"""The turn store on PostgreSQL: one store every node reaches (``greenroom[postgres]``, psycopg 3).

``Runtime(store="postgresql://user@db:5432/greenroom")``, ``greenroom node --store ...`` and
``greenroom turns --store ...`` all take the same URL. A password in it is never shown nor
sent: ``location`` (and every error) is the URL without it, and the password stays in this
process and the ones it forks (``urls``); a database that cannot be reached is a
``StoreError`` naming that URL and what failed. The store has the same guarantees as the SQLite one (``sql``,
``base``), and uses what the database is good at:

- transactions at READ COMMITTED, where a write of a turn locks its row until it commits, so
  a host taking a turn over waits for the write in flight and then raises the epoch;
- ``LISTEN``/``NOTIFY`` for the command inbox: a command queued for a turn (by the command
  line, say) wakes the host that owns it at once (``listen``, channel ``greenroom_commands``),
  instead of a poll; its recorded reply wakes whoever waits for it (``wait_reply``, channel
  ``greenroom_replies``);
- the schema is created and migrated by greenroom itself under an advisory lock (any number
  of nodes may start at once), with its version in ``meta``; a newer one is refused, and so
  is a store with a table missing (never recreated empty).

Leases and event times use each writer's clock: nodes' clocks must agree to well within a
lease (NTP does).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from messages import ControlReply

from ..errors import ConfigurationError, StoreError
from ..logs import logger
from .base import STORE_SCHEMA, EncodedEvent, Owner, refuse_newer
from .sql import SQLStore
from .urls import connectable, keep, redacted, scrub

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ConfigurationError(f"a PostgreSQL store needs psycopg 3: pip install 'greenroom[postgres]' ({exc})") from None

__all__ = ["CHANNEL", "REPLIES", "PostgresStore", "redacted"]

CHANNEL = "greenroom_commands"  # payload: the turn id a command was queued for
REPLIES = "greenroom_replies"  # payload: the id of the command whose reply was recorded
_LOCK = 7_362_551_013  # the advisory lock that serializes schema changes

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS turns (
    turn_id TEXT PRIMARY KEY, status TEXT NOT NULL, finish_reason TEXT, round INTEGER NOT NULL DEFAULT 0,
    parent_turn_id TEXT, created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    waiting_since DOUBLE PRECISION, pending TEXT NOT NULL DEFAULT '', snapshot BYTEA NOT NULL, owner TEXT,
    epoch INTEGER NOT NULL DEFAULT 0
);
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
)
"""


_TABLES = ("turns", "events", "commands")  # what every greenroom store has had
_UNNEST = "unnest(CAST(? AS INTEGER[]), CAST(? AS TEXT[]), CAST(? AS BYTEA[])) AS v(seq, kind, data)"


def _columns(events: Sequence[EncodedEvent]) -> tuple[list[int], list[str], list[bytes]]:
    return [e[0] for e in events], [e[1] for e in events], [bytes(e[2]) for e in events]


log = logger("greenroom.store")


class PostgresStore(SQLStore):
    """A ``TurnStore`` on a PostgreSQL server. One connection per thread and process."""

    _placeholder = "%s"
    _for_share = " FOR SHARE"
    _now = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
    _errors = (psycopg.Error,)

    def __init__(self, url: str, connect_timeout: float = 10.0, create: bool = True, quick: bool = False) -> None:
        """Connect and bring the schema to this greenroom's (``create=False``: refuse a
        database without one); a ``StoreError`` that names the URL, never its password,
        says what failed. ``quick``: data sent and not acknowledged for 1.5 s fails its call
        (TCP's ``tcp_user_timeout``), as do 3 s of keepalives unanswered, instead of TCP's
        minutes."""
        self.location = keep(url)  # the URL without its password (``urls``)
        self._timeout = connect_timeout
        self._links: dict[str, Any] = (
            {"tcp_user_timeout": 1500, "keepalives": 1, "keepalives_idle": 1, "keepalives_interval": 1,
             "keepalives_count": 2} if quick else {}
        )  # fmt: skip
        self._local = threading.local()
        self._listening: threading.Event | None = None
        self._migrate(create)

    def _connect(self) -> Any:
        try:
            return psycopg.connect(
                connectable(self.location), autocommit=True, connect_timeout=max(1, int(self._timeout)), **self._links
            )
        except psycopg.Error as exc:
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(f"cannot reach the turn store at {self.location}: {scrub(why, self.location)}") from None

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed or getattr(self._local, "pid", None) != os.getpid():  # never across a fork
            conn = self._connect()
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _migrate(self, create: bool) -> None:
        with self._tx(f"prepare the turn store at {self.location}"):
            self._run("SELECT pg_advisory_xact_lock(?)", (_LOCK,))
            found = self._run("SELECT to_regclass('meta') IS NOT NULL").fetchone()[0]
            if not found and not create:
                raise StoreError(f"no turn store at {self.location}: the database has no greenroom tables")
            if found:
                gone = [t for t in _TABLES if self._run("SELECT to_regclass(?) IS NULL", (t,)).fetchone()[0]]
                if gone:  # never recreate a damaged store's tables empty
                    raise StoreError(
                        f"{self.location} is not a greenroom turn store: table(s) {', '.join(gone)} missing"
                    )
                row = self._run("SELECT value FROM meta WHERE key = 'schema'").fetchone()
                refuse_newer(self.location, int(row[0]) if row is not None else 1)
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._run(statement)
            self._run(
                "INSERT INTO meta (key, value) VALUES ('schema', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(STORE_SCHEMA),),
            )

    # one statement, so one round trip, for the writes of a held turn (most of them): the
    # turn's row is updated (or, for events alone, locked FOR SHARE) on condition of owner and
    # epoch, and the events are inserted only if it was, in the statement's own transaction.
    # Nothing written (a new turn, fenced, or every event already there) goes down the
    # transactional path of ``SQLStore``, which tells these apart.

    def _save_held(self, turn_id: str, fields: tuple[Any, ...], events: Sequence[EncodedEvent], owner: Owner) -> bool:
        row = self._one(
            "WITH u AS (UPDATE turns SET status=?, finish_reason=?, round=?, updated_at=?, waiting_since=?, pending=?,"
            " snapshot=? WHERE turn_id=? AND owner=? AND epoch=? RETURNING turn_id), e AS (INSERT INTO events"
            " (turn_id, seq, kind, data, at) SELECT u.turn_id, v.seq, v.kind, v.data, ? FROM u, " + _UNNEST +
            " ON CONFLICT DO NOTHING) SELECT count(*) FROM u",
            (*fields, turn_id, owner.host_id, owner.epoch, time.time(), *_columns(events)),
            f"write turn {turn_id}",
        )  # fmt: skip
        return row[0] == 1

    def _append_held(self, turn_id: str, events: Sequence[EncodedEvent], owner: Owner) -> bool:
        inserted = self._one(
            "WITH e AS (INSERT INTO events (turn_id, seq, kind, data, at) SELECT ?, v.seq, v.kind, v.data, ? FROM "
            + _UNNEST + " WHERE EXISTS (SELECT 1 FROM turns WHERE turn_id=? AND owner=? AND epoch=? FOR SHARE)"
            " ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) FROM e",
            (turn_id, time.time(), *_columns(events), turn_id, owner.host_id, owner.epoch),
            f"write the events of turn {turn_id}",
        )  # fmt: skip
        return inserted[0] == len(events)

    def _one(self, sql: str, params: Sequence[Any], what: str) -> Any:
        try:
            return self._run(sql, params).fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"cannot {what} ({self.location}): {exc}") from None

    def _notify(self, turn_id: str) -> None:
        self._run("SELECT pg_notify(?, ?)", (CHANNEL, turn_id))

    def _notify_reply(self, command_id: int) -> None:
        self._run("SELECT pg_notify(?, ?)", (REPLIES, str(command_id)))

    def wait_reply(self, command_id: int, timeout: float) -> ControlReply | None:
        """The reply to a queued command, woken by its notification (and looking again each
        second, should one be missed); None if none was recorded within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        conn = self._connect()
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
            raise StoreError(f"cannot wait for the reply to command {command_id} ({self.location}): {exc}") from None
        finally:
            conn.close()

    def listen(self, on_command: Callable[[str], None]) -> bool:
        """``on_command(turn_id)`` from a thread of its own, at each command queued for a turn."""
        if self._listening is not None:
            return True
        stop = self._listening = threading.Event()
        conn = self._connect()
        conn.execute(f"LISTEN {CHANNEL}")

        def serve() -> None:
            try:
                while not stop.is_set():
                    for note in conn.notifies(timeout=0.5):
                        on_command(note.payload)
            except Exception:  # noqa: BLE001 - the connection went away: hosts also look at every step
                if not stop.is_set():
                    log().warning("the turn store's notifications stopped (%s)", self.location, exc_info=True)
            finally:
                conn.close()

        threading.Thread(target=serve, name="greenroom store notifications", daemon=True).start()
        return True

    def close(self) -> None:
        if self._listening is not None:
            self._listening.set()
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            conn.close()
        self._local.conn = None
