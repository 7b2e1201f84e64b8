"""The admission rules of ``actors.host.admission``, driven alone: each row is a sequence of
events on a fresh host and the decisions it must produce, exactly."""

from __future__ import annotations

import pytest

from actors.client.starting import Room
from actors.host.admission import (
    Admission,
    Arrived,
    Ended,
    Event,
    Limits,
    Parked,
    Queued,
    Refused,
    Resumed,
    Start,
    Waits,
    Withdraw,
    Withdrawn,
    checked_limits,
)
from messages import ControlReply

FULL_2_1 = "2 turns running (max_running=2) and 1 queued (max_queued=1)"

TABLE: list[tuple[str, Limits, list[Event], list[object]]] = [
    ("below the limit a turn starts", Limits(2, 1), [Arrived("a")], [Start("a")]),
    ("at the limit it is queued", Limits(1, 1), [Arrived("a"), Arrived("b")], [Start("a"), Queued("b")]),
    (
        "beyond the queue it is refused, naming the limits",
        Limits(2, 1),
        [Arrived("a"), Arrived("b"), Arrived("c"), Arrived("d")],
        [Start("a"), Start("b"), Queued("c"), Refused("d", FULL_2_1)],
    ),
    (
        "beyond the queue a turn that may wait waits, and enters the queue as it empties",
        Limits(1, 1),
        [Arrived("a"), Arrived("b"), Arrived("c", wait=True), Ended("a")],
        [Start("a"), Queued("b"), Waits("c"), Start("b"), Queued("c")],
    ),
    (
        "with no queue at all a waiting turn starts when a slot frees",
        Limits(1, 0),
        [Arrived("a"), Arrived("b", wait=True), Ended("a")],
        [Start("a"), Waits("b"), Start("b")],
    ),
    (
        "an ended turn's slot goes to the next queued turn",
        Limits(1, 5),
        [Arrived("a"), Arrived("b"), Arrived("c"), Ended("a"), Ended("b")],
        [Start("a"), Queued("b"), Queued("c"), Start("b"), Start("c")],
    ),
    (
        "a parked turn frees its slot; resumed, it counts again and holds the queue back",
        Limits(1, 5),
        [Arrived("a"), Arrived("b"), Parked("a"), Arrived("c"), Resumed("a"), Ended("b"), Ended("a")],
        [Start("a"), Queued("b"), Start("b"), Queued("c"), Start("c")],
    ),
    (
        "a higher priority starts first, whatever its arrival",
        Limits(1, 5),
        [
            Arrived("a"),
            Arrived("low", priority=0),
            Arrived("high", priority=5),
            Arrived("mid", priority=1),
            Ended("a"),
            Ended("high"),
            Ended("mid"),
        ],
        [Start("a"), Queued("low"), Queued("high"), Queued("mid"), Start("high"), Start("mid"), Start("low")],
    ),
    (
        "among equal priorities tenants take turns, each tenant's in arrival order",
        Limits(1, 9),
        [
            Arrived("a"),
            *(Arrived(f"big{n}", tenant="big") for n in range(4)),
            Arrived("s0", tenant="small"),
            Arrived("s1", tenant="small"),
            *(Ended(t) for t in ["a", "big0", "s0", "big1", "s1", "big2"]),
        ],
        [
            Start("a"),
            *(Queued(f"big{n}") for n in range(4)),
            Queued("s0"),
            Queued("s1"),
            Start("big0"),
            Start("s0"),
            Start("big1"),
            Start("s1"),
            Start("big2"),
            Start("big3"),
        ],
    ),
    (
        "a queued turn stopped leaves the queue and never counts",
        Limits(1, 5),
        [Arrived("a"), Arrived("b"), Arrived("c"), Withdraw("b"), Ended("a")],
        [Start("a"), Queued("b"), Queued("c"), Withdrawn("b"), Start("c")],
    ),
    (
        "a waiting turn stopped leaves the wait; a withdrawn queued one lets a waiting one in",
        Limits(1, 1),
        [Arrived("a"), Arrived("b"), Arrived("c", wait=True), Arrived("d", wait=True), Withdraw("d"), Withdraw("b")],
        [Start("a"), Queued("b"), Waits("c"), Waits("d"), Withdrawn("d"), Withdrawn("b"), Queued("c")],
    ),
    (
        "a stop for a running or unknown turn, a second end, a repeated arrival: nothing",
        Limits(1, 1),
        [Arrived("a"), Withdraw("a"), Withdraw("x"), Arrived("a"), Ended("a"), Ended("a"), Parked("x"), Resumed("x")],
        [Start("a")],
    ),
]


@pytest.mark.parametrize("name, limits, events, expected", TABLE, ids=[row[0] for row in TABLE])
def test_admission_table(name: str, limits: Limits, events: list[Event], expected: list[object]) -> None:
    admission = Admission(limits)
    decisions = [d for e in events for d in admission.handle(e)]
    assert decisions == expected


def test_one_tenants_thousand_queued_turns_delay_anothers_five_by_five_turns_at_most() -> None:
    admission = Admission(Limits(1, 2000))
    admission.handle(Arrived("first"))
    for n in range(1000):
        admission.handle(Arrived(f"big{n}", tenant="big"))
    for n in range(5):
        admission.handle(Arrived(f"small{n}", tenant="small"))
    order: list[str] = []
    ending = "first"
    while True:
        started = [d.turn_id for d in admission.handle(Ended(ending)) if isinstance(d, Start)]
        if not started:
            break
        order += started
        ending = started[0]
    assert len(order) == 1005
    assert [order.index(f"small{n}") for n in range(5)] == [1, 3, 5, 7, 9]


@pytest.mark.parametrize(
    "running, queued, message",
    [
        (0, 1, "max_running must be an int >= 1 (turns running at once per host), not 0"),
        (-1, 1, "max_running must be an int >= 1 (turns running at once per host), not -1"),
        (2.5, 1, "max_running must be an int >= 1 (turns running at once per host), not 2.5"),
        (True, 1, "max_running must be an int >= 1 (turns running at once per host), not True"),
        (1, -3, "max_queued must be an int >= 0 (turns queued per host), not -3"),
        (1, "10", "max_queued must be an int >= 0 (turns queued per host), not '10'"),
    ],
)
def test_bad_limits_are_refused_saying_which(running: object, queued: object, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        checked_limits(running, queued)
    assert str(caught.value) == message


# -- the caller's side: which starts need not wait for their host's answer (client.starting.Room)


def _answer(room: int | None, ok: bool = True) -> ControlReply:
    return ControlReply(turn_id="t", command="start_turn", ok=ok, code=None if ok else "overloaded", room=room)


def test_a_start_waits_for_its_answer_until_the_host_said_it_has_room() -> None:
    room = Room()
    assert room.sent("h1") is False  # nothing known yet: this one waits
    room.answered("h1", _answer(room=2))
    assert [room.sent("h1"), room.sent("h1"), room.sent("h1")] == [True, True, False]  # 2 places, then unknown
    assert room.sent("h2") is False  # another host's room is its own


def test_the_starts_still_unanswered_count_against_the_room_an_answer_gives() -> None:
    room = Room()
    assert room.sent("h") is False and room.sent("h") is False  # two sent before any answer
    room.answered("h", _answer(room=1))  # the first's: 1 place after it, which the second (unanswered) may take
    assert room.sent("h") is False  # so the third waits
    room.answered("h", _answer(room=0))  # the second's: it took that place
    room.answered("h", _answer(room=3))  # the third's: places were freed since
    assert room.sent("h") is True


def test_a_refusal_or_a_queued_answer_leaves_no_room() -> None:
    room = Room()
    room.sent("h")
    room.answered("h", _answer(room=5))
    room.sent("h")
    room.answered("h", _answer(room=None, ok=False))
    assert room.sent("h") is False
    room.answered("h", _answer(room=0))  # queued: its host starts no more at once
    assert room.sent("h") is False
