"""Commands that overtook their turn, held until it starts.

Thespian does not order messages between senders, so a ``StopTurn`` sent by one process
right after another started the turn may reach the host first (the Runtime that starts a
turn holds its own commands until its ``StartTurn`` is acknowledged: those never overtake).
The host holds such a command and hands it to the turn as soon as the turn starts, before
its first step; one still unclaimed after ``hold`` seconds (by default the transport's
``deliver_within``: a ``StartTurn`` not delivered by then has failed at its sender) is
returned by ``expired()`` to be answered ``unknown_turn``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["HOLD", "HeldCommands"]

HOLD = 30.0  # seconds a command may wait for its turn to start (TransportConfig.deliver_within)


class HeldCommands:
    """Per turn id, the commands waiting for it, oldest first, with who sent them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, hold: float = HOLD) -> None:
        self._clock = clock
        self.hold_for = hold
        self._held: dict[str, list[tuple[Any, Any, float]]] = {}

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, turn_id: str, command: Any, sender: Any) -> None:
        self._held.setdefault(turn_id, []).append((command, sender, self._clock()))

    def claim(self, turn_id: str) -> list[tuple[Any, Any]]:
        """The commands held for a turn that has just started, in arrival order."""
        return [(command, sender) for command, sender, _ in self._held.pop(turn_id, [])]

    def turn_ids(self) -> list[str]:
        """The turns something waits for."""
        return list(self._held)

    def take(self, turn_id: str, which: Callable[[Any], bool]) -> list[tuple[Any, Any]]:
        """The commands held for ``turn_id`` for which ``which(command)`` holds; the rest stay."""
        held = self._held.pop(turn_id, [])
        keep = [h for h in held if not which(h[0])]
        if keep:
            self._held[turn_id] = keep
        return [(command, sender) for command, sender, _ in held if which(command)]

    def expired(self) -> list[tuple[str, Any, Any]]:
        """Drop and return (turn id, command, sender) for every command held ``hold`` s or more."""
        now = self._clock()
        out: list[tuple[str, Any, Any]] = []
        for turn_id in list(self._held):
            keep = []
            for command, sender, at in self._held[turn_id]:
                if now - at < self.hold_for:
                    keep.append((command, sender, at))
                else:
                    out.append((turn_id, command, sender))
            if keep:
                self._held[turn_id] = keep
            else:
                del self._held[turn_id]
        return out
