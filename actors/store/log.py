"""The turns' log over SQL: snapshots and events, one transition at a time (``base.TurnLog``).

How ``write`` keeps its guarantees:

- a transition with an owner holds only while the turn's row is still that owner's at its
  epoch (``ownership.HELD``): the row is updated on that condition (or, for events alone,
  locked ``FOR SHARE`` on it) and locked until commit, so a host taking the turn over waits
  for the write in flight and then raises the epoch; no row held, and no new row inserted,
  means another host holds the turn: ``Fenced``, nothing written;
- events are appended with ``ON CONFLICT DO NOTHING`` on ``(turn_id, seq)``, and the
  commands a transition applied are marked taken and answered in the same transaction
  (``inbox.settle``): a transition written twice (a retry after an answer that never came)
  is stored once;
- a snapshot is written only at the transitions that need one; text deltas are appended
  alone, so ``load`` takes ``next_seq`` past the last stored event.
"""

from __future__ import annotations

import time

from messages import TurnEvent, TurnState, decode, decode_snapshot
from messages.codec import CodecError

from ..errors import Fenced, SnapshotError
from .base import Owner, TurnSummary, TurnWrite
from .database import Database
from .inbox import settle
from .ownership import HELD, held

__all__ = ["SQLLog"]

_INSERT = (
    "INSERT INTO turns (status, finish_reason, round, updated_at, waiting_since, pending, snapshot,"
    " parent_turn_id, created_at, requires, turn_id, owner, epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPDATE = "UPDATE turns SET status=?, finish_reason=?, round=?, updated_at=?, waiting_since=?, pending=?, snapshot=?"


class SQLLog:
    """A ``TurnLog`` over a ``Database``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- writing ------------------------------------------------------------------------------

    def write(self, write: TurnWrite) -> None:
        if write.empty or (write.owner is not None and self._held(write)):
            return
        w, db = write, self.db
        with db.tx(f"write turn {w.turn_id}"):
            s = w.snapshot
            if s is not None:
                fields = (s.status, s.finish_reason, s.round, s.updated_at, s.waiting_since, s.pending, s.data)
                new = (s.parent_turn_id, s.created_at, s.requires, w.turn_id)
                if w.owner is None:
                    db.run(
                        _INSERT + " ON CONFLICT (turn_id) DO UPDATE SET status=excluded.status, finish_reason="
                        "excluded.finish_reason, round=excluded.round, updated_at=excluded.updated_at,"
                        " waiting_since=excluded.waiting_since, pending=excluded.pending, snapshot=excluded.snapshot",
                        (*fields, *new, None, 0),
                    )
                elif db.run(f"{_UPDATE} WHERE {HELD}", (*fields, *held(w.turn_id, w.owner))).rowcount == 0:
                    inserted = db.run(
                        _INSERT + " ON CONFLICT (turn_id) DO NOTHING", (*fields, *new, w.owner.host_id, w.owner.epoch)
                    ).rowcount
                    if inserted == 0:
                        raise self._fenced(w.turn_id, w.owner)
            elif w.owner is not None:
                if db.run(f"SELECT 1 FROM turns WHERE {HELD}" + db.for_share, held(w.turn_id, w.owner)).fetchone() is None:
                    raise self._fenced(w.turn_id, w.owner)
            self._events(w)
            settle(db, w.taken, w.replies)

    def _held(self, write: TurnWrite) -> bool:
        """Write a held turn's transition in one round trip, if the backend can (PostgreSQL):
        True if done; False (nothing written) sends it down ``write``'s transaction, which
        tells a new turn, a fenced writer and events already stored apart."""
        return False

    def _events(self, w: TurnWrite) -> None:
        if w.events:
            now = time.time()  # when the transition was written, before anything was carried out
            self.db.many(
                "INSERT INTO events (turn_id, seq, kind, data, at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [(w.turn_id, seq, kind, data, now) for seq, kind, data in w.events],
            )

    def _fenced(self, turn_id: str, owner: Owner) -> Fenced:
        row = self.db.run("SELECT owner, epoch FROM turns WHERE turn_id=?", (turn_id,)).fetchone()
        now = f"{row[0]} at epoch {row[1]}" if row is not None else "nobody"
        return Fenced(f"turn {turn_id} is no longer {owner.host_id}'s at epoch {owner.epoch}: it is {now}'s")

    # -- reading ------------------------------------------------------------------------------

    def load(self, turn_id: str) -> TurnState:
        rows = self.db.rows(
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
        rows = self.db.rows(
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
        return bool(self.db.rows("SELECT 1 FROM turns WHERE turn_id = ?", (turn_id,)))

    def unfinished(self) -> list[str]:
        rows = self.db.rows("SELECT turn_id FROM turns WHERE status != 'finished' ORDER BY created_at")
        return [r[0] for r in rows]

    def events(self, turn_id: str, since: int = 0) -> list[TurnEvent]:
        return [e for e, _ in self.timed_events(turn_id, since)]

    def timed_events(self, turn_id: str, since: int = 0) -> list[tuple[TurnEvent, float | None]]:
        """The turn's events with ``seq >= since`` and when each was written (``time.time()``;
        None for events written before the store kept times), in order."""
        rows = self.db.rows(
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
        rows = self.db.rows(
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
            count, latest = self.db.rows("SELECT count(*), max(updated_at) FROM turns")[0]
            return (latest or 0.0, count)
        rows = self.db.rows(
            "SELECT updated_at, (SELECT max(seq) FROM events WHERE turn_id = ?) FROM turns WHERE turn_id = ?",
            (turn_id, turn_id),
        )
        return None if not rows else (rows[0][0], -1 if rows[0][1] is None else rows[0][1])
