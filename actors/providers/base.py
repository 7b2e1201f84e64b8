"""What every provider adapter offers the stream worker."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from messages import ChatMessage, ProviderConfig, Usage
from messages.llm import FinishReasonLLM

__all__ = ["Accumulator", "Adapter", "ProviderStreamError", "error_message", "parse_data"]


class ProviderStreamError(Exception):
    """The provider said something the stream cannot go on from (an error object, bad JSON)."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


class Accumulator(Protocol):
    """Folds a provider's stream events, or its whole non-streaming response, into one assistant message."""

    done: bool
    received: bool  # a data event other than an end marker was fed

    def feed(self, event: str | None, data: str) -> str:
        """Take one SSE event; return the text it adds (``""`` if none)."""

    def complete(self, value: Any) -> str | None:
        """Take a whole non-streaming response (parsed JSON); return its text, or None if ``value`` is not one."""

    def result(self) -> tuple[ChatMessage, FinishReasonLLM, Usage | None]:
        """The accumulated assistant message, finish reason and usage."""

    def reported(self) -> Usage | None:
        """The usage the provider has reported before its stream's end (Anthropic's
        ``message_start``, a server that reports it with each chunk), all of it; None when it
        has reported none, or has reached its end (the result carries the final one)."""


class Adapter(Protocol):
    def build(
        self,
        provider: ProviderConfig,
        messages: Sequence[ChatMessage],
        tools: Sequence[dict[str, Any]],
        api_key: str | None,
    ) -> tuple[str, dict[str, str], dict[str, Any]]:
        """URL, headers and JSON body of the streaming request."""

    def accumulator(self, id_prefix: str) -> Accumulator:
        """A fresh accumulator; ``id_prefix`` seeds ids for tool calls that came without one."""


def error_message(obj: dict[str, Any]) -> str | None:
    """The message of an error object (``{"error": ...}`` or ``{"type": "error", ...}``); None for any other object."""
    if obj.get("type") != "error" and not obj.get("error"):
        return None
    err = obj.get("error") or {}
    return str(err.get("message")) if isinstance(err, dict) else str(err)


def parse_data(data: str) -> list[Any]:
    """The JSON object(s) of one event's data.

    Per the spec several ``data:`` lines form one value; some servers instead put one JSON
    object per line with no blank line between them, so a value that does not parse is
    tried line by line. Raises ``ProviderStreamError`` when neither parses.
    """
    try:
        return [json.loads(data)]
    except ValueError:
        pass
    if "\n" in data:
        try:
            return [json.loads(line) for line in data.split("\n") if line.strip()]
        except ValueError:
            pass
    raise ProviderStreamError("malformed_stream", f"the provider sent a data line that is not JSON: {data[:200]!r}")
