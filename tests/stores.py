"""Helpers for tests that run on both stores (``store_location``: a SQLite path or a PostgreSQL URL)."""

from __future__ import annotations

from typing import Any

from collections.abc import Iterable

from actors.store import TurnStore, open_store
from actors.store.base import EncodedEvent, Owner, Snapshot, TurnWrite, is_url
from actors.store.ownership import LEASE
from messages import TurnState

from .helpers import wait_until


def sql(location: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement (``?`` placeholders) on the store's database directly, committed; its rows."""
    if is_url(location):
        import psycopg

        with psycopg.connect(location, autocommit=True) as conn:
            cur = conn.execute(statement.replace("?", "%s"), params)
            return list(cur.fetchall()) if cur.description else []
    import sqlite3

    conn = sqlite3.connect(location)
    try:
        rows = list(conn.execute(statement, params).fetchall())
        conn.commit()
        return rows
    finally:
        conn.close()


def save(store: TurnStore, state: TurnState, events: Iterable[EncodedEvent] = (), owner: Owner | None = None) -> None:
    """Write ``state`` with ``events`` as a turn's transition does."""
    store.log.write(TurnWrite(state.turn_id, tuple(events), Snapshot.of(state), owner))


def append(store: TurnStore, turn_id: str, events: Iterable[EncodedEvent], owner: Owner | None = None) -> None:
    """Write ``events`` alone, as a turn's text deltas are."""
    store.log.write(TurnWrite(turn_id, tuple(events), None, owner))


def leases_run_out(location: str) -> None:
    """Wait until no host holds a lease in the store (a killed runtime's hosts hold theirs
    ``LEASE`` s more, in a SQLite file as on PostgreSQL; their turns are taken over then)."""
    store = open_store(location)
    try:
        assert wait_until(lambda: not store.hosts.live(), timeout=LEASE + 5), "a host still holds a lease"
    finally:
        store.close()


def recovered(location: str, rt: Any, turn_ids: list[str]) -> bool:
    """``rt`` recovered ``turn_ids`` at start: on SQLite the store's unfinished turns; on
    PostgreSQL those its hosts owned and the orphans (their owner's lease had run out) that
    rendezvous hashing gave them among the live hosts."""
    return bool(rt.recovered == turn_ids)
