"""A turn's state as plain data: what a snapshot holds and what the turn rules work on.

Unlike messages these models are mutable (the rules update them in place); they still hold
only plain data, so a snapshot encodes with msgpack (``messages.codec.encode_snapshot``).
``SCHEMA_VERSION`` changes whenever a field is added or changes meaning, so that older code
refuses a newer snapshot by its version, never as malformed; ``READABLE_VERSIONS`` are those
this code decodes (a version 1 snapshot lacks only fields that have defaults). Decoding a
snapshot of any other version fails fast.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .chat import ChatMessage, ToolCall, Usage
from .control import ControlReply, StopCause, Timing, TurnOptions
from .events import FinishReason, ForkOrigin
from .llm import ProviderConfig
from .tool import ToolOutcome, ToolSpec

__all__ = [
    "READABLE_VERSIONS", "CallState", "CallStatus", "Hold", "Marker", "Phase", "QueuedInput", "SCHEMA_VERSION", "TurnState",
]  # fmt: skip

# 2: trace contexts, tool configuration; 3: finish_mark; 4: a call's "stopping" status, answered commands, call keys;
# 5: who decided (CallState.decided_by and stopped_by, Marker.by, ToolSpec.approvers); input, pause, budgets (queued
# input, the hold, cost and sub-agents' usage, edited arguments); 6: the provider's rate limit (ProviderConfig.rate_limit);
# 7: a fork's origin (``forked_from``); 8: what the turn requires of its host (``requires``)
SCHEMA_VERSION = 8
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8)

Phase = Literal["created", "idle", "streaming", "tools", "awaiting_approval", "paused", "finished"]
CallStatus = Literal["queued", "pending_approval", "decided", "running", "stopping", "done"]


class _State(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class Marker(_State):
    """A stop or cancel request: the first one of each kind is kept, with why (its cause
    and its text) and who sent it (``by``)."""

    kind: Literal["stop", "cancel"]
    reason: str
    at: float
    grace: float | None = None
    cause: StopCause = "user"
    by: str | None = None


class QueuedInput(_State):
    """Input sent to the turn (``SendInput``, ``ResumeTurn``) that has not entered its history yet."""

    messages: list[ChatMessage]
    when: Timing = "next_call"
    request_id: str | None = None
    at: float = 0.0


class Hold(_State):
    """A pause asked for (``PauseTurn``): in effect once the turn's phase is ``paused``."""

    when: Literal["next_step", "now"] = "next_step"
    reason: str = ""
    at: float = 0.0


class CallState(_State):
    """One tool call of the current assistant message and where it is.

    ``stopping``: the call was stopped (the turn's stop, ``StopTool``, its time limit) and its
    tool process has not reported its end yet; ``outcome`` and ``content`` then hold the end
    it gets if that report never comes. A ``failed`` one (the time limit's) is its end
    whatever the process reports; otherwise the report is.

    ``decided_by`` is who approved or denied it (the decision's ``by``; None for a decision
    that named nobody, or the approval timeout's); ``stopped_by`` who stopped it (``StopTool``).
    """

    call: ToolCall
    arguments: Any = None
    status: CallStatus = "queued"
    decision: Literal["approved", "denied"] | None = None
    decision_reason: str | None = None
    decided_by: str | None = None
    stopped_by: str | None = None
    outcome: ToolOutcome | None = None
    content: str | None = None
    attempt: int = 0
    key: str | None = None  # its idempotency key, made at its first run and kept for every attempt
    edited: bool = False  # ``arguments`` are the approver's edit, not the model's
    usage: Usage = Field(default_factory=Usage)  # its sub-agents' use, as counted so far
    cost: float = 0.0


class TurnState(_State):
    """Everything a turn needs to go on after a restart, and nothing secret."""

    schema_version: int = SCHEMA_VERSION
    turn_id: str
    parent_turn_id: str | None = None
    root_turn_id: str
    provider: ProviderConfig
    tools: list[ToolSpec] = Field(default_factory=list)
    options: TurnOptions = Field(default_factory=TurnOptions)
    requires: dict[str, Any] = Field(default_factory=dict)  # the capabilities its host must have, wherever it goes on
    messages: list[ChatMessage] = Field(default_factory=list)
    round: int = 0
    phase: Phase = "created"
    usage: Usage = Field(default_factory=Usage)
    next_seq: int = 0
    streams: int = 0
    stream_id: str | None = None
    batch: list[CallState] | None = None
    paused: bool = False
    commit_pending: bool = False
    approval_deadline: float | None = None
    waiting_since: float | None = None
    stop: Marker | None = None
    cancel: Marker | None = None
    finish_reason: FinishReason | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    trace_context: dict[str, str] | None = None  # the turn's first span; a recovered turn's span is its child
    finish_mark: int = 0  # the history's length at the turn's last Finish (what the next one adds to)
    # the answers to the last commands that changed the turn, by request id: one applied again
    # (sent again after an outage that kept its answer from its sender) is answered the same
    answered: dict[str, ControlReply] = Field(default_factory=dict)
    inputs: list[QueuedInput] = Field(default_factory=list)  # input waiting for the next model call
    hold: Hold | None = None  # a pause asked for, or in effect (phase "paused")
    subagent_usage: Usage = Field(default_factory=Usage)  # its sub-agents', every level below
    cost: float = 0.0  # its model calls' and its sub-agents', at the providers' prices
    budget_warned: list[str] = Field(default_factory=list)  # the budgets a BudgetWarning was sent for
    forked_from: ForkOrigin | None = None  # where the turn was forked from (``runtime.fork``)

    def call(self, call_id: str) -> CallState | None:
        for c in self.batch or ():
            if c.call.id == call_id:
                return c
        return None

    @property
    def pending_approvals(self) -> list[str]:
        return [c.call.id for c in self.batch or () if c.status == "pending_approval"]
