"""What a TurnHost reads from its store: turns to recover, and the events of turns that left.

The host writes through its TurnActors (write-ahead, ``turn_actor``); this module is the
reading side, kept apart so that the host's actor stays a thin dispatcher.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from messages import Message, TurnState

from ..errors import SnapshotError, StoreError
from ..logs import logger
from ..store.sqlite import TurnStore
from .subscriptions import whole_finish

__all__ = ["is_stored", "recoverable", "replay"]

Deliver = Callable[[str, Any, bytes, str], None]


log = logger("greenroom.host")


def is_stored(store: TurnStore | None, turn_id: str) -> bool:
    """Whether ``store`` has a record of the turn (False when it cannot say)."""
    try:
        return store is not None and store.exists(turn_id)
    except StoreError:
        return False


def replay(store: TurnStore, turn_id: str, since: int, to: Any, deliver: Deliver) -> str | None:
    """Send ``to`` the stored events of a turn that has ended and left the host, from
    ``since`` on, at once (it makes no new ones); its first ``Finish`` with the whole
    history. Returns why it could not, or None."""
    key, whole = str(to), since == 0
    try:
        history = [] if whole else store.load(turn_id).messages
        for kind, payload in store.event_payloads(turn_id, since):
            if kind == "finish" and not whole:
                payload, whole = whole_finish(payload, history), True
            deliver(key, to, payload, kind)
    except (StoreError, SnapshotError, KeyError) as exc:
        return f"cannot read turn {turn_id}: {exc}"
    return None


def recoverable(
    store: TurnStore, turn_ids: Iterable[str]
) -> tuple[list[tuple[TurnState, list[Message]]], dict[str, str]]:
    """Each turn's snapshot and the commands that wait for it (taken from the inbox); a turn
    that cannot be read is an error for itself alone."""
    found: list[tuple[TurnState, list[Message]]] = []
    errors: dict[str, str] = {}
    for turn_id in turn_ids:
        try:
            found.append((store.load(turn_id), store.take_commands(turn_id)))
        except (SnapshotError, StoreError, KeyError) as exc:
            errors[turn_id] = str(exc)
            log().error("cannot recover turn %s: %s", turn_id, exc)
    return found, errors
