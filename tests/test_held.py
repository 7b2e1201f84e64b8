"""Commands that overtook their turn: held in order, claimed once, expired after HOLD, or
sooner when their sender waits less."""

from __future__ import annotations

from actors.host.held import HOLD, PATIENCE, HeldCommands
from messages import StopTurn


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_started_turn_claims_its_commands_in_arrival_order_and_only_once() -> None:
    held = HeldCommands(Clock())
    held.hold("t1", "stop", "caller-a")
    held.hold("t2", "approve", "caller-b")
    held.hold("t1", "cancel", "caller-c")
    assert held.claim("t1") == [("stop", "caller-a"), ("cancel", "caller-c")]
    assert held.claim("t1") == []
    assert held  # t2's command is still waiting


def test_a_command_is_returned_for_an_answer_once_it_has_waited_hold_seconds() -> None:
    clock = Clock()
    held = HeldCommands(clock)
    held.hold("t1", "stop", "caller-a")
    clock.now += HOLD / 2
    held.hold("t1", "cancel", "caller-b")
    clock.now += HOLD / 4  # binary fractions: the sums are exact
    assert held.expired() == []
    clock.now += HOLD / 4
    assert held.expired() == [("t1", "stop", "caller-a")]
    assert held.claim("t1") == [("cancel", "caller-b")]
    assert not held


def test_a_command_whose_sender_waits_less_than_the_hold_is_answered_within_that_wait() -> None:
    clock = Clock()
    held = HeldCommands(clock)
    assert held.hold("t1", "stop", "caller-a", within=8.0) == 8.0 * PATIENCE == 6.0
    assert held.hold("t1", "cancel", "caller-b", within=HOLD * 4) == HOLD  # a patient sender waits HOLD
    clock.now += 5.75
    assert held.expired() == []
    clock.now += 0.25
    assert held.expired() == [("t1", "stop", "caller-a")]
    clock.now += HOLD - 6.0
    assert held.expired() == [("t1", "cancel", "caller-b")]


def test_a_command_handed_on_carries_what_is_left_of_its_senders_wait() -> None:
    clock = Clock()
    held = HeldCommands(clock)
    stop = StopTurn(turn_id="t1", answer_within=8.0)
    held.hold("t1", stop, "caller-a", within=stop.answer_within)
    held.hold("t1", "approve", "caller-b")  # says nothing of its sender's wait: handed on as it is
    clock.now += 2.5
    assert held.take("t1", lambda m: True) == [(stop.model_copy(update={"answer_within": 5.5}), "caller-a"),
                                               ("approve", "caller-b")]  # fmt: skip
    assert not held
