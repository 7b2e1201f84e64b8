"""What happened in a turn, in order.

Every event carries its turn's ``turn_id`` and a ``seq`` that starts at 0 and grows by one
per event; Thespian does not guarantee delivery order, so receivers order by ``seq``. A
child turn's events also carry ``parent_turn_id`` and ``root_turn_id``.

A turn's events come in runs, and every run ends with exactly one ``Finish``:
``awaiting_approval`` and ``paused`` end a run and the turn waits (for decisions, to be
resumed); every other reason is terminal and is the turn's last event. Every tool call the model made gets exactly one ``ToolFinished``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Field

from .base import Message
from .chat import ChatMessage, Usage
from .tool import ToolOutcome

__all__ = [
    "BudgetWarning",
    "Error",
    "Finish",
    "FinishReason",
    "ForkOrigin",
    "InputAccepted",
    "TERMINAL_REASONS",
    "RateLimited",
    "TextDelta",
    "ToolApprovalRequest",
    "ToolCallStarted",
    "ToolFinished",
    "ToolProgress",
    "TurnEvent",
    "TurnEventUnion",
    "TurnRetrying",
    "TurnStarted",
    "extend_history",
    "host_lost",
    "whole_history",
]

FinishReason = Literal[
    "stop", "max_rounds", "error", "awaiting_approval", "stopped", "cancelled", "length", "paused", "budget_exceeded"
]
TERMINAL_REASONS: frozenset[str] = frozenset(
    {"stop", "max_rounds", "error", "stopped", "cancelled", "length", "budget_exceeded"}
)


class TurnEvent(Message):
    """Fields every event has. Supervisors may handle ``receiveMsg_TurnEvent`` for all."""

    turn_id: str
    seq: int
    parent_turn_id: str | None = None
    root_turn_id: str | None = None


class ForkOrigin(Message):
    """Where a forked turn came from (``runtime.fork``): turn ``turn_id``'s history up to
    message ``at`` (its first ``at`` messages); ``at_seq``, the event seq the fork was asked
    at (``fork(..., at_seq=)``), if it was; ``replaced``, whether ``text=`` replaced its last
    user message."""

    kind: Literal["fork_origin"] = "fork_origin"
    turn_id: str
    at: int = Field(ge=0)
    at_seq: int | None = None
    replaced: bool = False


class TurnStarted(TurnEvent):
    """The TurnActor accepted the turn; always the turn's first event (``seq`` 0).
    ``forked_from``: where the turn was forked from, if it was. ``opening``: how many
    messages it started with, when they hold an assistant message (a conversation's turn);
    None when that is every message before the first assistant message."""

    kind: Literal["turn_started"] = "turn_started"
    forked_from: ForkOrigin | None = None
    opening: int | None = None


class TextDelta(TurnEvent):
    """Assistant text as it streams, batched per LLMActor wake-up."""

    kind: Literal["text_delta"] = "text_delta"
    text: str


class ToolCallStarted(TurnEvent):
    """A call's ToolActor was spawned and given the call, in tool round ``round``; ``by`` is
    who approved it (None: it needed no approval, or its approval named nobody)."""

    kind: Literal["tool_call_started"] = "tool_call_started"
    call_id: str
    name: str
    arguments: Any = None
    round: int = 0
    by: str | None = None


class ToolProgress(TurnEvent):
    """A running tool called ``ToolContext.report_progress``."""

    kind: Literal["tool_progress"] = "tool_progress"
    call_id: str
    data: Any = None


class ToolFinished(TurnEvent):
    """A call ended; ``content`` is exactly the tool message appended to the history. ``by``
    is who ended it by a command: who denied it (``denied``) or stopped it (``StopTool``)."""

    kind: Literal["tool_finished"] = "tool_finished"
    call_id: str
    name: str
    outcome: ToolOutcome
    content: str
    by: str | None = None


class ToolApprovalRequest(TurnEvent):
    """A call that needs a human decision; it does not run until it is approved.

    ``child_turn_id`` is set when the call belongs to a child turn (a sub-agent started by
    one of this turn's tools): decide it with ``approve(call_id, turn_id=child_turn_id)``.
    ``approvers`` are who may decide it (its tool's; None: anyone)."""

    kind: Literal["tool_approval_request"] = "tool_approval_request"
    call_id: str
    name: str
    arguments: Any = None
    description: str = ""
    child_turn_id: str | None = None
    approvers: list[str] | None = None


class TurnRetrying(TurnEvent):
    """The provider request failed before its first delta and will be retried; or a turn
    carried on from its store asks the model again for a stream cut off: drop the text that
    stream had sent (its deltas since the previous event of another kind)."""

    kind: Literal["turn_retrying"] = "turn_retrying"
    attempt: int
    delay: float
    reason: str


class RateLimited(TurnEvent):
    """The turn's next model request waits for its provider's rate limit until about
    ``until`` (seconds since the epoch; ``reason``: ``requests_per_minute``,
    ``tokens_per_minute`` or ``retry_after``). A stop ends the wait at once; the turn's
    ``status`` is ``rate_limited`` until its next event."""

    kind: Literal["rate_limited"] = "rate_limited"
    until: float
    reason: str


class InputAccepted(TurnEvent):
    """Input sent to the running turn (``SendInput``, ``ResumeTurn``) entered its history:
    ``messages`` are at ``history_index`` on, just before the model call that reads them.
    ``request_id`` is the command's (None for one sent without)."""

    kind: Literal["input_accepted"] = "input_accepted"
    messages: list[ChatMessage]
    history_index: int = Field(ge=0)
    request_id: str | None = None


class BudgetWarning(TurnEvent):
    """The turn (with its sub-agents) has used 80% of one of its budgets; sent once per budget.
    ``budget`` is ``tokens`` (``TurnOptions.max_tokens``) or ``cost`` (``max_cost``)."""

    kind: Literal["budget_warning"] = "budget_warning"
    budget: Literal["tokens", "cost"]
    used: float
    limit: float


class Error(TurnEvent):
    """Something went wrong; ``error_type`` is a stable code, ``message`` is for people.

    For a stopped or cancelled turn, ``detail`` is the first request's text, ``cause``
    its kind (``user``, ``parent``, ``shutdown``, ``grace_expired``) and ``by`` who sent it
    (its command's ``by``). For ``turn_moved``
    (seq -1, to a subscriber: the host let the turn go), ``detail`` is that host's identity
    in the store and ``epoch`` the epoch it held the turn at."""

    kind: Literal["error"] = "error"
    error_type: str
    message: str
    detail: str | None = None
    cause: str | None = None
    epoch: int | None = None
    by: str | None = None


class Finish(TurnEvent):
    """A run ended; ``pending_approvals`` lists the call ids that wait for a decision.

    ``messages`` are the history from message ``history_from`` on: the whole history when
    ``history_from`` is 0, which the first ``Finish`` a subscriber receives always is; after
    it, the messages added since the turn's previous ``Finish`` (``TurnOptions.finish_history``
    ``"full"`` sends the whole history every time). A caller's ``TurnResult.messages`` is
    always the whole history.

    ``usage`` is the turn's own model calls' (a stopped stream's as far as its provider had
    reported it); ``subagent_usage`` its sub-agents' (every level below); ``cost`` both
    together, from the providers' prices (None when no price is known)."""

    kind: Literal["finish"] = "finish"
    finish_reason: FinishReason
    usage: Usage = Field(default_factory=Usage)
    subagent_usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    round: int = 0
    messages: list[ChatMessage] = Field(default_factory=list)
    pending_approvals: list[str] = Field(default_factory=list)
    history_from: int = Field(default=0, ge=0)

    @property
    def history_length(self) -> int:
        """The length of the whole history as of this ``Finish``."""
        return self.history_from + len(self.messages)

    @property
    def terminal(self) -> bool:
        return self.finish_reason in TERMINAL_REASONS


def extend_history(history: list[ChatMessage], finish: Finish) -> None:
    """Bring ``history`` (a turn's whole history as of its previous ``Finish``, or empty)
    up to ``finish``, in place."""
    del history[finish.history_from :]
    history.extend(finish.messages)


def whole_history(events: Iterable[TurnEvent]) -> list[ChatMessage]:
    """The whole history as of the last ``Finish`` of ``events`` (a turn's events from seq 0)."""
    history: list[ChatMessage] = []
    for event in events:
        if isinstance(event, Finish):
            extend_history(history, event)
    return history


TurnEventUnion = Annotated[
    Union[
        TurnStarted,
        TextDelta,
        ToolCallStarted,
        ToolProgress,
        ToolFinished,
        ToolApprovalRequest,
        TurnRetrying,
        RateLimited,
        InputAccepted,
        BudgetWarning,
        Error,
        Finish,
    ],
    Discriminator("kind"),
]


def host_lost(
    turn_id: str, seq: int, detail: str, messages: list[ChatMessage] | None = None, error_type: str = "host_lost"
) -> tuple[Error, Finish]:
    """The end of a run whose host was lost: ``Error(host_lost)`` then ``Finish(error)``,
    numbered ``seq`` and ``seq + 1`` (``-1`` for both when the sender cannot know the turn's
    numbering), with the history ``messages`` if the sender has one; ``error_type`` says
    why when it was not the host (``store_unavailable``: its store could not be reached)."""
    lost = Error(turn_id=turn_id, seq=seq, error_type=error_type, message="Agent run lost", detail=detail)
    end = Finish(turn_id=turn_id, seq=seq + 1 if seq >= 0 else -1, finish_reason="error", messages=messages or [])
    return lost, end
