"""A PostgreSQL store's URL: the form that may be shown or sent, and its password kept apart.

A password in a store's URL (``postgresql://user:secret@db/greenroom``, or ``?password=``)
never appears in a message, a log line, an error, a snapshot or the runtime's attributes:
``redacted(url)`` is the URL without it, which is what ``TurnStore.location``, errors and
``Runtime.store_path`` show and what travels to a runtime's hosts in their configuration.
``keep(url)`` remembers the password in this process's memory, keyed by the redacted URL,
and returns the redacted URL; ``connectable(url)`` gives it back for connecting. Processes
forked afterwards (a runtime's hosts are forked from the process that started it) inherit
what was kept, as they inherit the transport's key. Without a password in the URL, libpq's
own sources apply as usual: ``PGPASSWORD``, ``PGPASSFILE`` or ``~/.pgpass``.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["connectable", "keep", "redacted", "scrub"]

_KEPT: dict[str, str] = {}  # redacted URL -> the password it came with


def _split(url: str) -> tuple[str, str | None]:
    """``(url without its password, the password or None)``."""
    try:
        parts = urlsplit(url)
        password = None if parts.password is None else unquote(parts.password)
    except ValueError:  # a malformed netloc (a bad port, say): show only its scheme and host part
        return (url.split("://", 1)[0] + "://" + url.rsplit("@", 1)[1]) if "@" in url else url, None
    query = parse_qsl(parts.query, keep_blank_values=True)
    in_query = [v for k, v in query if k == "password"]
    if password is None and in_query:
        password = in_query[-1]
    netloc = parts.netloc
    if parts.password is not None:
        user = f"{parts.netloc.rsplit('@', 1)[0].split(':', 1)[0]}@"
        netloc = user + parts.netloc.rsplit("@", 1)[1]
    rest = urlencode([(k, v) for k, v in query if k != "password"]) if in_query else parts.query
    shown = urlunsplit(parts._replace(netloc=netloc, query=rest))
    return (url, None) if password is None else (shown, password or None)


def redacted(url: str) -> str:
    """``url`` without its password: what messages, logs and errors may show."""
    return _split(url)[0]


def keep(url: str) -> str:
    """Remember ``url``'s password for this process and the ones it forks; the redacted URL."""
    shown, password = _split(url)
    if password is not None:
        _KEPT[shown] = password
    return shown


def connectable(url: str) -> str:
    """``url`` with the password kept for it (``keep``), if it has none of its own."""
    shown, password = _split(url)
    if password is not None or shown not in _KEPT:
        return url
    parts = urlsplit(shown)
    user, _, host = parts.netloc.rpartition("@")
    query = [*parse_qsl(parts.query, keep_blank_values=True), ("password", _KEPT[shown])]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host, query=urlencode(query)))


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's error message, say) with ``url``'s password, if any, replaced."""
    password = _split(connectable(url))[1]
    if not password:
        return text
    for form in {password, quote(password, safe=""), quote(password)}:
        text = text.replace(form, "***")
    return text
