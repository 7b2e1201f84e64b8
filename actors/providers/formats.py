"""A turn's history in a provider's own wire format, and back.

``messages_as(history, "openai")`` gives the list of chat messages an OpenAI-compatible
``/chat/completions`` request carries; ``messages_as(history, "anthropic")`` gives
``{"system": ..., "messages": [...]}`` as the Messages API takes them. ``messages_from``
reads either back, so a history saved in the provider's format can start a new turn
(``Runtime.run`` accepts both). A round trip keeps every message, tool call and tool result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from messages import ChatMessage, ToolCall

from ..errors import ConfigurationError
from .anthropic import to_anthropic_messages
from .openai import to_openai_message

__all__ = ["History", "WireApi", "history", "messages_as", "messages_from"]

WireApi = Literal["openai", "anthropic"]


def messages_as(history: Sequence[ChatMessage], api: WireApi) -> Any:
    """``history`` as the provider ``api`` takes it in a request."""
    if api == "openai":
        return [to_openai_message(m) for m in history]
    if api == "anthropic":
        system, messages = to_anthropic_messages(history)
        return {"system": system, "messages": messages}
    raise ConfigurationError(f"unknown provider format {api!r}: use 'openai' or 'anthropic'")


def messages_from(data: Any, api: WireApi | None = None) -> list[ChatMessage]:
    """Chat messages from a provider's wire format (``api`` is guessed when not given: a
    mapping with ``messages`` is Anthropic's, a list of mappings OpenAI's)."""
    if api is None:
        api = "anthropic" if isinstance(data, Mapping) and "messages" in data else "openai"
    try:
        if api == "openai":
            return _name_tool_messages([_from_openai(m) for m in data])
        return _name_tool_messages(_from_anthropic(data.get("system"), data["messages"]))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigurationError(f"not a history in the {api} format: {type(exc).__name__}: {exc}") from None


def _from_openai(m: Mapping[str, Any]) -> ChatMessage:
    role = m["role"]
    content = m.get("content")
    if isinstance(content, list):  # content parts: keep the text
        content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    calls = [
        ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"].get("arguments") or "")
        for c in m.get("tool_calls") or ()
    ]
    return ChatMessage(
        role=role,
        content=content,
        name=m.get("name"),
        tool_calls=calls or None,
        tool_call_id=m.get("tool_call_id"),
    )


def _from_anthropic(system: Any, messages: Sequence[Mapping[str, Any]]) -> list[ChatMessage]:
    out: list[ChatMessage] = [ChatMessage.system(system)] if system else []
    for m in messages:
        blocks = m["content"]
        if isinstance(blocks, str):
            out.append(ChatMessage(role=m["role"], content=blocks))
            continue
        texts = [b["text"] for b in blocks if b.get("type") == "text"]
        if m["role"] == "assistant":
            calls = [
                ToolCall(id=b["id"], name=b["name"], arguments=json.dumps(b.get("input", {})))
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            out.append(ChatMessage.assistant("".join(texts) or None, calls or None))
            continue
        for b in blocks:
            if b.get("type") == "tool_result":
                content = b.get("content")
                if isinstance(content, list):
                    content = "".join(p.get("text", "") for p in content)
                out.append(ChatMessage.tool(content or "", b["tool_use_id"]))
        if texts:
            out.append(ChatMessage.user("".join(texts)))
    return out


def _name_tool_messages(history: list[ChatMessage]) -> list[ChatMessage]:
    """Give each tool message the name of the call it answers (the wire formats omit it)."""
    names = {c.id: c.name for m in history for c in m.tool_calls or ()}
    return [
        m.model_copy(update={"name": names[m.tool_call_id]})
        if m.role == "tool" and m.name is None and m.tool_call_id in names
        else m
        for m in history
    ]


History = str | Sequence[ChatMessage] | Sequence[Mapping[str, Any]] | Mapping[str, Any]


def history(messages: History, system: str | None = None) -> list[ChatMessage]:
    """A turn's opening history: a string is one user message, a provider's wire format is
    read back (``wire_format``); ``system`` goes first."""
    if isinstance(messages, str):
        out = [ChatMessage.user(messages)]
    elif isinstance(messages, Mapping) or any(isinstance(m, Mapping) for m in messages):
        out = messages_from(messages)
    else:
        out = list(messages)  # type: ignore[arg-type]
    if system is not None:
        out.insert(0, ChatMessage.system(system))
    return out
