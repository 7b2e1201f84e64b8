"""What the console needs of a Runtime and of its turn streams, as protocols.

The console serves a ``Runtime`` (``Runtime(console=...)`` starts it), so it must not import
the client: these are the faces it reads through (the Runtime's own attributes and its
streams'), and ``actors.client.runtime.Runtime`` has them.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

__all__ = ["InboundFace", "RuntimeFace", "StreamFace"]


class StreamFace(Protocol):
    """A turn's events as its Runtime received them (``client.stream.TurnStream``)."""

    turn_id: str
    events: list[Any]
    _base: int
    _cond: threading.Condition

    @property
    def next_seq(self) -> int: ...

    def received_at(self, seq: int) -> float | None: ...


class InboundFace(Protocol):
    """Where a Runtime's streams are (``client.receiving.Inbound``)."""

    @property
    def on_open(self) -> list[Any]: ...  # callables told of each stream opened

    def open_streams(self) -> list[tuple[str, Any]]: ...


class RuntimeFace(Protocol):
    """A running ``Runtime``."""

    store_path: str | None

    @property
    def _inbound(self) -> InboundFace: ...

    def control(self, command: Any, timeout: float = 10.0) -> Any: ...

    def attach(self, turn_id: str, since: int = 0, timeout: float = 10.0) -> Any: ...
