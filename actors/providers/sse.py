"""Server-sent events, parsed as the WHATWG spec says and as real servers send them.

Lines may end in LF, CRLF or CR (the caller's line iterator splits them); ``:`` lines are
comments (keep-alives such as ``: ping``); several ``data:`` lines of one event are joined
with a newline; a blank line ends an event, and so does the end of the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEParser", "aiter_sse", "iter_sse"]


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event: its ``event`` field (None when absent) and its data."""

    event: str | None
    data: str


class SSEParser:
    """Events from lines fed one at a time: ``line`` returns the event a line completes
    (None if it completes none), ``end`` the one the end of the stream completes."""

    __slots__ = ("_data", "_event")

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: list[str] = []

    def line(self, line: str) -> SSEEvent | None:
        line = line.rstrip("\r\n")
        if not line:
            done = SSEEvent(self._event, "\n".join(self._data)) if self._data else None
            self._event, self._data = None, []
            return done
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        return None

    def end(self) -> SSEEvent | None:
        return self.line("")


def iter_sse(lines: Iterable[str]) -> Iterator[SSEEvent]:
    """The events in ``lines`` (each line without its terminator)."""
    parser = SSEParser()
    for line in lines:
        if (event := parser.line(line)) is not None:
            yield event
    if (event := parser.end()) is not None:
        yield event


async def aiter_sse(lines: AsyncIterator[str]) -> AsyncIterator[SSEEvent]:
    """``iter_sse`` over lines that arrive asynchronously."""
    parser = SSEParser()
    async for line in lines:
        if (event := parser.line(line)) is not None:
            yield event
    if (event := parser.end()) is not None:
        yield event
