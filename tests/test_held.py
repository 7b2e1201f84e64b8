"""Commands that overtook their turn: held in order, claimed once, expired after HOLD."""

from __future__ import annotations

from actors.host.held import HOLD, HeldCommands


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
