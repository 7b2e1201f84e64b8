"""The session's rules (``actors.client.busy``) as a table: what each policy does to an idle and
to a busy session, what a turn's end does, what a withdrawal does. No actor system."""

from __future__ import annotations

import re

import pytest

from actors.client import busy
from actors.client.busy import (
    Append,
    Decision,
    Drop,
    Enqueue,
    Policy,
    Refuse,
    SessionState,
    Start,
    Steer,
    Stop,
    Withdrawn,
    on_end,
    on_message,
    on_withdraw,
)

IDLE = SessionState()
BUSY = SessionState(running="t1")
BUSY_WAITING = SessionState(running="t1", queued=("t2",))
BUSY_TEXT = "the session is busy: turn t1 is running (on_busy='reject')"

MESSAGES: list[tuple[SessionState, Policy, SessionState, list[Decision]]] = [
    # an idle session starts the message's turn, whatever the policy
    (IDLE, "reject", SessionState(running="m"), [Start("m")]),
    (IDLE, "enqueue", SessionState(running="m"), [Start("m")]),
    (IDLE, "interrupt", SessionState(running="m"), [Start("m")]),
    (IDLE, "rollback", SessionState(running="m"), [Start("m")]),
    # a busy one
    (BUSY, "reject", BUSY, [Refuse("busy", BUSY_TEXT)]),
    (BUSY, "enqueue", SessionState(running="t1", queued=("m",)), [Enqueue("m", 0)]),
    (BUSY, "interrupt", BUSY, [Steer("t1", "m")]),
    (BUSY, "rollback", SessionState(running="m", dropping="t1"), [Stop("t1"), Start("m")]),
    # with a message waiting already
    (BUSY_WAITING, "enqueue", SessionState(running="t1", queued=("t2", "m")), [Enqueue("m", 1)]),
    (BUSY_WAITING, "rollback", SessionState(running="m", queued=("t2",), dropping="t1"), [Stop("t1"), Start("m")]),
]


@pytest.mark.parametrize(("state", "policy", "after", "decisions"), MESSAGES)
def test_a_message_on_a_session(
    state: SessionState, policy: Policy, after: SessionState, decisions: list[Decision]
) -> None:
    assert on_message(state, "m", policy) == (after, decisions)


ENDS: list[tuple[SessionState, str, SessionState, list[Decision]]] = [
    (BUSY, "t1", IDLE, [Append("t1")]),
    (BUSY_WAITING, "t1", SessionState(running="t2"), [Append("t1"), Start("t2")]),
    (SessionState(running="m", dropping="t1"), "t1", SessionState(running="m"), [Drop("t1")]),
    (SessionState(running="m", dropping="t1"), "m", SessionState(dropping="t1"), [Append("m")]),
    (IDLE, "t1", IDLE, []),  # ended twice: the second changes nothing
    (BUSY, "t9", BUSY, []),  # not the session's
]


@pytest.mark.parametrize(("state", "turn_id", "after", "decisions"), ENDS)
def test_the_end_of_a_turn(state: SessionState, turn_id: str, after: SessionState, decisions: list[Decision]) -> None:
    assert on_end(state, turn_id) == (after, decisions)


def test_messages_waiting_start_in_the_order_they_came_one_at_each_end() -> None:
    state, started = SessionState(), []
    for m in ("a", "b", "c", "d"):
        state, decisions = on_message(state, m, "enqueue")
        started += [d.message_id for d in decisions if isinstance(d, Start)]
    while state.running is not None:
        state, decisions = on_end(state, state.running)
        started += [d.message_id for d in decisions if isinstance(d, Start)]
    assert started == ["a", "b", "c", "d"]


def test_a_waiting_message_is_withdrawn_and_one_that_started_or_never_came_is_refused() -> None:
    state = SessionState(running="t1", queued=("t2", "t3"))
    assert on_withdraw(state, "t2") == (SessionState(running="t1", queued=("t3",)), [Withdrawn("t2")])
    assert on_withdraw(state, "t1") == (
        state,
        [Refuse("started", "message t1 has already started its turn: stop it instead")],
    )
    assert on_withdraw(state, "t9") == (state, [Refuse("unknown_message", "no message t9 waits on this session")])


def test_the_docstring_table_names_every_policy_in_order() -> None:
    rows = re.findall(r"^    (reject|enqueue|interrupt|rollback)\s{2,}", busy.__doc__ or "", re.MULTILINE)
    assert tuple(rows) == busy.BUSY_POLICIES
