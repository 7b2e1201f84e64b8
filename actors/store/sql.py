"""A turn store over SQL, for both backends: its four parts over one ``Database``.

``SQLStore(db)`` is a ``base.TurnStore``: ``log`` (``log.SQLLog``), ``inbox``
(``inbox.SQLInbox``), ``owners`` and ``hosts`` (``owners``), ``sessions`` (``sessions``), ``rates`` (``rates``). A backend (``sqlite``,
``postgres``) makes the ``Database`` and may give its own log or inbox where it has a
better way (PostgreSQL: one-statement writes, ``LISTEN``/``NOTIFY``).
"""

from __future__ import annotations

from .database import Database
from .inbox import SQLInbox
from .log import SQLLog
from .owners import SQLHosts, SQLOwnership
from .rates import SQLRates
from .sessions import SQLSessions

__all__ = ["SQLStore"]


class SQLStore:
    """A ``TurnStore``: see the module docstring."""

    def __init__(self, db: Database, log: SQLLog | None = None, inbox: SQLInbox | None = None) -> None:
        self.db = db
        self.location = db.location
        self.log = log or SQLLog(db)
        self.inbox = inbox or SQLInbox(db)
        self.owners = SQLOwnership(db)
        self.hosts = SQLHosts(db)
        self.sessions = SQLSessions(db)
        self.rates = SQLRates(db)

    def close(self) -> None:
        self.inbox.close()
        self.db.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.location}>"
