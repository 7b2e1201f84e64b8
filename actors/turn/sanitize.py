"""Text that is safe to keep: what reaches a turn's history, events and store goes through here.

Models and tools can produce strings that are not valid Unicode: a provider sends
``"\\ud800"`` in its JSON, a tool returns ``os.listdir()`` of a file name that is not UTF-8.
Such a lone surrogate cannot be encoded to UTF-8, so it would fail every later write of the
turn. ``safe_text`` replaces each lone surrogate with U+FFFD (a valid pair is kept as the
character it encodes); ``safe_json`` does the same through parsed JSON and refuses data
nested deeper than ``MAX_DEPTH``, which no tool needs and which would exhaust the encoders.
"""

from __future__ import annotations

from typing import Any

from messages import ChatMessage, Message

__all__ = ["MAX_DEPTH", "TooDeep", "safe_command", "safe_json", "safe_message", "safe_text"]

MAX_DEPTH = 64


class TooDeep(ValueError):
    """JSON data nested deeper than ``MAX_DEPTH`` levels."""


def safe_text(s: str) -> str:
    """``s`` with every lone surrogate replaced by U+FFFD; ``s`` itself when it is valid."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def safe_json(value: Any, depth: int = 0) -> Any:
    """Parsed JSON with safe strings; ``TooDeep`` past ``MAX_DEPTH`` levels of nesting."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, (dict, list)):
        if depth >= MAX_DEPTH:
            raise TooDeep(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            return {safe_text(str(k)): safe_json(v, depth + 1) for k, v in value.items()}
        return [safe_json(v, depth + 1) for v in value]
    return value


def safe_message(message: ChatMessage) -> ChatMessage:
    """The model's message with safe strings and distinct tool call ids.

    Some OpenAI-compatible servers send two calls with the same id in one response; each
    needs its own tool message, so a repeated id becomes ``<id>_2``, ``<id>_3``, ... in the
    history itself (the model then sees the ids it is answered with)."""
    content = safe_text(message.content) if message.content is not None else None
    calls = message.tool_calls
    if calls:
        used: set[str] = set()
        fixed = []
        for c in calls:
            new_id, n = c.id, 1
            while new_id in used:
                n += 1
                new_id = f"{c.id}_{n}"
            used.add(new_id)
            fixed.append(
                c.model_copy(update={"id": new_id, "name": safe_text(c.name), "arguments": safe_text(c.arguments)})
            )
        calls = fixed
    if content == message.content and calls == message.tool_calls:
        return message
    return message.model_copy(update={"content": content, "tool_calls": calls})


def safe_command(command: Message) -> Message:
    """``command`` with every string in it made safe (reasons become history and events)."""
    data = command.model_dump()
    clean = safe_json(data)
    return command if clean == data else type(command).model_validate(clean)
