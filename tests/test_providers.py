"""Providers as real servers behave: quirks, retries and timeouts, and the Anthropic API."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from actors import Runtime
from actors.testing import (
    Chunk,
    Raw,
    Reply,
    ScriptedProvider,
    Text,
    ToolArgs,
    ToolStart,
    call,
    fail,
    raw_response,
    say,
    use_tools,
)
from messages import ChatMessage, ProviderConfig, RetryPolicy, Timeouts, ToolCall, TurnOptions, TurnRetrying

from . import tools_for_tests as T
from .helpers import summary

pytestmark = pytest.mark.integration

ADD_ARGS = '{"a": 1, "b": 2}'


def first_assistant(runtime: Runtime, provider: ScriptedProvider, reply: Reply, **run: Any) -> ChatMessage:
    """Run a turn whose first response is ``reply``; return its accumulated assistant message."""
    provider.add(reply, say("done."))
    result = runtime.run("go", tools=[T.add], **run).result(30)
    assert result.messages[1].role == "assistant"
    return result.messages[1]


def chunk(delta: dict[str, Any], finish: str | None = None) -> Chunk:
    return Chunk({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


QUIRKS: dict[str, tuple[Reply, ChatMessage]] = {
    "azure_empty_choices_first": (
        Reply(
            parts=(
                Chunk({"choices": [], "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]}),
                Text("Hi "),
                Text("there."),
            ),
            role_chunk=False,
        ),
        ChatMessage.assistant("Hi there."),
    ),
    "tool_calls_without_ids": (
        Reply(
            parts=(ToolStart(0, None, "add", '{"a": 1,'), ToolArgs(0, ' "b": 2}'), ToolStart(1, None, "add", ADD_ARGS))
        ),
        None,  # ids are generated: checked in their own test
    ),
    "whole_arguments_in_one_chunk": (
        use_tools(call("add", {"a": 1, "b": 2}), fragments=1),
        ChatMessage.assistant(None, [ToolCall(id="call_1", name="add", arguments=ADD_ARGS)]),
    ),
    "content_null_beside_tool_calls": (
        use_tools(call("add", {"a": 1, "b": 2}), null_content=True),
        ChatMessage.assistant(None, [ToolCall(id="call_1", name="add", arguments=ADD_ARGS)]),
    ),
    "legacy_function_call": (
        Reply(
            parts=(
                chunk({"role": "assistant", "content": None, "function_call": {"name": "add", "arguments": ""}}),
                chunk({"function_call": {"arguments": ADD_ARGS}}),
            ),
            finish_reason="function_call",
            role_chunk=False,
        ),
        None,
    ),
    "keep_alive_comments": (
        Reply(parts=(Raw(b": ping\n\n"), Text("A"), Raw(b": keep-alive\n\n"), Text("B"))),
        ChatMessage.assistant("AB"),
    ),
    "crlf_line_endings": (
        say("with CRLF endings", crlf=True),
        ChatMessage.assistant("with CRLF endings"),
    ),
    "several_data_lines_in_one_event": (
        Reply(parts=(Raw(b'data: {"choices": [{"index": 0,\ndata: "delta": {"content": "joined"}}]}\n\n'),)),
        ChatMessage.assistant("joined"),
    ),
    "usage_only_last_chunk": (
        say("counted", usage=(30, 4)),
        ChatMessage.assistant("counted"),
    ),
    "no_done_marker": (
        say("no done marker", done_marker=False),
        ChatMessage.assistant("no done marker"),
    ),
}


@pytest.mark.parametrize("quirk", [q for q, (_, expected) in QUIRKS.items() if expected is not None])
def test_each_quirk_through_a_full_turn_gives_the_exact_message(
    runtime: Runtime, provider: ScriptedProvider, quirk: str
) -> None:
    reply, expected = QUIRKS[quirk]
    assert first_assistant(runtime, provider, reply) == expected


def test_tool_calls_without_ids_get_stable_ones_and_the_turn_stays_valid(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    reply, _ = QUIRKS["tool_calls_without_ids"]
    message = first_assistant(runtime, provider, reply)
    ids = [c.id for c in message.tool_calls or []]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)
    assert [(c.name, c.arguments) for c in message.tool_calls or []] == [("add", ADD_ARGS), ("add", ADD_ARGS)]
    assert [m["tool_call_id"] for m in provider.requests[1].messages if m["role"] == "tool"] == ids


def test_the_legacy_function_call_becomes_a_tool_call(runtime: Runtime, provider: ScriptedProvider) -> None:
    reply, _ = QUIRKS["legacy_function_call"]
    message = first_assistant(runtime, provider, reply)
    assert [(c.name, c.arguments) for c in message.tool_calls or []] == [("add", ADD_ARGS)]
    assert provider.requests[1].messages[-1]["content"] == json.dumps({"ok": True, "data": 3})


def test_usage_from_the_last_chunk_is_reported(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(say("counted", usage=(30, 4)))
    result = runtime.run("go").result(30)
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens) == (30, 4, 34)


def test_an_error_object_mid_stream_ends_the_turn_with_an_error(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(say("one two three", error_after=1))
    turn = runtime.run("go")
    assert summary(list(turn.events(timeout=30)))[-3:] == [
        ("text", "one "),
        ("error", "provider_error", "the provider reported an error mid-stream: scripted mid-stream error"),
        ("finish", "error"),
    ]


def test_finish_reason_length_ends_the_turn_with_its_own_reason(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(say("cut short by the token lim", finish_reason="length"))
    result = runtime.run("go").result(30)
    assert result.finish_reason == "length"
    assert result.messages[-1] == ChatMessage.assistant("cut short by the token lim")


REFERENCE = {
    "text_tools_usage": use_tools(
        call("add", {"a": 1, "b": 2}), call("add", {"a": 3, "b": 4}), text="Adding.", fragments=4
    ),
    "azure_empty_choices_first": QUIRKS["azure_empty_choices_first"][0],
    "content_null_beside_tool_calls": QUIRKS["content_null_beside_tool_calls"][0],
    "keep_alive_comments": QUIRKS["keep_alive_comments"][0],
    "crlf_line_endings": QUIRKS["crlf_line_endings"][0],
    "no_done_marker": QUIRKS["no_done_marker"][0],
}


@pytest.mark.parametrize("case", sorted(REFERENCE))
def test_accumulation_matches_the_official_openai_package_on_the_same_bytes(
    runtime: Runtime, provider: ScriptedProvider, case: str
) -> None:
    from openai import OpenAI  # here: importing it takes half a second of every collection

    reply = REFERENCE[case]
    provider.add(reply)
    client = OpenAI(api_key="unused", base_url=provider.base_url, max_retries=0)
    with client.chat.completions.stream(model="scripted-model", messages=[{"role": "user", "content": "go"}]) as stream:
        reference = stream.get_final_completion().choices[0].message
    ours = first_assistant(runtime, provider, reply)
    # "no text" is None here and "" there when the role chunk carried content "": the same
    # message (the non-streaming API itself says null for a tool-call-only message)
    assert ours.content == (reference.content or None)
    assert [(c.id, c.function.name, c.function.arguments) for c in reference.tool_calls or []] == [
        (c.id, c.name, c.arguments) for c in ours.tool_calls or []
    ]


# -- retries and timeouts -------------------------------------------------------------------


def test_429_is_retried_after_its_retry_after(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(fail(429, "slow down", retry_after=0.4), say("ok now"))
    turn = runtime.run(
        "go", provider=provider.provider(retry=RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=5))
    )
    events = list(turn.events(timeout=30))
    retries = [e for e in events if isinstance(e, TurnRetrying)]
    assert [(r.attempt, r.reason) for r in retries] == [
        (1, 'the provider answered HTTP 429: {"error": {"message": "slow down", "type": "scripted"}}')
    ]
    assert retries[0].delay >= 0.4
    first, second = provider.requests
    assert second.received_at - first.received_at >= 0.4
    assert summary(events)[-2:] == [("text", "ok now"), ("finish", "stop")]


def test_503_twice_then_success(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(fail(503, "busy"), fail(503, "busy"), say("third time lucky"))
    events = list(runtime.run("go").events(timeout=30))
    assert summary(events) == [
        ("turn_started",),
        ("turn_retrying",),
        ("turn_retrying",),
        ("text", "third time lucky"),
        ("finish", "stop"),
    ]
    assert [e.attempt for e in events if isinstance(e, TurnRetrying)] == [1, 2]
    assert len(provider.requests) == 3


def test_a_failure_after_the_first_delta_is_not_retried_and_text_is_not_repeated(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("alpha beta gamma delta", cut_after=2), say("must not be asked for"))
    turn = runtime.run("go")
    events = list(turn.events(timeout=30))
    assert "".join(e.text for e in events if e.kind == "text_delta") == "alpha beta "
    assert [e.kind for e in events][-2:] == ["error", "finish"]
    assert len(provider.requests) == 1
    assert turn.result(30).messages[-1] == ChatMessage.assistant("alpha beta ")


def test_a_stream_silent_longer_than_the_read_timeout_ends_with_a_clear_error(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("one two three", stall_after=1))
    config = provider.provider(timeouts=Timeouts(connect=5, read=0.5, total=60), retry=RetryPolicy(max_attempts=1))
    events = list(runtime.run("go", provider=config).events(timeout=30))
    assert summary(events)[-3:] == [
        ("text", "one "),
        ("error", "read_timeout", "the provider sent nothing for 0.5 s"),
        ("finish", "error"),
    ]
    assert provider.requests[0].disconnected.wait(30)


def test_a_stream_longer_than_the_total_timeout_ends_with_a_clear_error_and_the_next_stream_is_served(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("one two three", stall_after=1), say("fine"))
    config = provider.provider(timeouts=Timeouts(connect=5, read=30, total=0.5), retry=RetryPolicy(max_attempts=1))
    events = list(runtime.run("go", provider=config).events(timeout=30))
    assert summary(events)[-3:] == [
        ("text", "one "),
        ("error", "total_timeout", "the provider stream took longer than 0.5 s"),
        ("finish", "error"),
    ]
    assert provider.requests[0].disconnected.wait(30)
    assert runtime.run("again", provider=config).result(30).text == "fine"  # on a client that was not aborted


def test_a_bad_request_is_not_retried(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(fail(401, "bad key"))
    events = list(runtime.run("go").events(timeout=30))
    assert summary(events)[-2:] == [
        (
            "error",
            "http_error",
            'the provider answered HTTP 401: {"error": {"message": "bad key", "type": "scripted"}}',
        ),
        ("finish", "error"),
    ]
    assert len(provider.requests) == 1


def test_the_api_key_is_read_from_the_named_variable_and_sent_only_to_the_provider(
    provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREENROOM_TEST_KEY", "sk-test-secret")
    provider.add(say("authorized"))
    config = provider.provider(api_key_env="GREENROOM_TEST_KEY")
    with Runtime(config) as rt:  # the actors inherit the environment at start
        turn = rt.run("go")
        assert turn.result(30).text == "authorized"
        assert all("sk-test-secret" not in json.dumps(e.model_dump(mode="json")) for e in turn.all_events)
    assert provider.requests[0].headers["authorization"] == "Bearer sk-test-secret"
    assert "sk-test" not in config.model_dump_json()


# -- Anthropic ------------------------------------------------------------------------------


def test_a_full_turn_with_tools_and_an_approval_on_the_anthropic_api(
    provider: ScriptedProvider, fast_retry: RetryPolicy
) -> None:
    provider.add(
        use_tools(
            call("add", {"a": 2, "b": 3}),
            call("write_file", {"path": "/etc/motd", "text": "hi"}),
            text="Working on it.",
            fragments=3,
        ),
        say("Added and written."),
    )
    config: ProviderConfig = provider.provider(api="anthropic", max_tokens=256, retry=fast_retry)
    with Runtime(config) as rt:
        turn = rt.run(
            [ChatMessage.system("Be brief."), ChatMessage.user("add and write")],
            tools=[T.add, T.write_file],
            options=TurnOptions(),
        )
        first = summary(list(turn.events(timeout=30)))
        assert first[-1] == ("finish", "awaiting_approval") and ("tool_approval_request", "call_2") in first
        turn.approve("call_2")
        result = turn.result(30)
    assert result.messages == [
        ChatMessage.system("Be brief."),
        ChatMessage.user("add and write"),
        ChatMessage.assistant(
            "Working on it.",
            [
                ToolCall(id="call_1", name="add", arguments=ADD_ARGS.replace("1", "2").replace('"b": 2', '"b": 3')),
                ToolCall(id="call_2", name="write_file", arguments='{"path": "/etc/motd", "text": "hi"}'),
            ],
        ),
        ChatMessage.tool(json.dumps({"ok": True, "data": 5}), "call_1", name="add"),
        ChatMessage.tool(
            json.dumps({"ok": True, "data": "would write 2 bytes to /etc/motd"}), "call_2", name="write_file"
        ),
        ChatMessage.assistant("Added and written."),
    ]
    second = provider.requests[1]
    assert second.path == "/v1/messages" and second.body["system"] == "Be brief." and second.body["max_tokens"] == 256
    assert second.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "add and write"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Working on it."},
                {"type": "tool_use", "id": "call_1", "name": "add", "input": {"a": 2, "b": 3}},
                {
                    "type": "tool_use",
                    "id": "call_2",
                    "name": "write_file",
                    "input": {"path": "/etc/motd", "text": "hi"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": json.dumps({"ok": True, "data": 5})},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": json.dumps({"ok": True, "data": "would write 2 bytes to /etc/motd"}),
                },
            ],
        },
    ]
    assert [t["name"] for t in second.body["tools"]] == ["add", "write_file"]
    assert second.body["tools"][0]["input_schema"]["required"] == ["a", "b"]


def test_an_anthropic_base_url_reaches_v1_messages_with_or_without_its_v1(
    runtime: Runtime, provider: ScriptedProvider, fast_retry: RetryPolicy
) -> None:
    root = f"http://127.0.0.1:{provider.port}"
    wrong = httpx.post(root + "/v1/v1/messages", json={"model": "m", "messages": [], "stream": True}, timeout=30)
    assert wrong.status_code == 404  # as Anthropic answers it: a doubled /v1 cannot pass unseen
    for suffix in ("", "/", "/v1", "/v1/"):
        provider.add(use_tools(call("add", {"a": 2, "b": 3})), say(f"5 via {suffix!r}."))
        config = ProviderConfig(api="anthropic", base_url=root + suffix, model="m", retry=fast_retry)
        result = runtime.run("add", tools=[T.add], provider=config).result(30)
        assert (result.finish_reason, result.text) == ("stop", f"5 via {suffix!r}.")
        assert result.messages[2] == ChatMessage.tool(json.dumps({"ok": True, "data": 5}), "call_1", name="add")
    assert [(r.api, r.path) for r in provider.requests] == [("anthropic", "/v1/messages")] * 8


# -- 200 answers that are not event streams ------------------------------------------------


def test_a_non_streaming_chat_completion_is_the_whole_answer(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(say("Hello from a server that ignores stream.", non_streaming=True, usage=(21, 8)))
    turn = runtime.run("go")
    assert summary(list(turn.events(timeout=30))) == [
        ("turn_started",),
        ("text", "Hello from a server that ignores stream."),
        ("finish", "stop"),
    ]
    result = turn.result(30)
    assert result.messages == [
        ChatMessage.user("go"),
        ChatMessage.assistant("Hello from a server that ignores stream."),
    ]
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens) == (21, 8, 29)


def test_a_non_streaming_chat_completion_with_a_tool_call_runs_the_tool_and_the_turn_goes_on(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("add", {"a": 1, "b": 2}), text="Adding.", non_streaming=True), say("It is 3."))
    result = runtime.run("go", tools=[T.add]).result(30)
    assert result.finish_reason == "stop"
    assert result.messages == [
        ChatMessage.user("go"),
        ChatMessage.assistant("Adding.", [ToolCall(id="call_1", name="add", arguments=ADD_ARGS)]),
        ChatMessage.tool(json.dumps({"ok": True, "data": 3}), "call_1", name="add"),
        ChatMessage.assistant("It is 3."),
    ]
    assert provider.requests[1].messages[-1] == {
        "role": "tool",
        "content": json.dumps({"ok": True, "data": 3}),
        "tool_call_id": "call_1",
    }


HTML_PAGE = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body>" + b"<p>proxy login</p>" * 20


@pytest.mark.parametrize(
    ("content_type", "body", "described"),
    [
        ("text/html; charset=utf-8", HTML_PAGE, "content-type text/html; charset=utf-8"),
        ("text/plain", b"upstream connect error", "content-type text/plain"),
        (None, b"upstream connect error", "no content-type"),
        ("application/json", b'{"status": "ok"}', "content-type application/json"),
    ],
    ids=["html_page", "plain_text", "no_content_type", "json_that_is_not_a_completion"],
)
def test_a_200_answer_that_is_neither_a_stream_nor_a_completion_ends_with_an_error_naming_it(
    runtime: Runtime, provider: ScriptedProvider, content_type: str | None, body: bytes, described: str
) -> None:
    provider.add(raw_response(200, content_type, body), say("must not be asked for"))
    events = list(runtime.run("go").events(timeout=30))
    message = f"the provider answered 200 with {described}, not an event stream: {body[:200]!r}"
    assert summary(events) == [("turn_started",), ("error", "not_an_event_stream", message), ("finish", "error")]
    assert len(provider.requests) == 1


def test_an_error_object_answered_with_200_ends_the_turn_with_a_provider_error(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    body = json.dumps({"error": {"message": "quota exceeded", "type": "insufficient_quota"}}).encode()
    provider.add(raw_response(200, "application/json", body))
    events = list(runtime.run("go").events(timeout=30))
    assert summary(events)[-2:] == [
        ("error", "provider_error", "the provider answered 200 with an error: quota exceeded"),
        ("finish", "error"),
    ]


@pytest.mark.parametrize(
    "body", [b"data: [DONE]\n\n", b"", b": ping\n\ndata: [DONE]\n\n"], ids=["only_done", "nothing", "only_a_comment"]
)
def test_an_event_stream_without_any_data_ends_with_empty_stream(
    runtime: Runtime, provider: ScriptedProvider, body: bytes
) -> None:
    provider.add(raw_response(200, "text/event-stream", body))
    events = list(runtime.run("go").events(timeout=30))
    assert summary(events) == [
        ("turn_started",),
        ("error", "empty_stream", "the provider's event stream ended without any data"),
        ("finish", "error"),
    ]
    assert len(provider.requests) == 1


def test_a_stream_of_one_empty_delta_is_still_an_answer(runtime: Runtime, provider: ScriptedProvider) -> None:
    body = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
    provider.add(raw_response(200, "text/event-stream", body))
    events = list(runtime.run("go").events(timeout=30))
    assert summary(events) == [("turn_started",), ("finish", "stop")]


def test_an_event_stream_sent_without_a_content_type_is_still_streamed(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    body = b"".join(
        b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": word}}]}).encode() + b"\n\n"
        for word in ("no ", "header")
    )
    provider.add(raw_response(200, None, b": ping\n\n" + body + b"data: [DONE]\n\n"))
    result = runtime.run("go").result(30)
    assert (result.finish_reason, result.messages[-1]) == ("stop", ChatMessage.assistant("no header"))


def test_non_streaming_messages_responses_on_the_anthropic_api(
    provider: ScriptedProvider, fast_retry: RetryPolicy
) -> None:
    provider.add(
        use_tools(call("add", {"a": 1, "b": 2}), text="Adding.", non_streaming=True, usage=(11, 5)),
        say("It is 3.", non_streaming=True, usage=(30, 4)),
    )
    with Runtime(provider.provider(api="anthropic", retry=fast_retry)) as rt:
        turn = rt.run("go", tools=[T.add])
        events = summary(list(turn.events(timeout=30)))
        result = turn.result(30)
    assert events[-2:] == [("text", "It is 3."), ("finish", "stop")]
    assert result.messages == [
        ChatMessage.user("go"),
        ChatMessage.assistant("Adding.", [ToolCall(id="call_1", name="add", arguments=ADD_ARGS)]),
        ChatMessage.tool(json.dumps({"ok": True, "data": 3}), "call_1", name="add"),
        ChatMessage.assistant("It is 3."),
    ]
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (41, 9)
    assert provider.requests[1].body["messages"][1]["content"] == [
        {"type": "text", "text": "Adding."},
        {"type": "tool_use", "id": "call_1", "name": "add", "input": {"a": 1, "b": 2}},
    ]
