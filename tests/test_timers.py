"""A host's timers share a few Thespian wakeups (``actors.host.timers``)."""

from __future__ import annotations

from actors.host.timers import Timers


def test_timers_come_due_in_order_and_once() -> None:
    armed: list[float] = []
    timers = Timers(armed.append)
    timers.add(0.0, "a")
    timers.add(3600.0, "later")
    timers.add(0.0, "b")
    timers.add(-1.0, "c")  # a negative delay is due at once, as 0 is
    assert timers.due() == ["a", "b", "c"]
    assert timers.due() == []
    assert len(timers) == 1


def test_a_wakeup_is_asked_for_only_when_a_timer_is_due_before_every_one_asked_for() -> None:
    armed: list[float] = []
    timers = Timers(armed.append)
    timers.add(3600.0, "late")
    timers.add(7200.0, "later")  # the wakeup for "late" comes first: nothing more to ask
    assert len(armed) == 1 and 3599.0 < armed[0] <= 3600.0
    timers.add(60.0, "sooner")
    assert len(armed) == 2 and 59.0 < armed[1] <= 60.0


def test_a_wakeup_that_finds_nothing_due_asks_again_for_what_waits() -> None:
    armed: list[float] = []
    timers = Timers(armed.append)
    timers.add(60.0, "x")
    assert timers.due() == []  # a wakeup that came early (another clock): nothing is lost
    assert len(armed) == 2 and 59.0 < armed[1] <= 60.0
    assert len(timers) == 1
