"""Every command gets an answer, every fault an end, and one bad input harms one turn at most."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from actors import ConfigurationError, ControlRejected, Runtime
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.turn.history import history_problems
from messages import CancelTurn, ChatMessage, Finish, StopTurn, ToolProgress, new_turn_id

from . import tools_for_tests as T
from .helpers import summary

pytestmark = pytest.mark.integration

STOPPED = [("turn_started",), ("error", "stopped", "Agent run stopped"), ("finish", "stopped")]


# -- commands that used to be lost -------------------------------------------------------------


def test_a_stop_sent_right_after_run_always_ends_the_turn(runtime: Runtime, provider: ScriptedProvider) -> None:
    for _ in range(30):
        provider.add(say(" ".join(["word"] * 100), hold_after=10, hold=threading.Event()))  # ends only if stopped
        turn = runtime.run("talk")
        turn.stop("right away")
        assert turn.result(30).finish_reason == "stopped"


def test_a_command_that_overtakes_its_turn_is_held_and_applied_first(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    for command in (StopTurn, CancelTurn):
        provider.add(say("never streamed"))
        turn_id = new_turn_id()
        reply = runtime._command(command(turn_id=turn_id, reason="early"))  # leaves before the StartTurn
        turn = runtime.run("talk", turn_id=turn_id)
        assert reply.result(10).ok
        expected = (
            STOPPED
            if command is StopTurn
            else [STOPPED[0], ("error", "cancelled", "Agent run cancelled"), ("finish", "cancelled")]
        )
        assert summary(list(turn.events(timeout=30))) == expected


def test_a_command_for_a_turn_that_never_starts_is_answered_unknown_turn_once_it_was_held(
    provider: ScriptedProvider,
) -> None:
    # held command_hold seconds for a StartTurn that may still be on its way (30 s by default)
    with Runtime(provider.provider(), hosts=1, tool_processes=0, command_hold=0.5) as rt:
        reply = rt.control(StopTurn(turn_id="turn_nobody"), timeout=10)
    assert (reply.ok, reply.code, reply.message) == (False, "unknown_turn", "no turn turn_nobody")


def test_control_of_a_turn_no_host_knows_answers_unknown_turn_within_its_default_timeout(runtime: Runtime) -> None:
    # issue 30: held command_hold (30 s) for a StartTurn that may still be on its way, past
    # control()'s own 10 s: the caller got TurnTimeout, never unknown_turn
    reply = runtime.control(StopTurn(turn_id="turn_nobody"))
    assert (reply.ok, reply.code, reply.message) == (False, "unknown_turn", "no turn turn_nobody")


def test_attaching_to_an_unknown_turn_raises_at_once(runtime: Runtime) -> None:
    with pytest.raises(ControlRejected) as refused:
        runtime.attach("turn_nobody")
    assert (refused.value.code, str(refused.value)) == ("unknown_turn", "no turn turn_nobody")


def test_running_a_turn_id_that_is_running_raises_and_the_first_handle_keeps_its_events(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("the first one", delay=0.05))
    first = runtime.run("one", turn_id="turn_twice")
    with pytest.raises(ControlRejected) as refused:
        runtime.run("two", turn_id="turn_twice")
    assert refused.value.code == "invalid"
    assert first.result(30).text == "the first one"


def test_a_run_refused_by_its_checks_leaves_its_turn_id_free(runtime: Runtime, provider: ScriptedProvider) -> None:
    with pytest.raises(ConfigurationError, match="a lambda"):
        runtime.run("one", turn_id="turn_checked", tools=[lambda: None])
    provider.add(say("the id was free"))
    assert runtime.run("two", turn_id="turn_checked").result(30).text == "the id was free"


# -- bad input harms one turn at most ---------------------------------------------------------


def test_lone_surrogates_from_a_tool_and_from_the_model_are_made_safe_and_the_store_goes_on(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("weird_text", {})), say("bad \ud800 text"), say("fine"))
    with Runtime(provider.provider(), store=tmp_path / "turns.db") as rt:
        result = rt.run("go", tools=[T.weird_text]).result(30)
        other = rt.run("hello").result(30)
    assert result.finish_reason == "stop"
    assert result.messages[2].content == json.dumps({"ok": True, "data": "report-\ufffd.txt"}, ensure_ascii=False)
    assert result.text == "bad \ufffd text"
    assert other.text == "fine"


@pytest.mark.parametrize("depth", [300, 1000])
def test_tool_arguments_nested_too_deep_fail_that_call_clearly(
    provider: ScriptedProvider, tmp_path: Path, depth: int
) -> None:
    arguments = '{"a": ' + "[" * depth + "]" * depth + ', "b": 1}'
    provider.add(use_tools(call("add", arguments)), say("ok"))
    with Runtime(provider.provider(), store=tmp_path / "turns.db") as rt:
        result = rt.run("go", tools=[T.add]).result(30)
    assert result.finish_reason == "stop"
    error = json.loads(result.messages[2].content or "")["error"]
    expected = "nested deeper than 64 levels" if depth == 300 else "not valid JSON"
    assert error.startswith("Invalid arguments for tool 'add': ") and expected in error
    assert history_problems(result.messages) == []


def test_an_event_that_cannot_be_encoded_is_replaced_by_an_error_and_the_turn_ends(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("unencodable_progress", {})), say("done"))
    events = list(runtime.run("go", tools=[T.unencodable_progress]).events(timeout=30))
    assert summary(events) == [
        ("turn_started",),
        ("tool_call_started", "call_1"),
        ("error", "event_lost", "a tool_progress event could not be encoded and was dropped"),
        ("tool_finished", "call_1", "success"),
        ("text", "done"),
        ("finish", "stop"),
    ]
    assert [e.seq for e in events] == list(range(len(events)))


def test_two_tool_calls_sharing_an_id_get_distinct_ids_and_both_answers(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(
        use_tools(call("add", {"a": 1, "b": 2}, id="call_x"), call("add", {"a": 3, "b": 4}, id="call_x")),
        say("3 and 7"),
    )
    result = runtime.run("go", tools=[T.add]).result(30)
    assert result.finish_reason == "stop"
    assistant = result.messages[1]
    assert [c.id for c in assistant.tool_calls or []] == ["call_x", "call_x_2"]
    assert [(m.tool_call_id, m.content) for m in result.messages[2:4]] == [
        ("call_x", json.dumps({"ok": True, "data": 3})),
        ("call_x_2", json.dumps({"ok": True, "data": 7})),
    ]


def test_tool_processes_do_not_see_the_provider_key(
    provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREENROOM_TEST_KEY", "sk-secret")
    provider.add(use_tools(call("show_env", {"name": "GREENROOM_TEST_KEY"})), say("ok"))
    with Runtime(provider.provider(api_key_env="GREENROOM_TEST_KEY")) as rt:
        result = rt.run("go", tools=[T.show_env]).result(30)
    assert provider.requests[0].headers["authorization"] == "Bearer sk-secret"
    assert result.messages[2].content == json.dumps({"ok": True, "data": None})


# -- a host that dies ------------------------------------------------------------------------


@pytest.mark.parametrize("durable", [False, True])
def test_a_turn_host_killed_mid_turn_ends_or_recovers_its_turn(
    provider: ScriptedProvider, tmp_path: Path, durable: bool
) -> None:
    provider.add(use_tools(call("host_pid", {"wait": True})))
    if durable:
        provider.add(say("after the crash"))  # the recovered turn asks the model again
    store = tmp_path / "turns.db" if durable else None
    with Runtime(provider.provider(), hosts=1, store=store) as rt:
        turn = rt.run("where", tools=[T.host_pid])
        host = turn.wait_for(lambda e: isinstance(e, ToolProgress)).data["pid"]
        os.kill(host, signal.SIGKILL)
        finish = turn.wait_for(lambda e: isinstance(e, Finish) and e.terminal, timeout=30)
        events = turn.all_events
        if durable:
            assert finish.finish_reason == "stop"
            assert finish.messages[-1] == ChatMessage.assistant("after the crash")
        else:
            assert summary(events)[-2:] == [("error", "host_lost", "Agent run lost"), ("finish", "error")]
        provider.add(say("the new host works"))
        assert rt.run("again").result(30).text == "the new host works"
    assert [e.seq for e in events] == sorted({e.seq for e in events})


# -- what a durable runtime leaves on disk ---------------------------------------------------


def test_the_store_and_every_file_beside_it_are_readable_by_their_owner_only(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(say("kept"))
    store = tmp_path / "turns.db"
    old = os.umask(0o022)
    try:
        with Runtime(provider.provider(), hosts=1, tool_processes=1, store=store) as rt:
            assert rt.run("hi").result(30).text == "kept"
            beside = sorted(p.name for p in tmp_path.iterdir())
            modes = {p.name: oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()}
    finally:
        os.umask(old)
    assert beside == ["turns.db", "turns.db-shm", "turns.db-wal", "turns.db.lock", "turns.db.runtime.json"]
    assert modes == dict.fromkeys(beside, "0o600")


# -- a call that overtakes its tool process's set-up -------------------------------------------


def test_a_call_that_arrives_before_its_tool_process_is_set_up_runs_once_it_is(runtime: Runtime) -> None:
    from actors.tools.definition import tool_specs
    from actors.wire.protocol import WorkerInit
    from messages import RunTool, ToolAlive, ToolCall, ToolResult

    from .actors_for_tests import CallFirst, OvertakingHost

    run = RunTool(
        turn_id="t",
        root_turn_id="t",
        call=ToolCall(id="c1", name="add", arguments='{"a": 2, "b": 3}'),
        spec=tool_specs([T.add])[0],
        arguments={"a": 2, "b": 3},
        idempotency_key="t:c1",
        heartbeat=60.0,
    )
    init = WorkerInit(directory=runtime.directory, recycle_after=0, node="node-a")
    asys = runtime.actor_system
    seen = asys.ask(asys.createActor(OvertakingHost), CallFirst(run, init), 30)
    assert [type(m) for m in seen] == [ToolAlive, ToolResult]
    assert seen[0].node == "node-a"  # the call ran with its process's set-up, not before it
    assert seen[1].content == json.dumps({"ok": True, "data": 5})
