"""The tool's cancellation API, and the four races of seed 003, on the real classes."""

from __future__ import annotations

import threading

import pytest

from actors import Cancellation, ToolCancelled, ToolContext, ToolContextError


def test_a_stop_before_the_callback_is_registered_runs_it_at_once() -> None:
    c = Cancellation()
    c._request("stop", "user")
    ran = []
    c.on_stop(lambda: ran.append(1))
    assert ran == [1]
    assert c.registered == 0


def test_closing_while_the_callback_runs_is_idempotent() -> None:
    c = Cancellation()
    entered, release = threading.Event(), threading.Event()
    ran = []

    def slow() -> None:
        entered.set()
        release.wait(10)
        ran.append(1)

    registration = c.on_stop(slow)
    c._request("stop", "user")  # returns at once: the callback runs on a thread of its own
    assert entered.wait(10)
    registration.close()  # the tool reaches its finally while the callback runs
    registration.close()
    release.set()
    assert c.callbacks_returned(10)
    assert ran == [1]
    c._request("stop", "again")
    assert ran == [1]


def test_a_stop_after_the_call_ended_runs_no_callback() -> None:
    c = Cancellation()
    ran = []
    c.on_stop(lambda: ran.append(1))
    c._close()  # the call ended: its registrations are dropped
    assert c.registered == 0
    c._request("stop", "late")
    assert ran == []
    assert not c.requested


def test_a_callback_that_raises_blocks_neither_the_others_nor_the_stop(caplog: pytest.LogCaptureFixture) -> None:
    c = Cancellation()
    ran = []

    def bad() -> None:
        raise RuntimeError("cleanup failed")

    c.on_stop(bad)
    c.on_stop(lambda: ran.append("second"))
    c._request("stop", "user")
    assert c.callbacks_returned(10)
    assert ran == ["second"]
    assert c.mode == "stop"
    assert "an on_stop callback raised; the stop goes on" in caplog.text


def test_each_callback_runs_at_most_once_and_a_closed_registration_never() -> None:
    c = Cancellation()
    ran = []
    with c.on_stop(lambda: ran.append("closed")):
        pass
    c.on_stop(lambda: ran.append("kept"))
    c._request("stop", "a")
    c._request("stop", "b")
    assert c.callbacks_returned(10)
    assert ran == ["kept"]
    assert c.reason == "a"


def test_cancel_sets_the_flag_without_running_callbacks_and_stop_still_does() -> None:
    c = Cancellation()
    ran = []
    c.on_stop(lambda: ran.append(1))
    c._request("cancel", "supervisor")
    assert c.requested and c.mode == "cancel" and ran == []
    with pytest.raises(ToolCancelled, match="tool call cancel: supervisor") as info:
        c.throw_if_requested()
    assert info.value.mode == "cancel"
    c._request("stop", "later")
    assert c.callbacks_returned(10)
    assert ran == [1] and c.mode == "stop" and c.reason == "supervisor"


def test_a_blocking_callback_delays_neither_the_stop_nor_the_next_callback_raising_system_exit() -> None:
    c = Cancellation()
    release, ran = threading.Event(), []

    def blocks() -> None:
        release.wait(30)
        ran.append("blocker")

    def exits() -> None:
        raise SystemExit("a callback may not end the process")

    c.on_stop(blocks)
    c.on_stop(exits)
    c.on_stop(lambda: ran.append("last"))
    c._request("stop", "user")  # returns while the first callback blocks
    assert c.mode == "stop" and ran == []
    release.set()
    assert c.callbacks_returned(10)
    assert ran == ["blocker", "last"]


def test_tool_cancelled_is_not_an_exception_a_tool_swallows() -> None:
    assert not issubclass(ToolCancelled, Exception)


def test_the_context_exists_only_inside_a_tool_and_not_in_threads_it_starts() -> None:
    with pytest.raises(ToolContextError, match="outside a running tool call"):
        ToolContext.current()
    ctx = ToolContext(turn_id="t", root_turn_id="t", call_id="c", tool_name="x", idempotency_key="t:c")
    token = ctx._activate()
    try:
        assert ToolContext.current() is ctx
        seen = []

        def in_thread() -> None:
            try:
                ToolContext.current()
            except ToolContextError:
                seen.append("no context")

        t = threading.Thread(target=in_thread)
        t.start()
        t.join(10)
        assert seen == ["no context"]
    finally:
        ToolContext._deactivate(token)
