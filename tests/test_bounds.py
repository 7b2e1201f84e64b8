"""Bounds, each with a clear error: result sizes, call time limits, tool processes per node,
events a reader holds, a reader that never reads; and Finish events that carry what is new."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import ReaderDropped, Runtime
from actors.client import stream as stream_module
from actors.lifecycle.processes import session_processes
from actors.testing import Reply, Request, ScriptedProvider, call, say, use_tools
from actors.turn.results import error_result, interrupted_content
from messages import ChatMessage, Finish, RetryPolicy, StopTool, TextDelta, ToolFinished, ToolProgress, TurnOptions

from . import tools_for_tests as T
from .helpers import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def one_process(provider: ScriptedProvider) -> Iterator[Runtime]:
    """A runtime whose node may run one tool process at a time."""
    retry = RetryPolicy(max_attempts=1)
    rt = Runtime(provider.provider(retry=retry), hosts=1, tool_processes=1, max_tool_processes=1).start()
    try:
        yield rt
    finally:
        rt.close()
        assert rt.admin_sid is not None and session_processes(rt.admin_sid) == []


def finished(events: list, call_id: str) -> ToolFinished:
    return next(e for e in events if isinstance(e, ToolFinished) and e.call_id == call_id)


def test_a_result_over_the_limit_fails_in_the_tools_process_saying_so(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("big_result", {"size": 10_000})), say("too big"))
    turn = runtime.run("make it big", tools=[T.big_result], options=TurnOptions(max_result_bytes=4096))
    assert turn.result(30).finish_reason == "stop"
    size = len(json.dumps({"ok": True, "data": "x" * 10_000}))
    why = f"its result is {size:,} bytes, over the limit of 4,096 (TurnOptions.max_result_bytes)"
    done = finished(turn.all_events, "call_1")
    assert (done.outcome, done.content) == ("failed", error_result(f"Tool 'big_result' failed: {why}"))


def test_a_progress_report_over_the_limit_is_replaced_by_a_note(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(use_tools(call("big_progress", {"size": 5_000})), say("ok"))
    turn = runtime.run("report", tools=[T.big_progress], options=TurnOptions(max_result_bytes=4096))
    assert turn.result(30).finish_reason == "stop"
    progress = [e.data for e in turn.all_events if isinstance(e, ToolProgress)]
    assert progress == [{"dropped": "a progress report of 5,002 bytes, over the limit of 4,096"}]


def test_a_call_past_its_time_limit_is_stopped_and_fails_saying_so(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    marker = tmp_path / "stopped"
    provider.add(use_tools(call("wait_for_stop", {"marker": str(marker)})), say("it took too long"))
    turn = runtime.run("wait", tools=[T.wait_for_stop], options=TurnOptions(tool_timeout=0.5))
    result = turn.result(30)
    assert (result.finish_reason, result.text) == ("stop", "it took too long")
    done = finished(turn.all_events, "call_1")
    assert (done.outcome, done.content) == ("failed", error_result("Tool 'wait_for_stop' timed out after 0.5 s"))
    assert wait_until(lambda: marker.exists() and marker.read_text() == "stopped\n"), "its on_stop did not run"


def test_calls_beyond_the_nodes_tool_processes_wait_for_one_and_all_finish(
    one_process: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    calls = [call("timed_echo", {"text": t, "seconds": 0.1, "log": str(log)}, id=t) for t in ("a", "b", "c")]
    provider.add(use_tools(*calls), say("all three"))
    turn = one_process.run("three", tools=[T.timed_echo])
    assert turn.result(30).text == "all three"
    runs = sorted(
        (float(s), float(e), int(pid)) for _, s, e, pid in (line.split() for line in log.read_text().splitlines())
    )
    assert len({pid for _, _, pid in runs}) == 1, "one tool process ran the three calls"
    assert all(runs[i][1] <= runs[i + 1][0] for i in range(2)), "one after the other"


def test_after_a_burst_the_node_keeps_its_spares_and_no_more(provider: ScriptedProvider, tmp_path: Path) -> None:
    """Four calls at once fork four tool processes; once they have been free a while, the host
    keeps one and the pool its ``tool_processes``: the rest end. A call after them forks nothing."""
    release = tmp_path / "release"
    calls = [call("wait_for_file", {"path": str(release)}, id=f"c{i}") for i in range(4)]
    provider.add(use_tools(*calls), say("all four"))
    with Runtime(provider.provider(), hosts=1, tool_processes=1, max_tool_processes=4) as rt:
        assert rt.admin_sid is not None
        at_rest = 5 + 2  # the admin, the logger, the directory, the pool, the host; the pool's spare, the host's one
        assert wait_until(lambda: len(session_processes(rt.admin_sid)) == at_rest)
        turn = rt.run("four at once", tools=[T.wait_for_file])
        turn.wait_for(lambda _: sum(isinstance(e, ToolProgress) for e in turn.all_events) == 4, timeout=30)
        assert len(session_processes(rt.admin_sid)) >= at_rest + 2  # each call runs in a process of its own
        release.touch()
        assert turn.result(30).text == "all four"
        assert wait_until(lambda: len(session_processes(rt.admin_sid)) == at_rest), session_processes(rt.admin_sid)
        provider.add(use_tools(call("add", {"a": 1, "b": 2})), say("3"))
        kept = set(session_processes(rt.admin_sid))
        assert rt.run("again", tools=[T.add]).result(30).text == "3"
        assert set(session_processes(rt.admin_sid)) == kept


def test_a_cancel_reaches_calls_that_still_wait_for_a_process(
    one_process: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    calls = [call("cooperative", {"marker": str(tmp_path / c)}, id=c) for c in ("c1", "c2", "c3")]
    provider.add(use_tools(*calls))
    turn = one_process.run("work", tools=[T.cooperative])
    turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30)  # c1 runs; c2, c3 wait for the process
    turn.cancel("enough")
    result = turn.result(30)
    assert result.finish_reason == "cancelled"
    queued = interrupted_content("the call was cancelled before it started", "enough")
    assert [finished(turn.all_events, c).content for c in ("c2", "c3")] == [queued, queued]
    assert finished(turn.all_events, "c1").outcome == "interrupted"
    assert not any((tmp_path / c).exists() for c in ("c1", "c2", "c3")), "no call ran to its end"


def test_finish_events_carry_what_is_new_and_results_hold_the_whole_history(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("delete_file", {"path": str(tmp_path / "x")})), say("Not deleted."))
    turn = runtime.run("clean", tools=[T.delete_file])
    paused = turn.result(30)
    assert paused.finish_reason == "awaiting_approval"
    turn.deny("call_1", "keep it")
    result = turn.result(30)
    finishes = [e for e in turn.all_events if isinstance(e, Finish)]
    assert [(f.history_from, len(f.messages)) for f in finishes] == [(0, 2), (2, 2)]
    assert result.messages == paused.messages + finishes[1].messages
    assert result.messages[-2:] == [
        ChatMessage.tool("Rejected: keep it", "call_1", name="delete_file"),
        ChatMessage.assistant("Not deleted."),
    ]


def test_a_reader_that_does_not_read_holds_at_most_its_window(provider: ScriptedProvider, tmp_path: Path) -> None:
    marker = tmp_path / "done"
    provider.add(use_tools(call("many_progress", {"count": 200, "marker": str(marker)})), say("reported"))
    with Runtime(provider.provider(), hosts=1, tool_processes=1, event_window=8) as rt:
        turn = rt.run("report a lot", tools=[T.many_progress])
        assert wait_until(marker.exists, timeout=30)
        # once the turn has ended (a probe that changes nothing says so), every event exists in its host
        probe = StopTool(turn_id=turn.turn_id, call_id="no such call")
        assert wait_until(lambda: rt.control(probe).code == "turn_finished", 30)
        assert len(turn.all_events) == 8, "the host sent no more than the window past what was read"
        events = list(turn.events(timeout=30))  # reading lets the rest come
        assert sum(isinstance(e, ToolProgress) for e in events) == 200
        assert isinstance(events[-1], Finish) and events[-1].finish_reason == "stop"


def test_unread_turns_hold_at_most_their_window_however_often_their_streams_ask_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: a stream that hears nothing (its window is full) asks for what follows every
    ``QUIET`` seconds; each ask used to let a whole window more be held (3,072 against 1,024)."""
    monkeypatch.setattr(stream_module, "QUIET", 0.05)  # ask again often: the asks, not time, are waited on
    window, turns, reports = 16, 3, 300
    text = "".join(f"w{i} " for i in range(1500))

    def responder(request: Request) -> Reply:
        if any(m.get("role") == "tool" for m in request.messages):
            return say(text, pieces=1500)
        marker = tmp_path / str(request.messages[-1].get("content"))
        return use_tools(call("many_progress", {"count": reports, "marker": str(marker)}))

    with (
        ScriptedProvider(responder=responder) as provider,
        Runtime(provider.provider(), hosts=1, tool_processes=1, event_window=window) as rt,
    ):
        handles = [rt.run(f"turn{i}", tools=[T.many_progress]) for i in range(turns)]
        for i, turn in enumerate(handles):
            assert wait_until((tmp_path / f"turn{i}").exists, timeout=30)
            probe = StopTool(turn_id=turn.turn_id, call_id="no such call")
            assert wait_until(lambda p=probe: rt.control(p).code == "turn_finished", 30), "every event is in its host"
            stream, asked = turn._stream, turn._stream.asked
            assert wait_until(lambda s=stream, a=asked: s.asked >= a + 3, 30), "the stream asked again"
            assert stream.held_most <= window and turn.held == window == len(turn.all_events)
        for turn in handles:
            events = list(turn.events(timeout=30))  # reading lets the rest come, in order, every delta intact
            assert [e.seq for e in events] == list(range(len(events)))
            assert [e.data for e in events if isinstance(e, ToolProgress)] == list(range(reports))
            assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text
            assert isinstance(events[-1], Finish) and events[-1].finish_reason == "stop"
            assert turn.result().text == text and turn.held == 0
            assert turn._stream.held_most <= window, "never more than the window held unread"


def test_a_reader_still_behind_after_the_grace_is_dropped_saying_so(provider: ScriptedProvider, tmp_path: Path) -> None:
    marker = tmp_path / "done"
    provider.add(use_tools(call("many_progress", {"count": 50, "marker": str(marker)})), say("reported"))
    with Runtime(provider.provider(), hosts=1, tool_processes=1, event_window=8) as rt:
        options = TurnOptions(reader_grace=0.5, linger=0.2)
        turn = rt.run("report a lot", tools=[T.many_progress], options=options)
        assert wait_until(lambda: turn.dropped is not None, timeout=30), "the host kept the reader"
        read = []
        with pytest.raises(ReaderDropped, match="still behind 0.5 s after the turn ended, and was dropped"):
            for event in turn.events(timeout=30):
                read.append(event)
        assert len(read) == 8, "what had come could still be read"
