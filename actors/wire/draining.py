"""The messages of a node that drains (``greenroom node`` on SIGTERM; ``cluster.leaving``, ``host.draining``)."""

from __future__ import annotations

from dataclasses import dataclass

from .protocol import _Internal

__all__ = ["Drain", "Drained"]


@dataclass(frozen=True)
class Drain(_Internal):
    """A node drains: to its directory, which leaves placement and tells each of its hosts; a
    host hands each durable turn on at its next safe boundary and lets the others finish
    (``store.ownership.Drain``). ``within``: the seconds left before the bound (0: the bound
    has come: what is left ends, or is handed on now). Answered with ``Drained`` once every
    turn there is handed on or has ended."""

    within: float


@dataclass(frozen=True)
class Drained(_Internal):
    """A host (``slot``), or a node's directory (-1), has no turn left running."""

    slot: int = -1
