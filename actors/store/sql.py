"""The turn store over SQL, written once for both backends (``sqlite``, ``postgres``).

A backend supplies its connection, its placeholder and its errors; everything a store does
is here, in the SQL both databases understand (``INSERT ... ON CONFLICT``, ``RETURNING``).
What each method guarantees is said in ``base.TurnStore``; how:

- a write with an owner is one transaction that first updates the turn's row on condition
  that its owner and epoch are still the writer's (the row is then locked until commit, so
  a host taking the turn over waits for it, and then raises the epoch); no row updated, and
  no new row inserted, means another host holds the turn: ``Fenced``, nothing written;
- events are appended with ``ON CONFLICT DO NOTHING`` on ``(turn_id, seq)``: writing the
  same transition twice writes it once;
- a snapshot is written only at the transitions that need one; text deltas are appended
  alone, so ``load`` takes ``next_seq`` past the last stored event.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from messages import ControlReply, Message, TurnEvent, TurnState, decode, decode_snapshot, encode, encode_snapshot
from messages.codec import CodecError

from ..errors import Fenced, SnapshotError, StoreError
from .base import EncodedEvent, HostRecord, Owner, Route, TurnSummary, status_of

__all__ = ["SQLStore"]

_LIVE = "(SELECT host_id FROM hosts WHERE lease_until > {now})"


class SQLStore:
    """A ``TurnStore`` over a DB-API connection; subclasses supply ``_conn`` and the dialect."""

    location = ""
    _placeholder = "?"
    _begin = "BEGIN"
    _for_share = ""  # PostgreSQL: lock the turn's row against a takeover until commit
    # the database's clock, in seconds since the epoch: leases are compared on one clock, the
    # server's, whatever the clocks of the nodes that write them
    _now = "((julianday('now') - 2440587.5) * 86400.0)"
    _errors: tuple[type[BaseException], ...] = ()

    # -- what a backend supplies ----------------------------------------------------------

    def _conn(self) -> Any:
        raise NotImplementedError

    def _notify(self, turn_id: str) -> None:
        """Tell the turn's owner that a command waits (inside the transaction that queued it)."""

    def _notify_reply(self, command_id: int) -> None:
        """Tell whoever queued a command that its reply is recorded (inside that transaction)."""

    def _save_held(self, turn_id: str, fields: tuple[Any, ...], events: Sequence[EncodedEvent], owner: Owner) -> bool:
        """Write a snapshot and its events in one round trip if ``owner`` holds the turn; False
        (nothing written) sends ``save`` down its transaction. A backend without such a
        statement (SQLite, in this process) keeps the default."""
        return False

    def _append_held(self, turn_id: str, events: Sequence[EncodedEvent], owner: Owner) -> bool:
        """Append events in one round trip if ``owner`` holds the turn; False as above."""
        return False

    # -- plumbing -------------------------------------------------------------------------

    def _sql(self, sql: str) -> str:
        return sql if self._placeholder == "?" else sql.replace("?", self._placeholder)

    def _run(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn().execute(self._sql(sql), tuple(params))

    def _rows(self, sql: str, params: Sequence[Any] = (), what: str = "read the store") -> list[Any]:
        try:
            return list(self._run(sql, params).fetchall())
        except self._errors as exc:
            raise StoreError(f"cannot {what} ({self.location}): {exc}") from None

    @contextmanager
    def _tx(self, what: str) -> Iterator[None]:
        conn = self._conn()
        try:
            conn.execute(self._begin)
            yield
            conn.execute("COMMIT")
        except BaseException as exc:
            try:
                conn.execute("ROLLBACK")
            except self._errors:
                pass
            if isinstance(exc, StoreError) or not isinstance(exc, (*self._errors, ValueError)):
                raise
            raise StoreError(f"cannot {what} ({self.location}): {exc}") from None

    # -- turns ----------------------------------------------------------------------------

    def save(self, state: TurnState, events: Sequence[EncodedEvent], owner: Owner | None = None) -> None:
        try:
            snapshot = encode_snapshot(state)
        except Exception as exc:  # noqa: BLE001 - nothing was begun: nothing to roll back
            raise StoreError(f"cannot encode turn {state.turn_id}: {exc}") from None
        s = state
        fields = (status_of(s), s.finish_reason, s.round, s.updated_at or time.time(), s.waiting_since,
                  ",".join(s.pending_approvals), snapshot)  # fmt: skip
        insert = (
            "INSERT INTO turns (status, finish_reason, round, updated_at, waiting_since, pending, snapshot,"
            " turn_id, parent_turn_id, created_at, owner, epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        new = (s.turn_id, s.parent_turn_id, s.created_at)
        if owner is not None and self._save_held(s.turn_id, fields, events, owner):
            return
        with self._tx(f"write turn {s.turn_id}"):
            if owner is None:
                self._run(
                    insert + " ON CONFLICT (turn_id) DO UPDATE SET status=excluded.status, finish_reason="
                    "excluded.finish_reason, round=excluded.round, updated_at=excluded.updated_at, waiting_since="
                    "excluded.waiting_since, pending=excluded.pending, snapshot=excluded.snapshot",
                    (*fields, *new, None, 0),
                )
            else:
                updated = self._run(
                    "UPDATE turns SET status=?, finish_reason=?, round=?, updated_at=?, waiting_since=?, pending=?,"
                    " snapshot=? WHERE turn_id=? AND owner=? AND epoch=?",
                    (*fields, s.turn_id, owner.host_id, owner.epoch),
                ).rowcount
                if updated == 0:
                    inserted = self._run(
                        insert + " ON CONFLICT (turn_id) DO NOTHING", (*fields, *new, owner.host_id, owner.epoch)
                    ).rowcount
                    if inserted == 0:
                        raise self._fenced(s.turn_id, owner)
            self._insert_events(s.turn_id, events)

    def append(self, turn_id: str, events: Sequence[EncodedEvent], owner: Owner | None = None) -> None:
        if not events or (owner is not None and self._append_held(turn_id, events, owner)):
            return
        with self._tx(f"write the events of turn {turn_id}"):
            if owner is not None:
                held = self._run(
                    "SELECT 1 FROM turns WHERE turn_id=? AND owner=? AND epoch=?" + self._for_share,
                    (turn_id, owner.host_id, owner.epoch),
                ).fetchone()
                if held is None:
                    raise self._fenced(turn_id, owner)
            self._insert_events(turn_id, events)

    def _insert_events(self, turn_id: str, events: Sequence[EncodedEvent]) -> None:
        if events:
            now = time.time()  # when the transition was written, before anything was carried out
            self._conn().cursor().executemany(
                self._sql(
                    "INSERT INTO events (turn_id, seq, kind, data, at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
                ),
                [(turn_id, seq, kind, data, now) for seq, kind, data in events],
            )

    def _fenced(self, turn_id: str, owner: Owner) -> Fenced:
        row = self._run("SELECT owner, epoch FROM turns WHERE turn_id=?", (turn_id,)).fetchone()
        now = f"{row[0]} at epoch {row[1]}" if row is not None else "nobody"
        return Fenced(f"turn {turn_id} is no longer {owner.host_id}'s at epoch {owner.epoch}: it is {now}'s")

    def load(self, turn_id: str) -> TurnState:
        rows = self._rows(
            "SELECT snapshot, (SELECT max(seq) FROM events WHERE turn_id = ?) FROM turns WHERE turn_id = ?",
            (turn_id, turn_id),
            f"read turn {turn_id}",
        )
        if not rows:
            raise KeyError(turn_id)
        try:
            state = decode_snapshot(bytes(rows[0][0]))
        except CodecError as exc:
            raise SnapshotError(f"turn {turn_id}: {exc}") from None
        if rows[0][1] is not None:  # deltas appended after the snapshot keep their numbers
            state.next_seq = max(state.next_seq, rows[0][1] + 1)
        return state

    def summaries(self) -> list[TurnSummary]:
        out = []
        rows = self._rows(
            "SELECT turn_id, status, finish_reason, round, created_at, updated_at, waiting_since, pending,"
            " parent_turn_id, snapshot, owner FROM turns ORDER BY created_at DESC"
        )
        for turn_id, status, reason, round_, created, updated, waiting, pending, parent, blob, owner in rows:
            error = None
            try:
                decode_snapshot(bytes(blob))
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
                    owner=owner,
                )
            )
        return out

    def exists(self, turn_id: str) -> bool:
        return bool(self._rows("SELECT 1 FROM turns WHERE turn_id = ?", (turn_id,)))

    def unfinished(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT turn_id FROM turns WHERE status != 'finished' ORDER BY created_at")]

    # -- events ---------------------------------------------------------------------------

    def events(self, turn_id: str, since: int = 0) -> list[TurnEvent]:
        return [e for e, _ in self.timed_events(turn_id, since)]

    def timed_events(self, turn_id: str, since: int = 0) -> list[tuple[TurnEvent, float | None]]:
        """The turn's events with ``seq >= since`` and when each was written (``time.time()``;
        None for events written before the store kept times), in order."""
        rows = self._rows(
            "SELECT seq, data, at FROM events WHERE turn_id = ? AND seq >= ? ORDER BY seq", (turn_id, since)
        )
        out: list[tuple[TurnEvent, float | None]] = []
        for seq, data, at in rows:
            try:
                out.append((decode(bytes(data)), at))  # type: ignore[arg-type]
            except CodecError as exc:
                raise SnapshotError(f"turn {turn_id}: event {seq}: {exc}") from None
        return out

    def event_payloads(self, turn_id: str, since: int = 0, until: int | None = None) -> list[tuple[str, bytes]]:
        rows = self._rows(
            "SELECT kind, data FROM events WHERE turn_id = ? AND seq >= ? AND seq < ? ORDER BY seq",
            (turn_id, since, until if until is not None else 2**62),
            f"read the events of turn {turn_id}",
        )
        return [(kind, bytes(data)) for kind, data in rows]

    def version(self, turn_id: str | None = None) -> tuple[float, int] | None:
        """A cheap value that changes whenever the store (or one turn) changes: the latest
        ``updated_at`` and the number of turns (or the turn's last ``seq``); None for an
        unknown turn."""
        if turn_id is None:
            count, latest = self._rows("SELECT count(*), max(updated_at) FROM turns")[0]
            return (latest or 0.0, count)
        rows = self._rows(
            "SELECT updated_at, (SELECT max(seq) FROM events WHERE turn_id = ?) FROM turns WHERE turn_id = ?",
            (turn_id, turn_id),
        )
        return None if not rows else (rows[0][0], -1 if rows[0][1] is None else rows[0][1])

    # -- the command inbox ----------------------------------------------------------------

    def add_command(self, turn_id: str, command: Message) -> int:
        with self._tx(f"queue a command for turn {turn_id}"):
            row = self._run(
                "INSERT INTO commands (turn_id, data, created_at) VALUES (?, ?, ?) RETURNING id",
                (turn_id, encode(command), time.time()),
            ).fetchone()
            self._notify(turn_id)
        return int(row[0])

    def take_commands(self, turn_id: str) -> list[tuple[int, Message]]:
        with self._tx(f"read the commands of turn {turn_id}"):
            rows = self._run(
                "UPDATE commands SET taken_at = ? WHERE turn_id = ? AND taken_at IS NULL RETURNING id, data",
                (time.time(), turn_id),
            ).fetchall()
        return [(int(i), c) for i, c in _commands(sorted(rows))]

    def record_reply(self, command_id: int, reply: ControlReply) -> None:
        with self._tx(f"record the reply to command {command_id}"):
            self._run(
                "UPDATE commands SET reply = ?, replied_at = ? WHERE id = ?", (encode(reply), time.time(), command_id)
            )
            self._notify_reply(command_id)

    def reply_to(self, command_id: int) -> ControlReply | None:
        """The reply recorded for a queued command once a turn applied it (None: not yet)."""
        rows = self._rows("SELECT reply FROM commands WHERE id = ? AND reply IS NOT NULL", (command_id,))
        if not rows:
            return None
        reply = decode(bytes(rows[0][0]))
        return reply if isinstance(reply, ControlReply) else None

    def prune_commands(self, older_than: float) -> int:
        """Drop the commands taken more than ``older_than`` seconds ago (their senders have had
        their replies), and those never taken whose turn has finished as long ago."""
        cutoff = time.time() - older_than
        with self._tx("prune the command inbox"):
            done = self._run(
                "DELETE FROM commands WHERE (taken_at IS NOT NULL AND taken_at < ?) OR (taken_at IS NULL"
                " AND created_at < ? AND turn_id IN (SELECT turn_id FROM turns WHERE status = 'finished'))",
                (cutoff, cutoff),
            )
            return int(done.rowcount or 0)

    def wait_reply(self, command_id: int, timeout: float) -> ControlReply | None:
        """The reply to a queued command once recorded; None if none was within ``timeout`` s.
        (Here by looking every 0.1 s; a store that can notify waits for its notification.)"""
        deadline = time.monotonic() + timeout
        while (reply := self.reply_to(command_id)) is None and time.monotonic() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        return reply

    def pending_commands(self, turn_id: str) -> list[Message]:
        """The turn's queued commands, not taken (for checking a new one against them)."""
        rows = self._rows(
            "SELECT id, data FROM commands WHERE turn_id = ? AND taken_at IS NULL ORDER BY id", (turn_id,)
        )
        return [c for _, c in _commands(rows)]

    def has_commands(self, turn_id: str) -> bool:
        return bool(self._rows("SELECT 1 FROM commands WHERE turn_id = ? AND taken_at IS NULL LIMIT 1", (turn_id,)))

    def turns_with_commands(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT DISTINCT turn_id FROM commands WHERE taken_at IS NULL")]

    def listen(self, on_command: Callable[[str], None]) -> bool:
        return False  # a backend that can notify says so

    # -- owners and hosts -----------------------------------------------------------------

    def claim(self, turn_id: str, host_id: str, force: bool = False) -> int | None:
        gone = "" if force else f" AND (owner IS NULL OR owner = ? OR owner NOT IN {_LIVE.format(now=self._now)})"
        params: tuple[Any, ...] = (host_id, turn_id) + (() if force else (host_id,))
        with self._tx(f"claim turn {turn_id}"):
            row = self._run(
                "UPDATE turns SET owner = ?, epoch = epoch + 1 WHERE turn_id = ? AND status != 'finished'"
                + gone
                + " RETURNING epoch",
                params,
            ).fetchone()
        return None if row is None else int(row[0])

    def route(self, turn_id: str) -> Route | None:
        rows = self._rows(
            "SELECT t.owner, t.epoch, t.status, h.address FROM turns t"
            f" LEFT JOIN hosts h ON h.host_id = t.owner AND h.lease_until > {self._now} WHERE t.turn_id = ?",
            (turn_id,),
        )
        if not rows:
            return None
        owner, epoch, status, address = rows[0]
        return Route(turn_id, owner, epoch, status, None if address is None else bytes(address))

    def owned_by(self, host_id: str) -> list[str]:
        rows = self._rows(
            "SELECT turn_id FROM turns WHERE owner = ? AND status != 'finished' ORDER BY created_at", (host_id,)
        )
        return [r[0] for r in rows]

    def identity(self) -> str:
        with self._tx("read the store's identity"):
            self._run(
                "INSERT INTO meta (key, value) VALUES ('store_id', ?) ON CONFLICT (key) DO NOTHING", (uuid.uuid4().hex,)
            )
            row = self._run("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
        return str(row[0])

    def renew_host(self, host_id: str, node: str, address: bytes, lease: float) -> None:
        with self._tx(f"renew the lease of host {host_id}"):
            self._run(
                "INSERT INTO hosts (host_id, node, address, lease_until, seen_at)"
                f" VALUES (?, ?, ?, {self._now} + ?, {self._now})"
                " ON CONFLICT (host_id) DO UPDATE SET node=excluded.node, address=excluded.address,"
                " lease_until=excluded.lease_until, seen_at=excluded.seen_at",
                (host_id, node, address, lease),
            )

    def drop_host(self, host_id: str) -> None:
        with self._tx(f"drop host {host_id}"):
            self._run("DELETE FROM hosts WHERE host_id = ?", (host_id,))

    def live_hosts(self) -> list[HostRecord]:
        rows = self._rows(f"SELECT host_id, node, address, lease_until FROM hosts WHERE lease_until > {self._now}")
        return [HostRecord(h, n, bytes(a), until) for h, n, a, until in rows]

    def orphans(self) -> list[str]:
        rows = self._rows(
            "SELECT turn_id FROM turns WHERE status != 'finished'"
            f" AND (owner IS NULL OR owner NOT IN {_LIVE.format(now=self._now)}) ORDER BY created_at"
        )
        return [r[0] for r in rows]


def _commands(rows: Sequence[Any]) -> list[tuple[Any, Message]]:
    out = []
    for command_id, data in rows:
        try:
            out.append((command_id, decode(bytes(data))))
        except CodecError:
            continue  # a command that cannot be read is dropped, not retried for ever
    return out
