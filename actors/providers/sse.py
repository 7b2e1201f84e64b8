"""Server-sent events, parsed as the WHATWG spec says and as real servers send them.

Lines may end in LF, CRLF or CR (the caller's line iterator splits them); ``:`` lines are
comments (keep-alives such as ``: ping``); several ``data:`` lines of one event are joined
with a newline; a blank line ends an event, and so does the end of the stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["SSEEvent", "iter_sse"]


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event: its ``event`` field (None when absent) and its data."""

    event: str | None
    data: str


def iter_sse(lines: Iterable[str]) -> Iterator[SSEEvent]:
    """The events in ``lines`` (each line without its terminator)."""
    event: str | None = None
    data: list[str] = []
    for line in lines:
        line = line.rstrip("\r\n")
        if not line:
            if data:
                yield SSEEvent(event, "\n".join(data))
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            event = value
    if data:
        yield SSEEvent(event, "\n".join(data))
