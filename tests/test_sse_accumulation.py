"""SSE parsing and OpenAI stream accumulation on the shapes real servers send."""

from __future__ import annotations

import json

import pytest

from actors.providers import OpenAIStream, ProviderStreamError, iter_sse
from messages import ChatMessage, ToolCall, Usage


def chunk(delta: dict | None = None, finish: str | None = None, **extra) -> str:
    obj = {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }
    obj.update(extra)
    return "data: " + json.dumps(obj) + "\n\n"


def accumulate(stream: str, id_prefix: str = "s") -> tuple[OpenAIStream, list[str]]:
    acc = OpenAIStream(id_prefix)
    texts = []
    for ev in iter_sse(stream.splitlines()):
        t = acc.feed(ev.event, ev.data)
        if t:
            texts.append(t)
        if acc.done:
            break
    return acc, texts


def test_role_only_first_chunk_text_and_done() -> None:
    stream = (
        chunk({"role": "assistant", "content": ""})
        + chunk({"content": "Hel"})
        + chunk({"content": "lo"})
        + chunk({}, "stop")
        + "data: [DONE]\n\n"
    )
    acc, texts = accumulate(stream)
    assert texts == ["Hel", "lo"]
    assert acc.done
    assert acc.result() == (ChatMessage.assistant("Hello"), "stop", None)


def test_two_tool_calls_interleaved_by_index_with_many_fragments_and_usage_chunk() -> None:
    stream = (
        chunk({"role": "assistant", "content": None})
        + chunk(
            {
                "content": None,
                "tool_calls": [
                    {"index": 0, "id": "call_a", "type": "function", "function": {"name": "add", "arguments": ""}}
                ],
            }
        )
        + chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "timed_echo", "arguments": '{"te'},
                    }
                ]
            }
        )
        + chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]})
        + chunk({"tool_calls": [{"index": 1, "function": {"arguments": 'xt": "hi"'}}]})
        + chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1, "}}]})
        + chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"b": 2}'}}]})
        + chunk({"tool_calls": [{"index": 1, "function": {"arguments": "}"}}]})
        + chunk({}, "tool_calls")
        + "data: "
        + json.dumps(
            {"id": "c", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}}
        )
        + "\n\n"
        + "data: [DONE]\n\n"
    )
    acc, texts = accumulate(stream)
    assert texts == []
    message, finish, usage = acc.result()
    assert message == ChatMessage.assistant(
        None,
        [
            ToolCall(id="call_a", name="add", arguments='{"a": 1, "b": 2}'),
            ToolCall(id="call_b", name="timed_echo", arguments='{"text": "hi"}'),
        ],
    )
    assert finish == "tool_calls"
    assert usage == Usage(prompt_tokens=9, completion_tokens=5, total_tokens=14)


def test_sse_comments_crlf_and_multi_line_data() -> None:
    lines = [": ping", 'data: {"choices": [{"index": 0,', 'data:  "delta": {"content": "x"}}]}', "", ": keep-alive", ""]
    events = list(iter_sse(line + "\r" for line in lines))
    assert [e.data for e in events] == ['{"choices": [{"index": 0,\n "delta": {"content": "x"}}]}']


def test_an_error_object_mid_stream_raises() -> None:
    acc = OpenAIStream()
    acc.feed(None, json.dumps({"choices": [{"index": 0, "delta": {"content": "a"}}]}))
    with pytest.raises(ProviderStreamError, match="mid-stream: overloaded") as info:
        acc.feed(None, json.dumps({"error": {"message": "overloaded", "type": "server_error"}}))
    assert info.value.error_type == "provider_error"


def test_a_data_line_that_is_not_json_raises() -> None:
    with pytest.raises(ProviderStreamError, match="not JSON") as info:
        OpenAIStream().feed(None, "{nope")
    assert info.value.error_type == "malformed_stream"
