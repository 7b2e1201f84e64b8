"""Tool specs and the messages between a TurnActor and its ToolActors.

A ``ToolSpec`` is the plain-data face of a tool: its name, description and JSON schema for
the provider, and ``ref``, the import path (``"package.module:qualname"``) by which an actor
in another process, or on another host, loads the callable. Every tool call ends with
exactly one ``ToolResult``; its ``outcome`` is one of ``ToolOutcome``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from .base import Message
from .chat import ToolCall, Usage
from .llm import ProviderConfig
from .principals import Principal

__all__ = [
    "ApprovalMode",
    "InterruptTool",
    "ToolAlive",
    "ReportProgress",
    "RunTool",
    "ToolOutcome",
    "ToolResult",
    "ToolSpec",
]

ToolOutcome = Literal["success", "failed", "denied", "interrupted"]
ApprovalMode = Literal["never", "always", "predicate"]


class ToolSpec(Message):
    """What a turn needs to offer a tool to the model, gate it, place it and load it.

    ``approval`` says whether a call needs a human decision: ``"predicate"`` asks the
    callable at ``approval_ref`` with the call's parsed arguments; ``approvers`` names who
    may decide its calls (the ``by`` of the decision; None: anyone, or a decision naming
    nobody). ``requires`` lists the
    capabilities a node must advertise to run it. ``retry_safe`` declares that running a
    call twice with the same idempotency key is harmless (used on recovery). ``inline``
    runs an ``async def`` tool (``is_async``) in its turn's host instead of a tool process;
    ``isolate`` gives each call a fresh tool process of its own. ``timeout`` (seconds) stops
    a call that runs longer and fails it, saying so (``None``: the turn's
    ``TurnOptions.tool_timeout``). ``config`` is set for a
    tool built from data (the tools of an MCP server): ``ref`` then names a factory, called
    with the spec, that returns the tool; it is persisted with the turn, so it never holds
    a secret.
    """

    kind: Literal["tool_spec"] = "tool_spec"
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    ref: str
    approval: ApprovalMode = "never"
    approval_ref: str | None = None
    approvers: list[Principal] | None = None
    requires: dict[str, Any] = Field(default_factory=dict)
    retry_safe: bool = False
    is_async: bool = False
    inline: bool = False
    isolate: bool = False
    config: dict[str, Any] | None = None
    timeout: float | None = Field(default=None, gt=0)

    @field_validator("approvers")
    @classmethod
    def _some_approvers(cls, value: list[str] | None) -> list[str] | None:
        """Sorted, each once; an empty list would let nobody decide: refused."""
        if value is not None and not value:
            raise ValueError("approvers names at least one principal (None lets anyone decide)")
        return sorted(set(value)) if value is not None else None


class RunTool(Message):
    """Run one call: sent by the turn's host to a tool process it was lent (or to its own
    loop, inline), where a ToolActor is made for this call alone and ends with it.

    ``trace_context`` (W3C carrier of the call's ``execute_tool`` span) is the current
    OpenTelemetry span while the tool runs, the parent of the spans it makes itself."""

    kind: Literal["run_tool"] = "run_tool"
    turn_id: str
    root_turn_id: str
    call: ToolCall
    spec: ToolSpec
    arguments: dict[str, Any]
    idempotency_key: str
    attempt: int = 1
    epoch: int = 0  # the epoch its turn's host holds the turn at in the store (0: no store)
    stop_grace: float = 2.0
    heartbeat: float | None = None
    provider: ProviderConfig | None = None
    trace_context: dict[str, str] | None = None
    max_result_bytes: int = 1024 * 1024  # a longer result (or progress report) fails the call where it runs
    tokens_left: int | None = None  # what the turn's budget has left when the call starts (sub-agents get no more)
    cost_left: float | None = None


class ToolAlive(Message):
    """A ToolActor of a placed call says it runs, and where; sent at once, then every
    ``RunTool.heartbeat`` seconds until the call ends."""

    kind: Literal["tool_alive"] = "tool_alive"
    turn_id: str
    call_id: str
    node: str


class ToolResult(Message):
    """How a call ended; ``content`` is the tool message the model will read. ``attempt`` and
    ``epoch`` name the run it reports (``RunTool``'s): a turn drops a result of another.
    ``usage`` and ``cost`` are what the sub-agents the call started used, in all."""

    kind: Literal["tool_result"] = "tool_result"
    turn_id: str
    call_id: str
    outcome: ToolOutcome
    content: str
    attempt: int | None = None
    epoch: int | None = None
    usage: Usage | None = None
    cost: float | None = None


class ReportProgress(Message):
    """Progress a running tool reported (``ToolContext.report_progress``), in ``seq`` order.

    ``approval`` carries instead a child turn's approval request (its ``turn_id``,
    ``call_id``, ``name``, ``arguments``, ``description``), for the parent's caller.
    ``usage`` and ``cost``, when set, are what the call's sub-agents have used so far, in all
    (a stopping call's report may carry them alone)."""

    kind: Literal["report_progress"] = "report_progress"
    turn_id: str
    call_id: str
    seq: int
    data: Any = None
    approval: dict[str, Any] | None = None
    attempt: int | None = None  # the run it is from, as ``ToolResult``'s
    epoch: int | None = None
    usage: Usage | None = None
    cost: float | None = None


class InterruptTool(Message):
    """Tell a ToolActor that its call is stopped (act now) or cancelled (cooperative).

    ``attempt`` names the run of the call it is for (a call may run again after a restart);
    a tool process that gets it before the ``RunTool`` it overtook keeps it, and that call
    then never starts."""

    kind: Literal["interrupt_tool"] = "interrupt_tool"
    turn_id: str
    call_id: str
    mode: Literal["stop", "cancel"]
    reason: str
    cause: str = "user"
    attempt: int | None = None
    grace: float | None = None  # a stop ends the call within this, if shorter than its stop_grace
