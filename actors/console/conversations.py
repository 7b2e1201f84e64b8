"""The console's sessions: the list, and one session with its turns, from the store.

Sessions are the store's (``store.sessions``): a console over a store, or a Runtime's
console with one, lists them; without a store there is nothing to list (a Runtime's
sessions then live in its process only), and the list says so.
"""

from __future__ import annotations

from typing import Any

from ..store import TurnStore
from ..store.base import session_turns
from .sources import Source

__all__ = ["UnknownSession", "session_json", "sessions_json"]


class UnknownSession(LookupError):
    """No such session in the store."""


def _store(source: Source) -> TurnStore | None:
    store: TurnStore | None = getattr(source, "store", None)
    return store


def sessions_json(source: Source) -> dict[str, Any]:
    """Every session, most recently changed first (``stored``: whether there is a store to list)."""
    store = _store(source)
    if store is None:
        return {"sessions": [], "stored": False}
    rows = [
        {"session_id": s.session_id, "turns": s.turns, "created_at": s.created_at, "updated_at": s.updated_at}
        for s in store.sessions.summaries()
    ]
    return {"sessions": rows, "stored": True}


def session_json(source: Source, session_id: str) -> dict[str, Any]:
    """One session: its turns (each with its status), the turn running, the messages waiting, its history."""
    store = _store(source)
    try:
        if store is None:
            raise KeyError(session_id)
        record = store.sessions.load(session_id)
    except KeyError:
        raise UnknownSession(f"no session {session_id}") from None
    turns = session_turns(store.log, record.turns)
    return {
        "session_id": record.session_id,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "turns": turns,
        "running": record.running,
        "queued": record.queued,
        "history": [m.model_dump(mode="json", exclude={"kind"}, exclude_none=True) for m in record.messages],
    }
