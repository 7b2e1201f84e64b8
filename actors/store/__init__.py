"""Durable turns: the ``TurnStore`` interface (``base``), written once over SQL (``sql``) for two
backends: SQLite (``sqlite``, one file, the embedded default) and PostgreSQL (``postgres``,
one server every node reaches); and the files beside a SQLite store (``files``).

Runs in: every TurnHost (writes), the directory (recovery), the owner and the command line
(reads, and the command inbox).

May import: ``messages`` and the shared modules.

``from actors.store import SQLiteStore`` and the other names of the 0.1.0 module stay.
"""

from __future__ import annotations

import os

from .base import EncodedEvent, TurnStore, TurnSummary, is_url
from .sqlite import SQLiteStore

__all__ = ["EncodedEvent", "SQLiteStore", "TurnStore", "TurnSummary", "open_store"]


def open_store(location: str | os.PathLike[str], *, create: bool = True, quick: bool = False) -> TurnStore:
    """The store at ``location``: a ``postgresql://`` URL, or a SQLite file's path. A URL's
    password is kept apart (``urls``): the store's ``location`` and its errors never show it.
    ``create=False``: a PostgreSQL database without greenroom's tables is refused, not set up
    (a SQLite file's caller checks that it exists). ``quick``: a server that does not answer
    fails a call within about 2 s (a TurnHost's store: its lease must not wait on a lost link)."""
    if is_url(location):
        from .postgres import PostgresStore  # psycopg is imported only for a PostgreSQL store

        return PostgresStore(str(location), create=create, connect_timeout=2.0 if quick else 10.0, quick=quick)
    return SQLiteStore(os.fspath(location))
