"""OpenAI-compatible ``POST {base_url}/chat/completions`` with ``stream: true``.

Accumulation follows the protocol and the servers that bend it: chunks with empty
``choices`` (Azure's ``prompt_filter_results``, the final usage chunk) are read for usage
only; tool calls are folded by ``index`` (id and name from their first fragment, argument
fragments concatenated), a call with no ``id`` gets a stable one, a call with no ``index``
is matched by id or continues the last one; the legacy ``function_call`` delta becomes a
tool call; an ``{"error": ...}`` object ends the stream with ``provider_error``; a stream
that ends without ``[DONE]`` keeps what it received. A whole ``chat.completion`` (from a
server that ignores ``stream``) is folded as one chunk whose deltas are its messages.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from messages import ChatMessage, ProviderConfig, ToolCall, Usage
from messages.llm import FinishReasonLLM

from .base import ProviderStreamError, error_message, parse_data

__all__ = ["OpenAIAdapter", "OpenAIStream", "to_openai_message"]

_FINISH: dict[str, FinishReasonLLM] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


def to_openai_message(m: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.name is not None and m.role != "tool":
        out["name"] = m.name
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def _as_chunk_choice(choice: dict[str, Any]) -> dict[str, Any]:
    """A ``chat.completion`` choice as the chunk choice that carries the same: its message as the delta."""
    message = choice["message"]
    calls = [dict(tc, index=i) for i, tc in enumerate(message.get("tool_calls") or ()) if isinstance(tc, dict)]
    return {
        "index": choice.get("index", 0),
        "delta": dict(message, tool_calls=calls),
        "finish_reason": choice.get("finish_reason"),
    }


class OpenAIAdapter:
    """Builds the request and accumulates the stream of an OpenAI-compatible server."""

    def build(
        self,
        provider: ProviderConfig,
        messages: Sequence[ChatMessage],
        tools: Sequence[dict[str, Any]],
        api_key: str | None,
    ) -> tuple[str, dict[str, str], dict[str, Any]]:
        headers = {"content-type": "application/json", "accept": "text/event-stream", **provider.headers}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        body: dict[str, Any] = {
            "model": provider.model,
            "messages": [to_openai_message(m) for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]},
                }
                for t in tools
            ]
        if provider.max_tokens is not None:
            body["max_tokens"] = provider.max_tokens
        body.update(provider.params)
        return provider.base_url.rstrip("/") + "/chat/completions", headers, body

    def accumulator(self, id_prefix: str) -> OpenAIStream:
        return OpenAIStream(id_prefix)


class OpenAIStream:
    """Folds ``chat.completion.chunk`` objects into one assistant message."""

    def __init__(self, id_prefix: str = "") -> None:
        self.done = False
        self.received = False
        self._id_prefix = "call_" + hashlib.sha1(id_prefix.encode()).hexdigest()[:10]
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: Usage | None = None

    def feed(self, event: str | None, data: str) -> str:
        if data.strip() == "[DONE]":
            self.done = True
            return ""
        self.received = True
        added = []
        for obj in parse_data(data):
            added.append(self._feed_obj(obj))
        return "".join(added)

    def complete(self, value: Any) -> str | None:
        """Take a whole ``chat.completion``; return its text, or None if ``value`` is not one."""
        if not isinstance(value, dict):
            return None
        choices = [c for c in value.get("choices") or () if isinstance(c, dict) and isinstance(c.get("message"), dict)]
        if not choices:
            return None
        return self._feed_obj(dict(value, choices=[_as_chunk_choice(c) for c in choices]))

    def _feed_obj(self, obj: Any) -> str:
        if not isinstance(obj, dict):
            raise ProviderStreamError(
                "malformed_stream", f"the provider sent a chunk that is not an object: {obj!r:.200}"
            )
        message = error_message(obj)
        if message is not None:
            raise ProviderStreamError("provider_error", f"the provider reported an error mid-stream: {message}")
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self._usage = Usage(
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                total_tokens=int(usage.get("total_tokens") or 0),
            )
        added = ""
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text.append(content)
                added += content
            for position, tc in enumerate(delta.get("tool_calls") or ()):
                self._fold_call(tc, position)
            fc = delta.get("function_call")
            if isinstance(fc, dict):
                self._fold_call({"index": 0, "function": fc}, 0)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return added

    def _fold_call(self, tc: dict[str, Any], position: int) -> None:
        index = tc.get("index")
        call_id = tc.get("id")
        if not isinstance(index, int):
            known = [i for i, c in self._calls.items() if call_id and c["id"] == call_id]
            if known:
                index = known[0]
            elif call_id or not self._calls:
                index = max(self._calls, default=-1) + 1
            else:
                index = max(self._calls)
        entry = self._calls.setdefault(index, {"id": None, "name": "", "args": []})
        if call_id and not entry["id"]:
            entry["id"] = call_id
        fn = tc.get("function") or {}
        if fn.get("name") and not entry["name"]:
            entry["name"] = fn["name"]
        if isinstance(fn.get("arguments"), str):
            entry["args"].append(fn["arguments"])
        elif isinstance(fn.get("arguments"), dict):  # some servers send an object
            entry["args"].append(json.dumps(fn["arguments"]))

    def reported(self) -> Usage | None:
        return self._usage if self._finish is None else None

    def result(self) -> tuple[ChatMessage, FinishReasonLLM, Usage | None]:
        calls = [
            ToolCall(id=c["id"] or f"{self._id_prefix}_{i}", name=c["name"], arguments="".join(c["args"]))
            for i, c in sorted(self._calls.items())
        ]
        text = "".join(self._text)
        finish = _FINISH.get(self._finish or "", "tool_calls" if calls else "stop")
        return ChatMessage.assistant(text or None, calls or None), finish, self._usage
