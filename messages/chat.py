"""Chat data as the provider protocol and the seeds use it.

``ChatMessage`` and ``ToolCall`` mirror the OpenAI chat format: an assistant message may
carry ``tool_calls``; each of them is answered by exactly one ``tool`` message whose
``tool_call_id`` names it. ``ToolCall.arguments`` is the JSON text as the provider sent it,
never re-encoded.
"""

from __future__ import annotations

from typing import Literal

from .base import Message

__all__ = ["ChatMessage", "Role", "ToolCall", "Usage"]

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(Message):
    """One call the model asked for; ``arguments`` is the provider's JSON text, unparsed."""

    kind: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: str = ""


class ChatMessage(Message):
    """One entry of a conversation's history."""

    kind: Literal["chat_message"] = "chat_message"
    role: Role
    content: str | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @classmethod
    def system(cls, content: str) -> ChatMessage:
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> ChatMessage:
        return cls(role="user", content=content)

    @classmethod
    def assistant(cls, content: str | None, tool_calls: list[ToolCall] | None = None) -> ChatMessage:
        return cls(role="assistant", content=content, tool_calls=tool_calls or None)

    @classmethod
    def tool(cls, content: str, tool_call_id: str, name: str | None = None) -> ChatMessage:
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name)


class Usage(Message):
    """Token counts as the provider reported them; ``+`` adds two reports."""

    kind: Literal["usage"] = "usage"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )
