"""What a scripted reply is made of, and the builders tests write scripts with."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, replace
from typing import Any

# -- what a reply is made of ------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """Assistant text."""

    text: str


@dataclass(frozen=True)
class ToolStart:
    """The first fragment of tool call ``index`` (``id=None`` sends it without an id)."""

    index: int
    id: str | None
    name: str
    arguments: str = ""


@dataclass(frozen=True)
class ToolArgs:
    """A further fragment of tool call ``index``'s arguments."""

    index: int
    fragment: str


@dataclass(frozen=True)
class Chunk:
    """An OpenAI chunk object sent as it is (for the legacy and odd shapes)."""

    obj: dict[str, Any]


@dataclass(frozen=True)
class Raw:
    """Bytes written to the stream as they are (comments, CRLF, several data lines...)."""

    data: bytes


Part = Text | ToolStart | ToolArgs | Chunk | Raw


@dataclass(frozen=True)
class Reply:
    """One scripted response. Counts (``stall_after`` ...) are in parts, before the end.

    With ``hold`` the stream waits after ``hold_after`` parts until the test sets that event
    (or the client hangs up): a test decides when the rest of the answer comes. With
    ``hold_at_end`` it waits so after its last event (``[DONE]``), before the body's end.

    With ``non_streaming`` its text and tool calls are sent as one JSON completion (a
    ``chat.completion`` or a Messages response; ``Chunk``, ``Raw`` and the stream's
    misbehaviours do not apply). With ``body`` those bytes are sent as they are, with
    ``status`` and ``content_type`` (None: no content-type header), and nothing else applies.
    """

    parts: tuple[Part, ...] = ()
    finish_reason: str | None = None
    usage: tuple[int, int] | None = (12, 7)
    status: int = 200
    error: str | None = None
    retry_after: float | None = None
    delay: float = 0.0
    stall_after: int | None = None
    cut_after: int | None = None
    malformed_after: int | None = None
    done_marker: bool = True
    role_chunk: bool = True
    error_after: int | None = None
    crlf: bool = False
    null_content: bool = False
    non_streaming: bool = False
    body: bytes | None = None
    content_type: str | None = None
    hold_after: int | None = None
    hold: threading.Event | None = None
    hold_at_end: threading.Event | None = None

    def but(self, **changes: Any) -> Reply:
        """A copy with ``changes``."""
        return replace(self, **changes)


def say(text: str, pieces: int | None = None, **kw: Any) -> Reply:
    """A text reply streamed in ``pieces`` chunks (by default one per word)."""
    if pieces is None:
        words = text.split(" ")
        chunks = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
    else:
        size = max(1, -(-len(text) // pieces))
        chunks = [text[i : i + size] for i in range(0, len(text), size)]
    return Reply(parts=tuple(Text(c) for c in chunks if c), **kw)


@dataclass(frozen=True)
class CallSpec:
    name: str
    arguments: str
    id: str | None


def call(name: str, arguments: dict[str, Any] | str | None = None, id: str | None = "auto") -> CallSpec:
    """A tool call for ``use_tools``; ``arguments`` as a dict, or raw (possibly invalid) text."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return CallSpec(name, args, id)


def use_tools(*calls: CallSpec, fragments: int = 3, text: str | None = None, **kw: Any) -> Reply:
    """A reply with tool calls, their arguments in ``fragments`` pieces interleaved by index."""
    parts: list[Part] = [Text(text)] if text else []
    pieces = []
    for i, c in enumerate(calls):
        size = max(1, -(-len(c.arguments) // fragments)) if c.arguments else 1
        frags = [c.arguments[j : j + size] for j in range(0, len(c.arguments), size)] or [""]
        call_id = f"call_{i + 1}" if c.id == "auto" else c.id
        parts.append(ToolStart(i, call_id, c.name, frags[0]))
        pieces.append([ToolArgs(i, f) for f in frags[1:]])
    for round_ in range(max((len(p) for p in pieces), default=0)):
        for p in pieces:
            if round_ < len(p):
                parts.append(p[round_])
    return Reply(parts=tuple(parts), **kw)


def fail(status: int, message: str = "scripted failure", retry_after: float | None = None) -> Reply:
    """An HTTP error reply."""
    return Reply(status=status, error=message, retry_after=retry_after)


def raw_response(status: int, content_type: str | None, body: bytes) -> Reply:
    """A reply of exactly ``body`` with ``status`` and ``content_type`` (None: no content-type header)."""
    return Reply(status=status, body=body, content_type=content_type)
