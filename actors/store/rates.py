"""The store's rate limits: one row per (provider, key), changed under its lock (store schema 6).

``SQLRates.update(key, change)`` reads the row of ``key`` (the provider's base URL and the
key's fingerprint: never the key), calls ``change(text, now)`` with the row's text and the
database's clock, and writes what it returns, in one transaction: on PostgreSQL the row is
locked (``SELECT ... FOR UPDATE``) until it commits, so two hosts that ask at once are
served one after the other, each seeing the other's request; SQLite's ``BEGIN IMMEDIATE``
does the same for the processes of one machine. What the text means (a sliding log of the
requests and tokens, a pause) is the caller's (``providers.rates``); this module only keeps
it. Errors are the store's: ``StoreUnavailable`` when it was not reached.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .database import Database

__all__ = ["SCHEMA_6", "Rates", "SQLRates"]

# store schema 6: the rate limits (the same text for both databases)
SCHEMA_6 = "CREATE TABLE IF NOT EXISTS rate_limits (key TEXT PRIMARY KEY, state TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL)"


class Rates(Protocol):
    """The providers' rate limits: a row of text per key, changed under its lock (``rates``)."""

    def update(self, key: str, change: Callable[[str | None, float], tuple[str, Any]]) -> Any:
        """``change(text, now)`` on the row (None: new) and the database's clock, in one transaction."""


class SQLRates:
    """The ``rate_limits`` table: see the module docstring."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def update(self, key: str, change: Callable[[str | None, float], tuple[str, Any]]) -> Any:
        db = self.db
        with db.tx(f"update the rate limit {key}"):
            db.run(
                f"INSERT INTO rate_limits (key, state, updated_at) VALUES (?, '', {db.now}) ON CONFLICT DO NOTHING",
                (key,),
            )
            text, now = db.run(
                f"SELECT state, {db.now} FROM rate_limits WHERE key = ?{db.for_update}", (key,)
            ).fetchone()
            written, result = change(text or None, float(now))
            db.run(f"UPDATE rate_limits SET state = ?, updated_at = {db.now} WHERE key = ?", (written, key))
        return result
