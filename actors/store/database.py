"""The database under a store: a connection per thread and process, its SQL dialect, its errors.

The four parts of a store (``log``, ``inbox``, ``owners``) share one ``Database``; a
backend (``sqlite``, ``postgres``) supplies how to connect, its placeholder, its clock and
which of its errors mean the database was not reached (``StoreUnavailable``: retry) rather
than that it refused (``StoreError``: final). The SQL is written once, in the text both
databases understand (``INSERT ... ON CONFLICT``, ``RETURNING``), with ``?`` placeholders.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import StoreError, StoreUnavailable

__all__ = ["Database"]


class Database:
    """A store's database; subclasses supply ``_connect`` and the dialect."""

    location = ""  # a file path, or a URL without its password
    placeholder = "?"
    begin = "BEGIN"
    for_share = ""  # PostgreSQL: lock a turn's row against a takeover until commit
    for_update = ""  # PostgreSQL: lock a row until commit (a rate limit's, a session's; SQLite: BEGIN IMMEDIATE)
    # the database's clock, in seconds since the epoch: leases and claims are compared on
    # one clock, the server's, whatever the clocks of the nodes that write them
    now = "((julianday('now') - 2440587.5) * 86400.0)"
    errors: tuple[type[BaseException], ...] = ()
    unreachable: tuple[type[BaseException], ...] = ()  # of ``errors``: not reached, or no answer

    def conn(self) -> Any:
        """This thread's connection (made when first needed, or again after it was lost)."""
        raise NotImplementedError

    def drop(self) -> None:
        """Forget this thread's connection (it failed): the next call connects again."""

    def notify(self, channel: str, payload: str) -> None:
        """Tell listeners of ``channel`` (inside the transaction under way), where the backend can."""

    def close(self) -> None:
        """Close this thread's connection."""

    # -- running SQL ------------------------------------------------------------------------

    def sql(self, text: str) -> str:
        return text if self.placeholder == "?" else text.replace("?", self.placeholder)

    def run(self, text: str, params: Sequence[Any] = ()) -> Any:
        return self.conn().execute(self.sql(text), tuple(params))

    def many(self, text: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn().cursor().executemany(self.sql(text), [tuple(r) for r in rows])

    def rows(self, text: str, params: Sequence[Any] = (), what: str = "read the store") -> list[Any]:
        """All rows of one statement, outside any transaction of ours."""
        try:
            return list(self.run(text, params).fetchall())
        except self.errors as exc:
            raise self.failure(what, exc) from None

    def one(self, text: str, params: Sequence[Any], what: str) -> Any:
        """The first row of one statement (its own transaction), or None."""
        try:
            return self.run(text, params).fetchone()
        except self.errors as exc:
            raise self.failure(what, exc) from None

    def failure(self, what: str, exc: BaseException) -> StoreError:
        """The error to raise for ``exc``; a connection that failed is dropped."""
        if isinstance(exc, self.unreachable):
            self.drop()
            return StoreUnavailable(f"cannot {what} ({self.location}): {_first_line(exc)}")
        return StoreError(f"cannot {what} ({self.location}): {_first_line(exc)}")

    @contextmanager
    def tx(self, what: str) -> Iterator[None]:
        """One transaction: committed at the end of the block, rolled back on any error; a
        database error becomes ``StoreUnavailable`` or ``StoreError`` saying ``what`` failed."""
        try:
            conn = self.conn()
            conn.execute(self.begin)
        except self.errors as exc:
            raise self.failure(what, exc) from None
        try:
            yield
            conn.execute("COMMIT")
        except BaseException as exc:
            try:
                conn.execute("ROLLBACK")
            except self.errors:
                pass
            if isinstance(exc, StoreError) or not isinstance(exc, (*self.errors, ValueError)):
                raise
            raise self.failure(what, exc) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
