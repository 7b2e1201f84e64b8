"""Human approval of tool calls, end to end: pause, decide, resume, and refuse bad answers."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from actors import ControlRejected, Runtime
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.tools.definition import tool_specs
from messages import CancelTurn, ChatMessage, StartTurn, ToolApprovalResponse, ToolCall, TurnOptions

from . import tools_for_tests as T
from .actors_for_tests import Begin, Report, Seen, Supervisor
from .helpers import assert_seq, ok, summary

pytestmark = pytest.mark.integration


def test_one_gated_call_approved_runs_and_the_turn_goes_on(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    victim = tmp_path / "old.log"
    victim.write_text("x")
    provider.add(use_tools(call("delete_file", {"path": str(victim)})), say("Deleted it."))
    turn = runtime.run("clean up", tools=[T.delete_file])
    first = list(turn.events(timeout=30))
    assert summary(first) == [("turn_started",), ("tool_approval_request", "call_1"), ("finish", "awaiting_approval")]
    request = first[1]
    assert (request.name, request.arguments, request.description) == (
        "delete_file",
        {"path": str(victim)},
        "Delete a file (needs approval).",
    )
    assert first[-1].pending_approvals == ["call_1"]
    assert victim.exists()
    turn.approve("call_1")
    second = list(turn.events(timeout=30))
    assert summary(second) == [
        ("tool_call_started", "call_1"),
        ("tool_finished", "call_1", "success"),
        ("text", "Deleted it."),
        ("finish", "stop"),
    ]
    assert_seq(first + second)
    assert not victim.exists()
    assert turn.result(30).messages == [
        ChatMessage.user("clean up"),
        ChatMessage.assistant(
            None, [ToolCall(id="call_1", name="delete_file", arguments=json.dumps({"path": str(victim)}))]
        ),
        ChatMessage.tool(ok(f"deleted {victim}"), "call_1", name="delete_file"),
        ChatMessage.assistant("Deleted it."),
    ]


@pytest.mark.parametrize("reason, content", [("looks risky", "Rejected: looks risky"), (None, "Rejected: User denied")])
def test_a_denied_call_never_runs_and_the_model_reads_why(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path, reason: str | None, content: str
) -> None:
    victim = tmp_path / "keep.txt"
    victim.write_text("x")
    provider.add(use_tools(call("delete_file", {"path": str(victim)})), say("OK, I left it."))
    turn = runtime.run("clean up", tools=[T.delete_file])
    assert turn.result(30).finish_reason == "awaiting_approval"
    turn.deny("call_1", reason=reason)
    result = turn.result(30)
    assert result.finish_reason == "stop"
    assert result.messages[2] == ChatMessage.tool(content, "call_1", name="delete_file")
    assert victim.exists()
    assert ("tool_finished", "call_1", "denied") in summary(turn.all_events)
    assert [m["role"] for m in provider.requests[1].messages] == ["user", "assistant", "tool"]
    assert provider.requests[1].messages[2]["content"] == content


def test_a_mixed_response_runs_the_safe_call_first_and_asks_only_about_the_gated_one(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(
        use_tools(
            call("write_file", {"path": "/tmp/sandbox/a.txt", "text": "hi"}),
            call("write_file", {"path": "/etc/motd", "text": "hi"}),
        ),
        say("Done."),
    )
    turn = runtime.run("write both", tools=[T.write_file])
    first = summary(list(turn.events(timeout=30)))
    assert first == [
        ("turn_started",),
        ("tool_call_started", "call_1"),
        ("tool_approval_request", "call_2"),
        ("tool_finished", "call_1", "success"),
        ("finish", "awaiting_approval"),
    ]
    turn.approve("call_2")
    result = turn.result(30)
    assert [m.content for m in result.messages if m.role == "tool"] == [
        ok("would write 2 bytes to /tmp/sandbox/a.txt"),
        ok("would write 2 bytes to /etc/motd"),
    ]


def test_two_gated_calls_answered_separately_resume_only_after_the_second(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(
        use_tools(call("write_file", {"path": "/a", "text": "1"}), call("write_file", {"path": "/b", "text": "2"})),
        say("Done."),
    )
    turn = runtime.run("write", tools=[T.write_file])
    assert turn.result(30).finish_reason == "awaiting_approval"
    seen = len(turn.all_events)
    turn.approve("call_2")  # returns once the turn recorded it
    assert len(turn.all_events) == seen and len(provider.requests) == 1
    turn.deny("call_1", reason="no")
    result = turn.result(30)
    assert [m.content for m in result.messages if m.role == "tool"] == ["Rejected: no", ok("would write 1 bytes to /b")]


def test_unknown_duplicate_and_late_responses_are_refused_and_change_nothing(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(
        use_tools(call("write_file", {"path": "/a", "text": "1"}), call("write_file", {"path": "/b", "text": "2"})),
        say("Done."),
    )
    turn = runtime.run("write", tools=[T.write_file])
    assert turn.result(30).finish_reason == "awaiting_approval"
    with pytest.raises(ControlRejected, match="no approval was requested for call 'call_9' in turn ") as unknown:
        turn.approve("call_9")
    assert unknown.value.code == "unknown_call"
    turn.approve("call_1")
    with pytest.raises(ControlRejected, match="call 'call_1' was already approved") as duplicate:
        turn.deny("call_1")
    assert duplicate.value.code == "duplicate"
    turn.approve("call_2")
    result = turn.result(30)
    assert [m.content for m in result.messages if m.role == "tool"] == [
        ok("would write 1 bytes to /a"),
        ok("would write 1 bytes to /b"),
    ]
    with pytest.raises(ControlRejected) as late:
        turn.approve("call_2")
    assert late.value.code == "turn_finished"
    assert len(provider.requests) == 2


def test_approval_then_max_rounds_ends_without_another_llm_request(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("delete_file", {"path": "/nonexistent/x"})))
    turn = runtime.run("go", tools=[T.delete_file], options=TurnOptions(max_rounds=1))
    assert turn.result(30).finish_reason == "awaiting_approval"
    turn.approve("call_1")
    result = turn.result(30)
    assert result.finish_reason == "max_rounds"
    assert json.loads(result.messages[-1].content)["ok"] is False  # the file did not exist
    assert len(provider.requests) == 1


def test_the_approval_timeout_denies_what_is_still_undecided(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(use_tools(call("delete_file", {"path": "/nonexistent/x"})), say("Timed out, fine."))
    turn = runtime.run("go", tools=[T.delete_file], options=TurnOptions(approval_timeout=0.3))
    assert summary(list(turn.events(timeout=30)))[-1] == ("finish", "awaiting_approval")
    assert summary(list(turn.events(timeout=30)))[-3:] == [
        ("tool_finished", "call_1", "denied"),
        ("text", "Timed out, fine."),
        ("finish", "stop"),
    ]
    result = turn.result(30)
    assert result.finish_reason == "stop"
    assert result.messages[2] == ChatMessage.tool("Rejected: Approval timed out", "call_1", name="delete_file")


def test_deny_rest_denies_every_undecided_call_at_once(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(
        use_tools(call("write_file", {"path": "/a", "text": "1"}), call("write_file", {"path": "/b", "text": "2"})),
        say("Done."),
    )
    turn = runtime.run("write", tools=[T.write_file])
    assert turn.result(30).finish_reason == "awaiting_approval"
    turn.respond([ToolApprovalResponse(call_id="call_2", approved=True)], deny_rest=True, deny_reason="one is enough")
    result = turn.result(30)
    assert [m.content for m in result.messages if m.role == "tool"] == [
        "Rejected: one is enough",
        ok("would write 1 bytes to /b"),
    ]


def test_the_scripted_provider_refuses_a_history_that_breaks_tool_call_pairing(provider: ScriptedProvider) -> None:
    broken = {
        "model": "m",
        "stream": True,
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "user", "content": "and?"},
        ],
    }
    response = httpx.post(provider.base_url + "/chat/completions", json=broken, timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "message 2: tool call(s) 'c1' have no tool message"


def supervise(runtime: Runtime, start: StartTurn, burst: list, replies: int = 0) -> Seen:
    asys = runtime.actor_system
    sup = asys.createActor(Supervisor)
    asys.tell(sup, Begin(start, burst, replies))
    seen = asys.ask(sup, Report(), 60)
    assert isinstance(seen, Seen), seen
    return seen


def test_a_supervisor_actor_approves_by_message(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(use_tools(call("write_file", {"path": "/etc/x", "text": "y"})), say("Written."))
    start = StartTurn(messages=[ChatMessage.user("w")], tools=tool_specs([T.write_file]), provider=runtime.provider)
    seen = supervise(
        runtime,
        start,
        [ToolApprovalResponse(turn_id=start.turn_id, call_id="call_1", approved=True, request_id="r1")],
        replies=1,
    )
    assert summary(seen.events)[-4:] == [
        ("tool_call_started", "call_1"),
        ("tool_finished", "call_1", "success"),
        ("text", "Written."),
        ("finish", "stop"),
    ]
    assert [(r.command, r.ok) for r in seen.replies] == [("tool_approval_response", True)]


def test_an_approval_then_a_cancel_back_to_back_ends_cancelled_and_the_tool_never_starts(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("write_file", {"path": "/etc/x", "text": "y"})))
    # a window far longer than the gap between the two messages: the cancel arrives inside it
    options = TurnOptions(approval_window=30)
    tools = tool_specs([T.write_file])
    start = StartTurn(messages=[ChatMessage.user("w")], tools=tools, provider=runtime.provider, options=options)
    burst = [
        ToolApprovalResponse(turn_id=start.turn_id, call_id="call_1", approved=True),
        CancelTurn(turn_id=start.turn_id, reason="supervisor"),
    ]
    seen = supervise(runtime, start, burst)
    kinds = summary(seen.events)
    assert ("tool_call_started", "call_1") not in kinds
    assert kinds[-3:] == [
        ("tool_finished", "call_1", "interrupted"),
        ("error", "cancelled", "Agent run cancelled"),
        ("finish", "cancelled"),
    ]
    assert len(provider.requests) == 1


def test_a_cancel_then_an_approval_back_to_back_ends_cancelled_and_the_approval_is_refused(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("write_file", {"path": "/etc/x", "text": "y"})))
    start = StartTurn(messages=[ChatMessage.user("w")], tools=tool_specs([T.write_file]), provider=runtime.provider)
    burst = [
        CancelTurn(turn_id=start.turn_id, reason="supervisor"),
        ToolApprovalResponse(turn_id=start.turn_id, call_id="call_1", approved=True),
    ]
    seen = supervise(runtime, start, burst, replies=1)
    assert ("tool_call_started", "call_1") not in summary(seen.events)
    assert summary(seen.events)[-1] == ("finish", "cancelled")
    # the cancel's step runs in the turn's mailbox before the host reads the next message
    assert [(r.command, r.ok, r.code) for r in seen.replies] == [("tool_approval_response", False, "turn_finished")]
