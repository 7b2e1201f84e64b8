"""Actors inside a process: a mailbox, a state and handlers each, run by their process's actor.

A ``TurnHost`` (a Thespian actor, one OS process) hosts many in-process actors: TurnActors,
an LLMActor and the ToolActors of inline calls; a tool process hosts the ToolActor of its
call. Each has its own FIFO mailbox and handles one message at a time; the Thespian actor
runs them (``Kernel.run``) after every message it receives, until every mailbox is empty.
They dispatch as Thespian's ``ActorTypeDispatcher`` does, so a process has one style:
``receiveMsg_<Class>`` for the message's class or the nearest of its bases, else
``receiveUnrecognizedMessage``.

Guarantees:

- a mailbox is first in, first out: a message an actor sends itself (``tell(self, ...)``)
  goes to the tail, so whatever was already queued for it is handled first;
- actors take turns, one message each, so one busy actor cannot starve the others;
- a handler that raises is logged with the actor's name and the message's kind; the actor
  and its mailbox go on (the same contract as a Thespian actor, without the redelivery).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from .logs import logger

__all__ = ["Kernel", "LocalActor"]


log = logger("greenroom.kernel")


class LocalActor:
    """An in-process actor: subclasses define ``receiveMsg_<Class>`` handlers."""

    name = "actor"
    _handlers: dict[type, str | None]  # per subclass: message class -> handler name, found once

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.mailbox: deque[tuple[Any, Any]] = deque()
        self._scheduled = False

    def tell(self, message: Any, sender: Any = None) -> None:
        """Queue ``message`` at the tail of this actor's mailbox."""
        self.mailbox.append((message, sender))
        if not self._scheduled:
            self._scheduled = True
            self.kernel.runnable.append(self)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._handlers = {}

    def receive(self, message: Any, sender: Any) -> None:
        """Hand ``message`` to ``receiveMsg_<Class>`` of its class or nearest base."""
        kind = type(message)
        name = self._handlers.get(kind, "")
        if name == "":
            name = next(
                (f"receiveMsg_{c.__name__}" for c in kind.__mro__ if hasattr(self, f"receiveMsg_{c.__name__}")), None
            )
            self._handlers[kind] = name
        if name is None:
            self.receiveUnrecognizedMessage(message, sender)
        else:
            getattr(self, name)(message, sender)

    def receiveUnrecognizedMessage(self, message: Any, sender: Any) -> None:
        log().debug("%s ignored %s", self.name, type(message).__name__)


class Kernel:
    """Runs the in-process actors of one host, a message at a time each, round robin."""

    def __init__(self) -> None:
        self.runnable: deque[LocalActor] = deque()

    def run(self) -> None:
        """Handle queued messages until every mailbox is empty."""
        runnable = self.runnable
        while runnable:
            actor = runnable.popleft()
            message, sender = actor.mailbox.popleft()
            try:
                actor.receive(message, sender)
            except Exception:
                log().exception("%s failed on %s", actor.name, getattr(message, "kind", type(message).__name__))
            if actor.mailbox:
                runnable.append(actor)
            else:
                actor._scheduled = False
