"""Who owns each durable turn, and which hosts are live, over SQL (``base.Ownership``,
``base.HostRegistry``). The rules are ``ownership``'s; this is their SQL."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

from .base import HostRecord, Owner, Route
from .database import Database
from .ownership import CLAIMABLE, HELD, ORPHANED, held

__all__ = ["SQLHosts", "SQLOwnership"]

_AT_ONCE = 500  # turns claimed in one statement (SQLite takes up to 32,766 parameters)


class SQLOwnership:
    """An ``Ownership`` over a ``Database``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def claim(self, turn_id: str, host_id: str, force: bool = False) -> int | None:
        db = self.db
        condition = "status != 'finished'" if force else CLAIMABLE.format(now=db.now)
        params = (host_id, turn_id) if force else (host_id, turn_id, host_id)
        with db.tx(f"claim turn {turn_id}"):
            row = db.run(
                f"UPDATE turns SET owner = ?, epoch = epoch + 1, claimed_at = {db.now} WHERE turn_id = ?"
                f" AND {condition} RETURNING epoch",
                params,
            ).fetchone()
        return None if row is None else int(row[0])

    def release(self, owner: Owner, turn_id: str) -> None:
        with self.db.tx(f"give back turn {turn_id}"):
            self.db.run(f"UPDATE turns SET owner = NULL WHERE {HELD}", held(turn_id, owner))

    def route(self, turn_id: str) -> Route | None:
        db = self.db
        rows = db.rows(
            "SELECT t.owner, t.epoch, t.status, h.address, t.claimed_at, t.requires FROM turns t"
            f" LEFT JOIN hosts h ON h.host_id = t.owner AND h.lease_until > {db.now} WHERE t.turn_id = ?",
            (turn_id,),
            f"read the route of turn {turn_id}",
        )
        if not rows:
            return None
        owner, epoch, status, address, claimed_at, requires = rows[0]
        return Route(
            turn_id, owner, epoch, status, None if address is None else bytes(address), claimed_at, requires or ""
        )

    def owned_by(self, host_id: str) -> list[str]:
        rows = self.db.rows(
            "SELECT turn_id FROM turns WHERE (owner = ? OR substr(owner, 1, ?) = ?) AND status != 'finished'"
            " ORDER BY created_at",
            (host_id, len(host_id) + 1, host_id + "#"),
        )
        return [r[0] for r in rows]

    def orphans(self) -> list[tuple[str, str]]:
        db = self.db
        return [
            (str(r[0]), str(r[1] or ""))
            for r in db.rows(
                f"SELECT turn_id, requires FROM turns WHERE {ORPHANED.format(now=db.now)} ORDER BY created_at"
            )
        ]

    def claim_many(self, turn_ids: Sequence[str], host_id: str) -> list[tuple[str, int]]:
        db, out = self.db, []
        for i in range(0, len(turn_ids), _AT_ONCE):
            chunk = list(turn_ids[i : i + _AT_ONCE])
            marks = ", ".join("?" * len(chunk))
            with db.tx(f"claim {len(chunk)} turns for {host_id}"):
                rows = db.run(
                    f"UPDATE turns SET owner = ?, epoch = epoch + 1, claimed_at = {db.now} WHERE turn_id IN ({marks})"
                    f" AND {CLAIMABLE.format(now=db.now)} RETURNING turn_id, epoch",
                    (host_id, *chunk, host_id),
                ).fetchall()
            out += [(str(r[0]), int(r[1])) for r in rows]
        return out


class SQLHosts:
    """A ``HostRegistry`` over a ``Database``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def renew(
        self, host_id: str, node: str, address: bytes, lease: float, capabilities: str = "", draining: bool = False
    ) -> float:
        db = self.db
        with db.tx(f"renew the lease of host {host_id}"):
            row = db.run(
                "INSERT INTO hosts (host_id, node, address, lease_until, seen_at, capabilities, draining)"
                f" VALUES (?, ?, ?, {db.now} + ?, {db.now}, ?, ?)"
                " ON CONFLICT (host_id) DO UPDATE SET node=excluded.node, address=excluded.address,"
                " lease_until=excluded.lease_until, seen_at=excluded.seen_at, capabilities=excluded.capabilities,"
                " draining=excluded.draining RETURNING lease_until - seen_at",
                (host_id, node, address, lease, capabilities, int(draining)),
            ).fetchone()
        return float(row[0])

    def drop(self, host_id: str) -> None:
        with self.db.tx(f"drop host {host_id}"):
            self.db.run("DELETE FROM hosts WHERE host_id = ?", (host_id,))

    def live(self) -> list[HostRecord]:
        rows = self.db.rows(
            "SELECT host_id, node, address, lease_until, capabilities, draining FROM hosts"
            f" WHERE lease_until > {self.db.now}"
        )
        return [HostRecord(h, n, bytes(a), until, json.loads(c) if c else {}, bool(d)) for h, n, a, until, c, d in rows]

    def identity(self) -> str:
        db = self.db
        with db.tx("read the store's identity"):
            db.run(
                "INSERT INTO meta (key, value) VALUES ('store_id', ?) ON CONFLICT (key) DO NOTHING", (uuid.uuid4().hex,)
            )
            row = db.run("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
        return str(row[0])
