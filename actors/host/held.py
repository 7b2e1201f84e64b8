"""Commands that overtook their turn, held until it starts.

Thespian does not order messages between senders, so a ``StopTurn`` sent by one process
right after another started the turn may reach the host first (the Runtime that starts a
turn holds its own commands until its ``StartTurn`` is acknowledged: those never overtake).
The host holds such a command and hands it to the turn as soon as the turn starts, before
its first step; one still unclaimed after ``hold`` seconds (by default the transport's
``deliver_within``: a ``StartTurn`` not delivered by then has failed at its sender) is
returned by ``expired()`` to be answered ``unknown_turn``.

A command never waits longer than its sender does: one that says how long its sender waits
for the answer (``answer_within``, seconds) is held at most ``PATIENCE`` of that, so that
its ``unknown_turn`` reaches the sender before its wait runs out (the rest is for the way
there and back, and for a host that is late to wake). One handed on to another host
(``take``) carries what is left of its sender's wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["HOLD", "PATIENCE", "HeldCommands"]

HOLD = 30.0  # seconds a command may wait for its turn to start (TransportConfig.deliver_within)
PATIENCE = 0.75  # of the time its sender waits for the answer, the most a command is held


class HeldCommands:
    """Per turn id, the commands waiting for it, oldest first, with who sent them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, hold: float = HOLD) -> None:
        self._clock = clock
        self.hold_for = hold
        self._held: dict[str, list[tuple[Any, Any, float, float]]] = {}  # command, sender, since, until

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, turn_id: str, command: Any, sender: Any, within: float | None = None) -> float:
        """Hold ``command`` until its turn starts; it is answered ``unknown_turn`` after
        ``hold_for`` seconds, or ``PATIENCE`` of ``within`` (how long its sender waits) if
        that is sooner. Returns the seconds until then."""
        now = self._clock()
        wait = self.hold_for if within is None else min(self.hold_for, within * PATIENCE)
        self._held.setdefault(turn_id, []).append((command, sender, now, now + wait))
        return wait

    def claim(self, turn_id: str) -> list[tuple[Any, Any]]:
        """The commands held for a turn that has just started, in arrival order."""
        return [(command, sender) for command, sender, _, _ in self._held.pop(turn_id, [])]

    def turn_ids(self) -> list[str]:
        """The turns something waits for."""
        return list(self._held)

    def take(self, turn_id: str, which: Callable[[Any], bool]) -> list[tuple[Any, Any]]:
        """The commands held for ``turn_id`` for which ``which(command)`` holds, each with
        what is left of its sender's wait (``answer_within``); the rest stay."""
        held = self._held.pop(turn_id, [])
        keep = [h for h in held if not which(h[0])]
        if keep:
            self._held[turn_id] = keep
        now = self._clock()
        return [(_waited(command, now - at), sender) for command, sender, at, _ in held if which(command)]

    def expired(self) -> list[tuple[str, Any, Any]]:
        """Drop and return (turn id, command, sender) for every command whose hold is over."""
        now = self._clock()
        out: list[tuple[str, Any, Any]] = []
        for turn_id in list(self._held):
            keep = []
            for entry in self._held[turn_id]:
                if now < entry[3]:
                    keep.append(entry)
                else:
                    out.append((turn_id, entry[0], entry[1]))
            if keep:
                self._held[turn_id] = keep
            else:
                del self._held[turn_id]
        return out


def _waited(command: Any, seconds: float) -> Any:
    """``command`` with ``seconds`` less of its sender's wait (a command that says none is
    returned as it is)."""
    within = getattr(command, "answer_within", None)
    if within is None or seconds <= 0:
        return command
    return command.model_copy(update={"answer_within": max(within - seconds, 0.001)})
