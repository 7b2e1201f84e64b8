"""Sub-agents: a tool that runs a child turn; ids, answers, and stop reaching descendants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors import Runtime
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import ChatMessage, Finish, RetryPolicy, ToolApprovalRequest, ToolProgress

from . import tools_for_tests as T
from .conftest import group_members
from .helpers import wait_until

pytestmark = pytest.mark.integration


def child_events(events: list) -> list[dict]:
    return [
        e.data["event"]
        for e in events
        if isinstance(e, ToolProgress) and isinstance(e.data, dict) and "child_turn_id" in e.data
    ]


def test_the_child_answer_becomes_the_parent_tool_result(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(
        use_tools(call("delegate", {"task": "what is six times seven?"})), say("Forty-two."), say("The helper says 42.")
    )
    turn = runtime.run("ask the helper", tools=[T.delegate])
    result = turn.result(60)
    assert result.finish_reason == "stop"
    assert result.messages[2] == ChatMessage.tool(
        json.dumps({"ok": True, "data": "Forty-two."}), "call_1", name="delegate"
    )
    assert result.text == "The helper says 42."
    nested = child_events(turn.all_events)
    assert [e["kind"] for e in nested] == ["turn_started", "text_delta", "finish"]
    assert {(e["parent_turn_id"], e["root_turn_id"]) for e in nested} == {(turn.turn_id, turn.turn_id)}
    child_request = provider.requests[1].messages
    assert child_request == [
        {"role": "system", "content": "You are a helper agent."},
        {"role": "user", "content": "what is six times seven?"},
    ]


def test_a_child_turn_is_stopped_through_its_parent_down_to_its_subprocesses(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(
        use_tools(call("delegate", {"task": "build it"})),
        use_tools(call("shell", {"command": "sleep 300 & sleep 300"})),
    )
    with Runtime(provider.provider(retry=RetryPolicy(max_attempts=1)), store=tmp_path / "turns.db") as rt:
        parent = rt.run("delegate the build", tools=[T.delegate])
        shell_progress = parent.wait_for(
            lambda e: (
                isinstance(e, ToolProgress)
                and isinstance(e.data, dict)
                and e.data.get("event", {}).get("kind") == "tool_progress"
            ),
            timeout=60,
        )
        child_id = shell_progress.data["child_turn_id"]
        pgid = shell_progress.data["event"]["data"]["pgid"]
        assert group_members(pgid)
        parent.stop("the user pressed stop")
        assert parent.result(30).finish_reason == "stopped"
        assert wait_until(lambda: group_members(pgid) == []), "the child's tool processes survived"
        child = rt.attach(child_id)
        finish = child.wait_for(lambda e: isinstance(e, Finish), timeout=30)
    assert finish.finish_reason == "stopped"
    assert (finish.parent_turn_id, finish.root_turn_id) == (parent.turn_id, parent.turn_id)
    assert finish.messages[-1].role == "tool"  # the child's history stays valid too


def test_a_cancel_of_the_parent_reaches_the_child_turn(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    marker = tmp_path / "child-finished"
    provider.add(
        use_tools(call("delegate_work", {"marker": str(marker)})),
        use_tools(call("cooperative", {"marker": str(marker)})),
    )
    parent = runtime.run("delegate the work", tools=[T.delegate_work])
    working = parent.wait_for(
        lambda e: (
            isinstance(e, ToolProgress)
            and isinstance(e.data, dict)
            and e.data.get("event", {}).get("kind") == "tool_progress"
        ),
        timeout=60,
    )
    child_id = working.data["child_turn_id"]
    parent.cancel("wind everything down")
    result = parent.result(60)
    assert result.finish_reason == "cancelled"
    nested = child_events(parent.all_events)
    assert [e["kind"] for e in nested][-2:] == ["error", "finish"]
    assert nested[-1]["finish_reason"] == "cancelled" and nested[-1]["turn_id"] == child_id
    assert nested[-2]["detail"] == "parent call cancelled: wind everything down"
    assert not marker.exists()


def test_a_child_turns_approval_request_reaches_the_parents_caller_and_is_decided_there(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.txt"
    provider.add(
        use_tools(call("delegate_gated", {"path": str(keys)})),
        use_tools(call("append_key", {"path": str(keys)})),
        say("The child recorded it."),
        say("Done, through the child."),
    )
    parent = runtime.run("delegate", tools=[T.delegate_gated])
    request = parent.wait_for(lambda e: isinstance(e, ToolApprovalRequest), timeout=60)
    assert (request.call_id, request.name, request.child_turn_id is not None) == ("call_1", "append_key", True)
    assert request.child_turn_id != parent.turn_id
    parent.approve("call_1", turn_id=request.child_turn_id)
    result = parent.result(60)
    assert result.finish_reason == "stop"
    assert result.messages[2].content == json.dumps({"ok": True, "data": "The child recorded it."})
    assert keys.read_text() == f"{request.child_turn_id}:0:call_1\n"
