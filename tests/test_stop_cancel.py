"""Stop acts now on every stream, tool and subprocess; cancel waits for the next boundary."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors import Runtime
from actors.providers.openai import to_openai_message
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.turn.results import interrupted_content, with_note
from messages import (
    ChatMessage,
    Error,
    Finish,
    StopTurn,
    TextDelta,
    ToolCallStarted,
    ToolFinished,
    ToolProgress,
    TurnOptions,
)

from . import tools_for_tests as T
from .conftest import group_members
from .helpers import assert_seq, pid_alive, summary, wait_until

pytestmark = pytest.mark.integration


def provider_accepts(provider: ScriptedProvider, messages: list[ChatMessage]) -> None:
    """The strict pairing check of the scripted provider accepts ``messages`` followed by a
    new user message, as the next turn of the conversation would send them."""
    provider.add(say("ok"))
    body = {
        "model": "m",
        "stream": True,
        "messages": [to_openai_message(m) for m in messages] + [{"role": "user", "content": "next"}],
    }
    response = httpx.post(provider.base_url + "/chat/completions", json=body, timeout=10)
    assert response.status_code == 200, response.text


def test_stop_while_the_model_streams_closes_the_connection_and_drops_later_deltas(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    text = " ".join(f"w{i}" for i in range(200))
    # deltas flow for 2 s, then the stream holds until it is closed: it cannot end before the stop
    provider.add(say(text, delay=0.02, hold_after=100, hold=threading.Event()))
    turn = runtime.run("talk")
    turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
    turn.stop("user pressed stop")
    events = list(turn.events(timeout=30))
    assert provider.requests[0].disconnected.wait(30), "the provider did not see the connection close"
    assert summary(events)[-2:] == [("error", "stopped", "Agent run stopped"), ("finish", "stopped")]
    assert events[-2].detail == "user pressed stop"
    assert_seq(events)
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert 0 < len(streamed) < len(text) and text.startswith(streamed)
    result = turn.result(30)
    assert result.messages == [ChatMessage.user("talk"), ChatMessage.assistant(streamed)]
    provider_accepts(provider, result.messages)


def test_stop_while_the_provider_stalls_aborts_at_once(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(say("one two three four five", stall_after=2))
    turn = runtime.run("talk")
    turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
    turn.stop()
    finish = turn.wait_for(lambda e: isinstance(e, Finish), timeout=30)
    assert finish.finish_reason == "stopped"  # a stalled stream would have ended with read_timeout
    assert provider.requests[0].disconnected.wait(30)
    provider_accepts(provider, turn.result(30).messages)


def test_stop_ends_the_whole_process_group_of_a_tool_and_runs_its_callback_once(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    marker = tmp_path / "callback.log"
    provider.add(use_tools(call("shell", {"command": "sleep 300 & sleep 300", "marker": str(marker)})))
    turn = runtime.run("build", tools=[T.shell])
    progress = turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30)
    pgid = progress.data["pgid"]
    assert wait_until(lambda: len(group_members(pgid)) >= 2), "both sleeps should run"
    turn.stop("enough")
    assert wait_until(lambda: group_members(pgid) == []), f"left behind: {group_members(pgid)}"
    result = turn.result(30)
    assert result.finish_reason == "stopped"
    assert result.messages[-1] == ChatMessage.tool(  # as its tool process reported it: run_command raised
        interrupted_content("the call was stopped", "enough"), "call_1", name="shell"
    )
    assert marker.read_text() == "stopped\n"
    provider_accepts(provider, result.messages)


def test_stop_cancels_an_async_tool_at_once_without_waiting_for_the_grace(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    marker = tmp_path / "cancelled.log"
    provider.add(use_tools(call("async_sleeper", {"seconds": 300, "marker": str(marker)})))
    turn = runtime.run("nap", tools=[T.async_sleeper], options=TurnOptions(stop_grace=60))
    pid = turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30).data["pid"]
    turn.stop()
    assert turn.result(30).finish_reason == "stopped"
    # the whole line, not the file alone: it may exist a moment before its line is in it
    assert wait_until(lambda: marker.exists() and marker.read_text().endswith("\n")), "the task was not cancelled"
    assert marker.read_text() == "cancelled\n"  # once, and well before the 60 s grace
    assert pid_alive(pid), "the tool process stays in its pool: its call ended"


def test_a_blocking_tool_is_left_to_its_flag_and_ends_with_its_process_after_the_grace(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    marker = tmp_path / "stop.log"
    provider.add(use_tools(call("wait_for_stop", {"marker": str(marker)})))
    turn = runtime.run("wait", tools=[T.wait_for_stop], options=TurnOptions(stop_grace=0.2))
    turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30)
    turn.stop()
    assert turn.result(30).finish_reason == "stopped"
    assert wait_until(lambda: marker.exists() and marker.read_text() == "stopped\n")


def test_cancel_lets_a_cooperative_tool_leave_at_its_next_check(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    marker = tmp_path / "finished"
    provider.add(use_tools(call("cooperative", {"marker": str(marker)})))
    turn = runtime.run("work", tools=[T.cooperative])
    turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30)
    turn.cancel("supervisor winds down")
    result = turn.result(30)
    result_events = turn.all_events
    assert summary(result_events)[-3:] == [
        ("tool_finished", "call_1", "interrupted"),
        ("error", "cancelled", "Agent run cancelled"),
        ("finish", "cancelled"),
    ]
    assert_seq(result_events)
    assert result.messages[-1].content == interrupted_content("the call was cancelled", "supervisor winds down")
    assert not marker.exists()
    assert len(provider.requests) == 1
    provider_accepts(provider, result.messages)


def test_cancel_lets_the_current_llm_response_complete(runtime: Runtime, provider: ScriptedProvider) -> None:
    text = "one two three four five six seven eight"
    rest = threading.Event()
    provider.add(say(text, hold_after=2, hold=rest))
    turn = runtime.run("talk")
    turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
    turn.cancel("later")
    rest.set()  # the rest of the answer comes only after the cancel was accepted
    result = turn.result(30)
    assert result.finish_reason == "cancelled"
    assert result.messages[-1] == ChatMessage.assistant(text)
    assert not provider.requests[0].disconnected.is_set()
    assert summary(turn.all_events)[-2:] == [("error", "cancelled", "Agent run cancelled"), ("finish", "cancelled")]


def test_cancel_with_a_grace_becomes_a_stop(runtime: Runtime, provider: ScriptedProvider, tmp_path: Path) -> None:
    provider.add(use_tools(call("shell", {"command": "sleep 300"})))
    turn = runtime.run("build", tools=[T.shell])
    pgid = turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30).data["pgid"]
    turn.cancel("wind down", grace=0.2)
    result = turn.result(30)
    assert result.finish_reason == "cancelled"
    assert wait_until(lambda: group_members(pgid) == [])
    # the grace made it a stop, which run_command saw once its callback had ended the command
    assert result.messages[-1].content == interrupted_content("the call was stopped", "wind down")


def test_stop_and_cancel_twice_and_stop_after_the_end_have_no_further_effect(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("a b c d e f g h", stall_after=1))
    turn = runtime.run("talk")
    turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
    turn.stop("first")
    turn.stop("second")
    turn.cancel("third")
    events = list(turn.events(timeout=30))
    assert [e.detail for e in events if isinstance(e, Error)] == ["first"]
    assert sum(isinstance(e, Finish) for e in events) == 1
    reply = runtime.control(StopTurn(turn_id=turn.turn_id, reason="after the end"))
    assert (reply.ok, reply.code) == (True, None)
    assert len(turn.all_events) == len(events)


def test_stop_tool_ends_one_of_two_parallel_calls_and_the_turn_goes_on(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    log = str(tmp_path / "runs.log")
    provider.add(
        use_tools(
            call("shell", {"command": "sleep 300"}), call("timed_echo", {"text": "ok", "seconds": 0.5, "log": log})
        ),
        say("One of them was stopped."),
    )
    turn = runtime.run("both", tools=[T.shell, T.timed_echo])
    pgid = turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30).data["pgid"]
    turn.stop_tool("call_1", reason="too slow")
    assert wait_until(lambda: group_members(pgid) == [])
    result = turn.result(30)
    assert result.finish_reason == "stop"
    assert [m.content for m in result.messages if m.role == "tool"] == [
        interrupted_content("the call was stopped", "too slow"),
        json.dumps({"ok": True, "data": {"echo": "ok"}}),
    ]
    assert summary(turn.all_events)[-2:] == [("text", "One of them was stopped."), ("finish", "stop")]
    provider_accepts(provider, result.messages)


def test_a_tool_that_fails_because_its_stop_ended_its_child_ends_interrupted_naming_the_error(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("count_child_output", {})), say("It was stopped."))
    turn = runtime.run("count", tools=[T.count_child_output])
    child = turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30).data["child"]
    turn.stop_tool("call_1", reason="enough")
    finished = turn.wait_for(lambda e: isinstance(e, ToolFinished), timeout=30)
    assert finished.outcome == "interrupted"
    expected = interrupted_content("the call was stopped", "enough")
    assert finished.content == with_note(expected, "it raised ValueError: invalid literal for int() with base 10: ''")
    assert turn.result(30).finish_reason == "stop"
    assert wait_until(lambda: not pid_alive(child))


def test_stop_before_a_tool_starts_leaves_a_valid_history(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(use_tools(call("delete_file", {"path": "/x"}), call("add", {"a": 1, "b": 2})))
    turn = runtime.run("go", tools=[T.delete_file, T.add])
    turn.wait_for(lambda e: isinstance(e, ToolCallStarted), timeout=30)
    turn.stop()
    result = turn.result(30)
    tool_messages = [m for m in result.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["call_1", "call_2"]
    provider_accepts(provider, result.messages)


def test_a_blocking_on_stop_delays_neither_the_stop_nor_the_grace_that_ends_the_tools_children(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    release, marker = tmp_path / "release", tmp_path / "marker"
    provider.add(use_tools(call("child_and_blocking_on_stop", {"release": str(release), "marker": str(marker)})))
    turn = runtime.run("go", tools=[T.child_and_blocking_on_stop], options=TurnOptions(stop_grace=0.3))
    child = turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30).data["child"]
    turn.stop("now")
    assert turn.result(30).finish_reason == "stopped"
    assert wait_until(lambda: not pid_alive(child), timeout=10), "the grace did not end the tool's child"
    assert not marker.exists(), "the callback still blocks: the grace did not wait for it"
    release.write_text("go")


def test_an_inline_on_stop_that_blocks_holds_up_no_other_turn_of_its_host(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    provider.add(use_tools(call("inline_blocking_on_stop", {"release": str(release)})))
    blocked = runtime.run("block", tools=[T.inline_blocking_on_stop])
    host = blocked.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30).data["pid"]
    blocked.stop("now")
    assert blocked.result(30).finish_reason == "stopped"
    provider.add(use_tools(call("host_pid", {})), say("still here"))
    other = runtime.run("next", tools=[T.host_pid])  # one host: the same process
    assert other.result(30).text == "still here"
    assert json.loads(other.result().messages[2].content or "")["data"] == host
    release.write_text("go")


def test_an_inline_on_stop_raising_system_exit_fails_that_callback_alone(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("inline_exiting_on_stop", {})))
    first = runtime.run("exit", tools=[T.inline_exiting_on_stop])
    host = first.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30).data["pid"]
    first.stop("now")
    assert first.result(30).finish_reason == "stopped"
    provider.add(use_tools(call("host_pid", {})), say("alive"))
    second = runtime.run("again", tools=[T.host_pid])
    assert second.result(30).text == "alive"
    assert json.loads(second.result().messages[2].content or "")["data"] == host, "the host process survived"


def whole_lines(path: Path) -> list[str]:
    """The lines of ``path`` as they are now; a line still being written is waited for (its
    writer is between two bytes), never taken in part."""
    text = [path.read_text() if path.exists() else ""]

    def whole() -> bool:
        if text[0] and not text[0].endswith("\n"):
            text[0] = path.read_text()
        return not text[0] or text[0].endswith("\n")

    assert wait_until(whole, timeout=10), f"a line of {path} was never completed: {text[0]!r}"
    return text[0].splitlines()


@pytest.mark.parametrize("tool", [T.stop_callbacks, T.inline_stop_callbacks], ids=["pooled", "inline_async"])
def test_every_on_stop_callback_has_run_once_when_finish_stopped_arrives_50_runs_in_a_row(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path, tool: Any
) -> None:
    """Issue 36: a raises, b is plain, c is closed before the stop, w is registered in the
    ``with`` block the tool waits in, d after the stop; the turn is stopped twice."""
    for run in range(50):
        log = tmp_path / f"callbacks-{run}.log"
        provider.add(use_tools(call(tool.spec.name, {"log": str(log)})))
        turn = runtime.run("index", tools=[tool])
        turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30)
        turn.stop("first")
        turn.stop("second")
        events, lines = [], []
        for event in turn.events(timeout=30):
            events.append(event)
            if isinstance(event, Finish):
                lines = whole_lines(log)  # the moment Finish(stopped) arrives
        # a, b and w ran before the tool saw its stop (in any order: each on a thread of its
        # own), then d at once where it was registered, before on_stop returned; c never
        assert (run, sorted(lines[:3]), lines[3:]) == (run, ["a", "b", "w"], ["d", "d-returned"])
        assert summary(events)[-3:] == [
            ("tool_finished", "call_1", "interrupted"),
            ("error", "stopped", "Agent run stopped"),
            ("finish", "stopped"),
        ]
        assert events[-2].detail == "first"
        assert turn.result(30).messages[-1].content == interrupted_content("the call was stopped", "first")


def test_a_call_that_returns_while_its_callback_runs_ends_after_the_callback_keeping_its_result(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    log = tmp_path / "order.log"
    provider.add(use_tools(call("returns_during_stop", {"log": str(log)})))
    turn = runtime.run("go", tools=[T.returns_during_stop])
    turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30)
    turn.stop("now")
    lines = []
    for event in turn.events(timeout=30):
        if isinstance(event, ToolFinished):
            lines = whole_lines(log)  # the call's end: its callback has returned
            assert (event.outcome, event.content) == ("success", json.dumps({"ok": True, "data": "done"}))
    assert lines == ["cleanup started", "tool returned", "cleanup done"]
    assert turn.result(30).finish_reason == "stopped"


def test_a_tool_that_ignores_its_stop_is_ended_by_its_process_which_reports_it_and_its_late_callback(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    provider.add(use_tools(call("ignores_stop", {"release": str(release)})))
    turn = runtime.run("go", tools=[T.ignores_stop], options=TurnOptions(stop_grace=0.4))
    pid = turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30).data["pid"]
    turn.stop("now")
    result = turn.result(30)
    assert result.finish_reason == "stopped"
    ended = interrupted_content("the tool did not return within its stop grace (0.4 s) and its process was ended", "now")
    assert result.messages[-1].content == with_note(ended, "on_stop callback close_index did not return within 0.2 s")
    assert wait_until(lambda: not pid_alive(pid)), "the tool process outlived its call"
    release.write_text("go")
