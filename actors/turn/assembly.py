"""One round's provider stream as its turn sees it: its messages in order, each once, and the
text it has produced so far.

The LLMActor numbers every message about a stream (``seq`` 0, 1, 2, ...); Thespian may
deliver them in any order. A ``StreamAssembly`` hands the turn's rules each message of its
stream once, in ``seq`` order, and drops messages of any other stream (one the turn
aborted, or a round that ended). The text is kept as its parts and joined once, when the
turn needs it (the partial text of a stream that ended early joins the history); the usage
the provider has reported so far, and when the stream last showed a sign of life, beside it.
"""

from __future__ import annotations

from messages import LLMCompleted, LLMDeltas, LLMFailed, LLMRateLimited, LLMRetrying, LLMUsage, Usage

from .reorder import Reorder

__all__ = ["StreamAssembly", "StreamMessage"]

StreamMessage = LLMDeltas | LLMRetrying | LLMRateLimited | LLMUsage | LLMCompleted | LLMFailed


class StreamAssembly:
    """The stream ``stream_id`` of one round. Not thread-safe; owned by its turn's rules."""

    __slots__ = ("_order", "_parts", "alive_at", "stream_id", "usage")

    def __init__(self, stream_id: str, now: float = 0.0) -> None:
        self.stream_id = stream_id
        self._order: Reorder[StreamMessage] = Reorder()
        self._parts: list[str] = []
        self.usage: Usage | None = None  # as the provider reported it so far (LLMUsage)
        self.alive_at = now  # when its last message came (or it started)

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
