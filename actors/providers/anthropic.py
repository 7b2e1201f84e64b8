"""Anthropic Messages API, ``POST {base_url}/v1/messages`` with ``stream: true``.

``base_url`` may name the API's root or its ``/v1`` (``https://api.anthropic.com`` and
``https://api.anthropic.com/v1`` reach the same ``/v1/messages``), so that a URL written the
OpenAI way, which includes ``/v1``, does not become ``/v1/v1/messages`` (a 404).

Chat history maps onto Anthropic's shape: system messages become ``system``; an assistant
message becomes ``text`` and ``tool_use`` blocks (its ``arguments`` parsed as the tool's
``input``); tool messages become ``tool_result`` blocks of a user message, merged with
adjacent user content so roles alternate. The stream's ``content_block_*`` events fold into
text and tool calls by block ``index`` (``input_json_delta`` fragments concatenated);
``message_delta`` carries ``stop_reason`` and output tokens; ``error`` ends the stream. A
whole Messages response (from a server that ignores ``stream``) is folded as the events
that would have carried it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from messages import ChatMessage, ProviderConfig, ToolCall, Usage
from messages.llm import FinishReasonLLM

from .base import ProviderStreamError, error_message, parse_data

__all__ = ["ANTHROPIC_VERSION", "AnthropicAdapter", "AnthropicStream", "messages_url", "to_anthropic_messages"]

ANTHROPIC_VERSION = "2023-06-01"

_FINISH: dict[str, FinishReasonLLM] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


def _input_of(arguments: str) -> Any:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def messages_url(base_url: str) -> str:
    """``{base_url}/v1/messages``, with or without ``/v1`` at the end of ``base_url``."""
    base = base_url.rstrip("/")
    return base.removesuffix("/v1") + "/v1/messages"


def to_anthropic_messages(messages: Sequence[ChatMessage]) -> tuple[str | None, list[dict[str, Any]]]:
    """The ``system`` text and the ``messages`` list of an Anthropic request."""
    system = [m.content for m in messages if m.role == "system" and m.content]
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        if m.role == "system":
            continue
        if m.role == "user":
            add("user", [{"type": "text", "text": m.content or ""}])
        elif m.role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content or ""}])
        else:
            blocks: list[dict[str, Any]] = []
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            for c in m.tool_calls or ():
                blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": _input_of(c.arguments)})
            add("assistant", blocks or [{"type": "text", "text": ""}])
    return ("\n\n".join(system) or None), out


class AnthropicAdapter:
    """Builds the request and accumulates the stream of the Anthropic Messages API."""

    def build(
        self,
        provider: ProviderConfig,
        messages: Sequence[ChatMessage],
        tools: Sequence[dict[str, Any]],
        api_key: str | None,
    ) -> tuple[str, dict[str, str], dict[str, Any]]:
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "anthropic-version": ANTHROPIC_VERSION,
            **provider.headers,
        }
        if api_key:
            headers["x-api-key"] = api_key
        system, converted = to_anthropic_messages(messages)
        body: dict[str, Any] = {
            "model": provider.model,
            "max_tokens": provider.max_tokens or 1024,
            "messages": converted,
            "stream": True,
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [
                {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in tools
            ]
        body.update(provider.params)
        return messages_url(provider.base_url), headers, body

    def accumulator(self, id_prefix: str) -> AnthropicStream:
        return AnthropicStream()


class AnthropicStream:
    """Folds Messages API stream events into one assistant message."""

    def __init__(self) -> None:
        self.done = False
        self.received = False
        self._blocks: dict[int, dict[str, Any]] = {}
        self._stop: str | None = None
        self._input_tokens = 0
        self._output_tokens = 0
        self._saw_usage = False

    def feed(self, event: str | None, data: str) -> str:
        self.received = True
        added = ""
        for obj in parse_data(data):
            added += self._feed_obj(obj)
        return added

    def complete(self, value: Any) -> str | None:
        """Take a whole Messages response; return its text, or None if ``value`` is not one."""
        if not isinstance(value, dict) or value.get("type", "message") != "message":
            return None
        if not isinstance(value.get("content"), list):
            return None
        added = self._feed_obj({"type": "message_start", "message": value})
        for index, block in enumerate(value["content"]):
            if isinstance(block, dict):
                added += self._feed_obj({"type": "content_block_start", "index": index, "content_block": block})
        self._stop = value.get("stop_reason")
        return added

    def _feed_obj(self, obj: Any) -> str:
        if not isinstance(obj, dict):
            raise ProviderStreamError(
                "malformed_stream", f"the provider sent an event that is not an object: {obj!r:.200}"
            )
        kind = obj.get("type")
        message = error_message(obj)
        if message is not None:
            raise ProviderStreamError("provider_error", f"the provider reported an error mid-stream: {message}")
        if kind == "message_start":
            usage = (obj.get("message") or {}).get("usage") or {}
            self._count(usage)
        elif kind == "content_block_start":
            block = obj.get("content_block") or {}
            entry: dict[str, Any] = {
                "type": block.get("type"),
                "text": [],
                "id": block.get("id"),
                "name": block.get("name"),
                "json": [],
            }
            if block.get("type") == "text" and block.get("text"):
                entry["text"].append(block["text"])
            if block.get("type") == "tool_use":
                entry["input"] = block.get("input")
            self._blocks[int(obj.get("index", len(self._blocks)))] = entry
            return "".join(entry["text"])
        elif kind == "content_block_delta":
            entry = self._blocks.setdefault(int(obj.get("index", 0)), {"type": "text", "text": [], "json": []})
            delta = obj.get("delta") or {}
            if delta.get("type") == "text_delta":
                entry["text"].append(delta.get("text", ""))
                return str(delta.get("text", ""))
            if delta.get("type") == "input_json_delta":
                entry["json"].append(delta.get("partial_json", ""))
        elif kind == "message_delta":
            stop = (obj.get("delta") or {}).get("stop_reason")
            if stop:
                self._stop = stop
            self._count(obj.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        return ""

    def _count(self, usage: dict[str, Any]) -> None:
        if "input_tokens" in usage:
            self._input_tokens = int(usage.get("input_tokens") or 0)
            self._saw_usage = True
        if "output_tokens" in usage:
            self._output_tokens = int(usage.get("output_tokens") or 0)
            self._saw_usage = True

    def reported(self) -> Usage | None:
        if not self._saw_usage or self._stop is not None:
            return None
        total = self._input_tokens + self._output_tokens
        return Usage(prompt_tokens=self._input_tokens, completion_tokens=self._output_tokens, total_tokens=total)

    def result(self) -> tuple[ChatMessage, FinishReasonLLM, Usage | None]:
        text: list[str] = []
        calls: list[ToolCall] = []
        for _, b in sorted(self._blocks.items()):
            if b["type"] == "tool_use":
                args = "".join(b["json"]) or json.dumps(b.get("input") or {})
                calls.append(ToolCall(id=b["id"] or f"toolu_{len(calls)}", name=b["name"] or "", arguments=args))
            else:
                text.append("".join(b["text"]))
        usage = None
        if self._saw_usage:
            usage = Usage(
                prompt_tokens=self._input_tokens,
                completion_tokens=self._output_tokens,
                total_tokens=self._input_tokens + self._output_tokens,
            )
        finish = _FINISH.get(self._stop or "", "tool_calls" if calls else "stop")
        return ChatMessage.assistant("".join(text) or None, calls or None), finish, usage
