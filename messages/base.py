"""The base every greenroom message derives from.

A message is plain data: a frozen pydantic model with a ``kind`` discriminator that never
changes once shipped. It holds no callables, clients, locks or actor addresses, so it
pickles for Thespian and encodes with msgpack (:mod:`messages.codec`). Thespian dispatches
on the bare class name, so every message class name in the project is unique.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Message"]


class Message(BaseModel):
    """Immutable plain data with a stable ``kind``; subclasses set ``kind`` as a Literal."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
