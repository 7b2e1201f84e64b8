"""Whole turns on a real multiprocTCPBase system against the scripted HTTP provider."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors import Runtime
from actors.lifecycle.processes import session_processes
from actors.testing import ScriptedProvider, call, fail, say, use_tools
from messages import ChatMessage, ToolCall, TurnOptions

from . import tools_for_tests as T
from .helpers import assert_seq, err, ok, summary

pytestmark = pytest.mark.integration


def test_text_then_two_parallel_tools_then_final_text(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    log = str(tmp_path / "runs.log")
    slow = {"text": "slow", "log": log, "wait_for": "fast done"}
    fast = {"text": "fast", "log": log, "wait_for": "slow started"}
    provider.add(
        use_tools(call("handshake_echo", slow), call("handshake_echo", fast), text="Let me check both."),
        say("Both are done."),
    )
    turn = runtime.run([ChatMessage.system("Be brief."), ChatMessage.user("Check both.")], tools=[T.handshake_echo])
    events = list(turn.events(timeout=30))
    kinds = summary(events)
    assert kinds[:4] + kinds[6:] == [
        ("turn_started",),
        ("text", "Let me check both."),
        ("tool_call_started", "call_1"),
        ("tool_call_started", "call_2"),
        ("text", "Both are done."),
        ("finish", "stop"),
    ]
    # the handshake orders the two tools' work (the log below), not the arrival of their
    # results from two processes: the two ToolFinished events come in either order
    assert sorted(kinds[4:6]) == [("tool_finished", "call_1", "success"), ("tool_finished", "call_2", "success")]
    assert_seq(events)
    args1, args2 = json.dumps(slow), json.dumps(fast)
    assert turn.result(30).messages == [
        ChatMessage.system("Be brief."),
        ChatMessage.user("Check both."),
        ChatMessage.assistant(
            "Let me check both.",
            [
                ToolCall(id="call_1", name="handshake_echo", arguments=args1),
                ToolCall(id="call_2", name="handshake_echo", arguments=args2),
            ],
        ),
        ChatMessage.tool(ok({"echo": "slow"}), "call_1", name="handshake_echo"),
        ChatMessage.tool(ok({"echo": "fast"}), "call_2", name="handshake_echo"),
        ChatMessage.assistant("Both are done."),
    ]
    lines = Path(log).read_text().splitlines()
    assert [x.split()[0:2] for x in lines][2:] == [["fast", "done"], ["slow", "done"]]
    pids = {x.split()[0]: x.split()[2] for x in lines if x.split()[1] == "started"}
    assert pids["slow"] != pids["fast"], "the two calls ran in the same process"
    second = provider.requests[1].messages
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool"]


def test_max_rounds_ends_the_turn_without_another_llm_request(provider: ScriptedProvider, fast_retry) -> None:
    provider.add(use_tools(call("add", {"a": 1, "b": 2})))
    with Runtime(provider.provider(retry=fast_retry)) as rt:
        turn = rt.run("add", tools=[T.add], options=TurnOptions(max_rounds=1))
        events = list(turn.events(timeout=30))
        sid = rt.admin_sid
    assert session_processes(sid) == []
    assert summary(events)[-3:] == [
        ("tool_call_started", "call_1"),
        ("tool_finished", "call_1", "success"),
        ("finish", "max_rounds"),
    ]
    assert events[-1].round == 1
    assert len(provider.requests) == 1
    assert events[-1].messages[-1] == ChatMessage.tool(ok(3), "call_1", name="add")


def test_an_unknown_tool_gets_the_seed_message_and_the_turn_goes_on(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("nope", {})), say("Sorry."))
    turn = runtime.run("go", tools=[T.add])
    result = turn.result(30)
    assert result.finish_reason == "stop"
    assert result.messages[1:] == [
        ChatMessage.assistant(None, [ToolCall(id="call_1", name="nope", arguments="{}")]),
        ChatMessage.tool("Tool 'nope' not found", "call_1", name="nope"),
        ChatMessage.assistant("Sorry."),
    ]
    assert ("tool_finished", "call_1", "failed") in summary(turn.all_events)


def test_invalid_arguments_go_back_to_the_model_saying_what_is_wrong(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(
        use_tools(
            call("add", '{"a": 1,'),
            call("add", {"a": "x", "b": 2}),
            call("add", {"a": 1, "b": 2, "c": 3}),
            call("add", "[1, 2]"),
        ),
        say("Fixed."),
    )
    result = runtime.run("go", tools=[T.add]).result(30)
    tool_contents = [m.content for m in result.messages if m.role == "tool"]
    assert tool_contents == [
        err(
            "Invalid arguments for tool 'add': not valid JSON (Expecting property name enclosed in double quotes: line 1 column 9 (char 8))"
        ),
        err(
            "Invalid arguments for tool 'add': a: Input should be a valid integer, unable to parse string as an integer"
        ),
        err("Invalid arguments for tool 'add': c: Extra inputs are not permitted"),
        err("Invalid arguments for tool 'add': expected a JSON object, got list"),
    ]
    assert result.finish_reason == "stop"


def test_a_tool_that_raises_becomes_an_error_tool_message(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(use_tools(call("boom", {"message": "kaboom"})), say("It failed."))
    turn = runtime.run("go", tools=[T.boom])
    result = turn.result(30)
    assert result.messages[2] == ChatMessage.tool(err("ValueError: kaboom"), "call_1", name="boom")
    assert ("tool_finished", "call_1", "failed") in summary(turn.all_events)


def test_a_provider_http_500_ends_with_an_error_and_finish(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(fail(500, "upstream down"), fail(500, "upstream down"), fail(500, "upstream down"))
    turn = runtime.run("hi")
    events = list(turn.events(timeout=30))
    detail = json.dumps({"error": {"message": "upstream down", "type": "scripted"}})
    assert summary(events) == [
        ("turn_started",),
        ("turn_retrying",),
        ("turn_retrying",),
        ("error", "provider_unavailable", f"the provider answered HTTP 500: {detail} (after 3 attempts)"),
        ("finish", "error"),
    ]
    assert_seq(events)
    assert events[-1].messages == [ChatMessage.user("hi")]


def test_the_runtime_leaves_no_process_behind(provider: ScriptedProvider) -> None:
    provider.add(say("hello"))
    with Runtime(provider.provider()) as rt:
        assert rt.run("hi").result(30).text == "hello"
        sid = rt.admin_sid
        assert sid is not None and len(session_processes(sid)) >= 2
    assert session_processes(sid) == []
