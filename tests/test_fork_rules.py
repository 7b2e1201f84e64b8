"""Where a fork cuts a turn's history (``actors.turn.forking``), as a table: a message index or
an event seq in, the history kept and the origin recorded out. No actor system."""

from __future__ import annotations

import pytest

from actors.turn.forking import ForkError, cut, length_at_seq
from messages import (
    ChatMessage,
    Finish,
    ForkOrigin,
    InputAccepted,
    TextDelta,
    ToolCall,
    ToolCallStarted,
    ToolFinished,
    TurnEvent,
    TurnStarted,
    Usage,
)

ADD = ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}')
HISTORY = [
    ChatMessage.user("add 1 and 2"),
    ChatMessage.assistant(None, [ADD]),
    ChatMessage.tool("3", "c1"),
    ChatMessage.assistant("It is 3."),
    ChatMessage.user("and 2 and 2?"),
    ChatMessage.assistant("4."),
]


def finish(seq: int, history_from: int, messages: list[ChatMessage]) -> Finish:
    return Finish(
        turn_id="t", seq=seq, finish_reason="stop", messages=messages, history_from=history_from, usage=Usage(), round=1
    )


EVENTS: list[TurnEvent] = [
    TurnStarted(turn_id="t", seq=0),
    ToolCallStarted(turn_id="t", seq=1, call_id="c1", name="add"),
    ToolFinished(turn_id="t", seq=2, call_id="c1", name="add", outcome="success", content="3"),
    TextDelta(turn_id="t", seq=3, text="It is 3."),
    finish(4, 0, HISTORY[:4]),
    InputAccepted(turn_id="t", seq=5, messages=[HISTORY[4]], history_index=4),
    TextDelta(turn_id="t", seq=6, text="4."),
    finish(7, 4, HISTORY[4:]),
]


@pytest.mark.parametrize(
    ("seq", "kept"),
    [
        (0, 1),  # the opening
        (1, 1),  # the call was made, its result not yet: the call is not cut from it
        (2, 3),  # its result
        (3, 3),  # the text streams: not in the history yet
        (4, 4),  # the Finish
        (5, 5),  # the input accepted
        (6, 5),
        (7, 6),
    ],
)
def test_a_fork_at_an_event_keeps_the_longest_valid_history_the_turn_held_by_then(seq: int, kept: int) -> None:
    assert length_at_seq(HISTORY, EVENTS, seq) == kept


def test_a_fork_at_the_start_of_a_conversations_turn_keeps_the_whole_opening() -> None:
    """A turn given a conversation (a session's history: assistant messages already in it)
    holds all of it at its start, not only the messages before the first assistant one."""
    later = [ChatMessage.assistant("Hello again.")]
    events: list[TurnEvent] = [
        TurnStarted(turn_id="t", seq=0, opening=5),
        TextDelta(turn_id="t", seq=1, text="Hello again."),
        finish(2, 0, [*HISTORY[:5], *later]),
    ]
    assert [length_at_seq([*HISTORY[:5], *later], events, seq) for seq in (0, 1, 2)] == [5, 5, 6]


@pytest.mark.parametrize("seq", [-1, 8])
def test_a_fork_at_an_event_the_turn_does_not_have_is_refused(seq: int) -> None:
    with pytest.raises(ForkError) as refused:
        length_at_seq(HISTORY, EVENTS, seq)
    assert str(refused.value) == f"at_seq={seq} is not an event of the turn (its events are 0 to 7)"


def test_a_cut_records_its_origin_by_index_by_seq_and_with_the_text_replaced() -> None:
    assert cut("t", HISTORY, EVENTS, 3) == (HISTORY[:3], ForkOrigin(turn_id="t", at=3))
    assert cut("t", HISTORY, EVENTS, None, at_seq=2) == (HISTORY[:3], ForkOrigin(turn_id="t", at=3, at_seq=2))
    kept, origin = cut("t", HISTORY, EVENTS, 5, text="and 3 and 3?")
    assert kept == [*HISTORY[:4], ChatMessage.user("and 3 and 3?")]
    assert origin == ForkOrigin(turn_id="t", at=5, replaced=True)


@pytest.mark.parametrize(
    ("at", "at_seq", "message"),
    [
        (None, None, "fork turn t at one point: give at= (a message index) or at_seq= (an event seq)"),
        (3, 2, "fork turn t at one point: give at= (a message index) or at_seq= (an event seq)"),
        (7, None, "turn t has 6 messages: at=7 is past the end of its history (0 < at <= 6)"),
        (0, None, "turn t has 6 messages: at=0 is past the end of its history (0 < at <= 6)"),
        (None, 9, "turn t cannot be forked at event 9: at_seq=9 is not an event of the turn (its events are 0 to 7)"),
    ],
)
def test_a_cut_that_cannot_be_made_says_why(at: int | None, at_seq: int | None, message: str) -> None:
    with pytest.raises(ForkError) as refused:
        cut("t", HISTORY, EVENTS, at, at_seq)
    assert str(refused.value) == message


def test_a_cut_between_a_call_and_its_result_is_refused() -> None:
    with pytest.raises(ForkError, match=r"^turn t cannot be forked at message 2: "):
        cut("t", HISTORY, EVENTS, 2)
