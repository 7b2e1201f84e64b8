"""Where a fork cuts a turn's history: a message index, or the history as it stood at an event.

Pure: a turn's whole history and its events in, a number of messages out. ``runtime.fork``
takes ``at=N`` (the first ``N`` messages) or ``at_seq=S``: the longest part of the history
that the turn's history held once its event ``S`` was emitted and that is a valid history
on its own (no tool call cut from its result). What the events say of the history's length:

- ``TurnStarted`` (seq 0): the opening, its ``opening`` messages (a turn given a
  conversation), else every message before the first assistant message;
- ``ToolCallStarted``, ``ToolApprovalRequest``: the assistant message that made the call;
- ``ToolFinished``: the call's tool message (its result);
- ``InputAccepted``: its messages, at ``history_index``;
- ``Finish``: the history up to ``history_from`` plus its messages.
"""

from __future__ import annotations

from collections.abc import Sequence

from messages import (
    ChatMessage,
    Finish,
    ForkOrigin,
    InputAccepted,
    ToolApprovalRequest,
    ToolCallStarted,
    ToolFinished,
    TurnEvent,
    TurnStarted,
)  # fmt: skip

from .history import history_problems

__all__ = ["ForkError", "cut", "length_at_seq"]


class ForkError(ValueError):
    """The fork cannot be made where it was asked (the message says why): nothing started."""


def cut(
    turn_id: str,
    messages: Sequence[ChatMessage],
    events: Sequence[TurnEvent],
    at: int | None,
    at_seq: int | None = None,
    text: str | None = None,
) -> tuple[list[ChatMessage], ForkOrigin]:
    """The history a fork of turn ``turn_id`` starts from, and its origin: the first ``at``
    messages of ``messages`` (the turn's whole history), or those it held at event
    ``at_seq`` (``length_at_seq``; exactly one of the two); with ``text``, their last user
    message replaced by it (and what followed it left out)."""
    if (at is None) == (at_seq is None):
        raise ForkError(f"fork turn {turn_id} at one point: give at= (a message index) or at_seq= (an event seq)")
    if at_seq is not None:
        try:
            at = length_at_seq(messages, events, at_seq)
        except ForkError as exc:
            raise ForkError(f"turn {turn_id} cannot be forked at event {at_seq}: {exc}") from None
    assert at is not None
    if not 0 < at <= len(messages):
        raise ForkError(
            f"turn {turn_id} has {len(messages)} messages: at={at} is past the end of its history "
            f"(0 < at <= {len(messages)})"
        )
    kept = list(messages[:at])
    if text is not None:
        users = [i for i, m in enumerate(kept) if m.role == "user"]
        if not users:
            raise ForkError(f"turn {turn_id} has no user message before message {at} to replace")
        kept = [*kept[: users[-1]], ChatMessage.user(text)]
    problems = history_problems(kept)
    if problems:
        raise ForkError(f"turn {turn_id} cannot be forked at message {at}: {problems[0]}")
    return kept, ForkOrigin(turn_id=turn_id, at=at, at_seq=at_seq, replaced=text is not None)


def length_at_seq(messages: Sequence[ChatMessage], events: Sequence[TurnEvent], seq: int) -> int:
    """How many of ``messages`` (the turn's whole history) a fork at event ``seq`` keeps."""
    last = max((e.seq for e in events), default=-1)
    if not 0 <= seq <= last:
        raise ForkError(f"at_seq={seq} is not an event of the turn (its events are 0 to {last})")
    made_call: dict[str, int] = {}
    result_of: dict[str, int] = {}
    for i, m in enumerate(messages):
        for call in m.tool_calls or ():
            made_call[call.id] = i
        if m.role == "tool" and m.tool_call_id is not None:
            result_of[m.tool_call_id] = i
    length = 0
    for e in events:
        if e.seq > seq:
            continue
        if isinstance(e, TurnStarted):
            first_answer = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
            held = e.opening if e.opening is not None else first_answer
        elif isinstance(e, (ToolCallStarted, ToolApprovalRequest)):
            held = made_call.get(e.call_id, -1) + 1
        elif isinstance(e, ToolFinished):
            held = result_of.get(e.call_id, -1) + 1
        elif isinstance(e, InputAccepted):
            held = e.history_index + len(e.messages)
        elif isinstance(e, Finish):
            held = e.history_from + len(e.messages)
        else:
            continue
        length = max(length, min(held, len(messages)))
    while length > 0 and history_problems(messages[:length]):
        length -= 1
    if length == 0:
        raise ForkError(f"no valid history ends by event {seq}")
    return length
