"""The base of greenroom's Thespian actors: handlers that never raise out to Thespian.

Thespian delivers a message again when its handler raises, then returns it to its sender
as a ``PoisonMessage``: a handler that raised after a side effect (a turn started, a
process lent) would repeat it. ``Dispatcher`` dispatches as Thespian's
``ActorTypeDispatcher`` (``receiveMsg_<Class>`` of the message's class or nearest base),
but a handler that raises is logged with the message's class and its actor, and the
message is consumed: every message is handled at most once.
"""

from __future__ import annotations

from typing import Any

from thespian.actors import ActorTypeDispatcher

from ..logs import logger

__all__ = ["Dispatcher"]


log = logger("greenroom.actors")


class Dispatcher(ActorTypeDispatcher):
    """``ActorTypeDispatcher`` whose handlers never raise out; see the module docstring."""

    def receiveMessage(self, message: Any, sender: Any) -> Any:
        try:
            return super().receiveMessage(message, sender)
        except Exception:
            log().exception("%s failed on %s; the message is dropped", type(self).__name__, type(message).__name__)
            return None
