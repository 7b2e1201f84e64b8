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
    assert not c._request("cancel", "supervisor")
    assert c.requested and c.mode == "cancel" and ran == []  # at once: no callback, no phase
    with pytest.raises(ToolCancelled, match="tool call cancel: supervisor") as info:
        c.throw_if_requested()
    assert info.value.mode == "cancel"
    c._request("stop", "later")
    assert c.callbacks_returned(10) and c._settle(10)
    assert ran == [1] and c.mode == "stop" and c.reason == "supervisor"


def test_a_blocking_callback_delays_neither_the_stop_nor_the_next_callback_raising_system_exit() -> None:
    c = Cancellation(callback_deadline=30)
    release, last_ran, ran = threading.Event(), threading.Event(), []

    def blocks() -> None:
        release.wait(30)
        ran.append("blocker")

    def exits() -> None:
        raise SystemExit("a callback may not end the process")

    def last() -> None:
        ran.append("last")
        last_ran.set()

    c.on_stop(blocks)
    c.on_stop(exits)
    c.on_stop(last)
    assert c._request("stop", "user")  # returns while the first callback blocks
    assert last_ran.wait(10), "the callback after a blocking one did not run"
    assert ran == ["last"]
    assert not c.requested  # the tool sees its stop once every callback has returned
    release.set()
    assert c.wait(10) and c.callbacks_returned(10)
    assert sorted(ran) == ["blocker", "last"] and c.mode == "stop" and c.overstayed == ()


def test_each_callback_of_a_stop_starts_at_once_on_a_thread_of_its_own() -> None:
    c = Cancellation(callback_deadline=30)
    started: dict[str, int] = {}
    all_started, release = threading.Barrier(4, timeout=10), threading.Event()

    def callback(name: str) -> None:
        started[name] = threading.get_ident()
        all_started.wait()  # each waits until every one has started: none waits for another to end
        release.wait(30)

    for name in ("a", "b", "c"):
        c.on_stop(lambda name=name: callback(name))
    c._request("stop", "user")
    all_started.wait()
    assert len(set(started.values()) | {threading.get_ident()}) == 4
    release.set()
    assert c.wait(10)


def test_the_tool_sees_its_stop_only_once_every_callback_has_returned() -> None:
    c = Cancellation(callback_deadline=30)
    first, second, over = threading.Event(), threading.Event(), []
    c.on_stop(lambda: first.wait(30))
    c.on_stop(lambda: second.wait(30))
    assert c._request("stop", "user", then=over.append)
    for _ in range(2):
        assert (c.requested, c.mode, c.reason, c.wait(0), over) == (False, None, "", False, [])
        c.throw_if_requested()  # does not raise yet
        assert not c._settle(0)
        first.set()
    second.set()
    assert c.wait(10) and c._settle(10)
    assert (c.mode, c.reason, over) == ("stop", "user", [()])
    with pytest.raises(ToolCancelled, match="tool call stop: user"):
        c.throw_if_requested()


def test_a_callback_still_running_at_the_deadline_is_reported_and_not_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = Cancellation(callback_deadline=0.05)
    release, over = threading.Event(), []

    def close_index() -> None:
        release.wait(30)

    c.on_stop(close_index)
    c.on_stop(lambda: None)
    told = threading.Event()
    c._request("stop", "user", then=lambda overstayed: (over.append(overstayed), told.set()))
    assert c.wait(10), "the tool never saw its stop"
    assert told.wait(10)  # told on the thread that ended the phase, after the tool saw it
    assert not c.callbacks_returned(0)  # close_index still blocks
    assert (c.mode, c.overstayed, over) == ("stop", ("close_index",), [("close_index",)])
    assert "on_stop callback close_index did not return within 0.05 s of the stop" in caplog.text
    release.set()
    assert c.callbacks_returned(10)
    assert over == [("close_index",)]  # the end of the phase is told once


def test_a_callback_registered_after_the_stop_runs_at_once_in_the_registering_thread() -> None:
    c = Cancellation(callback_deadline=30)
    release, ran = threading.Event(), []
    c.on_stop(lambda: release.wait(30))
    c._request("stop", "user")
    c.on_stop(lambda: ran.append(threading.get_ident()))  # while the stop's callbacks still run
    assert ran == [threading.get_ident()] and not c.requested
    release.set()
    assert c.wait(10)
    c.on_stop(lambda: ran.append(threading.get_ident()))  # and after them
    assert ran == [threading.get_ident()] * 2


def test_a_registration_closed_after_the_stop_arrived_changes_nothing_for_that_stop() -> None:
    c = Cancellation(callback_deadline=30)
    entered, release, ran = threading.Event(), threading.Event(), []

    def w() -> None:
        entered.set()
        release.wait(30)
        ran.append("w")

    registration = c.on_stop(w)
    c._request("stop", "user")
    assert entered.wait(10)
    registration.close()  # the tool leaves its ``with`` block while w runs
    assert not c.requested
    release.set()
    assert c.wait(10) and ran == ["w"]


def test_no_callback_starts_once_the_call_has_ended() -> None:
    c = Cancellation()
    ran = []
    c.on_stop(lambda: ran.append("registered"))
    c._close()
    c.on_stop(lambda: ran.append("after the end"))
    assert not c._request("stop", "late")
    c.on_stop(lambda: ran.append("after a late stop"))
    assert ran == [] and not c.requested and c._settle(0)


def test_a_stop_with_no_callback_is_seen_at_once_and_says_so_on_the_delivering_thread() -> None:
    c = Cancellation()
    over: list[tuple[str, ...]] = []
    assert c._request("stop", "user", then=over.append)
    assert (c.mode, over) == ("stop", [()])
    assert not c._request("stop", "again", then=over.append)  # only the first stop has a phase
    assert (c.reason, over) == ("user", [()])


def test_a_context_gives_its_callbacks_half_its_stop_grace() -> None:
    ctx = ToolContext(turn_id="t", root_turn_id="t", call_id="c", tool_name="x", idempotency_key="t:c", stop_grace=3)
    assert ctx.cancellation.callback_deadline == 1.5


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
