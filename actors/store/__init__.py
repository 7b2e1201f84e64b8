"""Durable turns: the ``TurnStore`` interface, its SQLite backend, and the files beside a store.

Runs in: every TurnHost (writes), the directory (recovery), the owner and the command line
(reads, and the command inbox).

May import: ``messages`` and the shared modules.

``from actors.store import SQLiteStore`` and the other names of ``sqlite`` keep working.
"""

from .sqlite import EncodedEvent, SQLiteStore, TurnStore, TurnSummary  # the names of the 0.1.0 module actors.store

__all__ = ["EncodedEvent", "SQLiteStore", "TurnStore", "TurnSummary"]
