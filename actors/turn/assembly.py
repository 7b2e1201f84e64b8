"""One round's provider stream as its turn sees it: its messages in order, each once, and the
text it has produced so far.

The LLMActor numbers every message about a stream (``seq`` 0, 1, 2, ...); Thespian may
deliver them in any order. A ``StreamAssembly`` hands the turn's rules each message of its
stream once, in ``seq`` order, and drops messages of any other stream (one the turn
aborted, or a round that ended). The text is kept as its parts and joined once, when the
turn needs it (the partial text of a stream that ended early joins the history).
"""

from __future__ import annotations

from messages import LLMCompleted, LLMDeltas, LLMFailed, LLMRetrying

from .reorder import Reorder

__all__ = ["StreamAssembly", "StreamMessage"]

StreamMessage = LLMDeltas | LLMRetrying | LLMCompleted | LLMFailed


class StreamAssembly:
    """The stream ``stream_id`` of one round. Not thread-safe; owned by its turn's rules."""

    __slots__ = ("_order", "_parts", "stream_id")

    def __init__(self, stream_id: str) -> None:
        self.stream_id = stream_id
        self._order: Reorder[StreamMessage] = Reorder()
        self._parts: list[str] = []

    def accept(self, message: StreamMessage) -> list[StreamMessage]:
        """The messages of this stream now in order (none while one before them is missing)."""
        if message.stream_id != self.stream_id:
            return []
        return self._order.add(message.seq, message)

    def add_text(self, text: str) -> None:
        self._parts.append(text)

    @property
    def text(self) -> str:
        """The text so far (linear in its length: parts are joined here, not appended)."""
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""
