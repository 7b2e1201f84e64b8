"""Actors inside a process: a mailbox, a state and a handler each, run by their host.

A ``TurnHost`` (a Thespian actor, one OS process) hosts many in-process actors: TurnActors
and an LLMActor. Each has its own FIFO mailbox and handles one message at a time; the host
runs them after every Thespian message it receives, until every mailbox is empty.

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

from ..logs import logger

__all__ = ["Kernel", "LocalActor"]


log = logger("greenroom.kernel")


class LocalActor:
    """An in-process actor: subclasses implement ``receive(message, sender)``."""

    name = "actor"

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

    def receive(self, message: Any, sender: Any) -> None:
        raise NotImplementedError


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
