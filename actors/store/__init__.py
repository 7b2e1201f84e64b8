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


def open_store(location: str | os.PathLike[str]) -> TurnStore:
    """The store at ``location``: a ``postgresql://`` URL, or a SQLite file's path."""
    if is_url(location):
        from .postgres import PostgresStore  # psycopg is imported only for a PostgreSQL store

        return PostgresStore(str(location))
    return SQLiteStore(os.fspath(location))
