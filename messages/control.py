"""Commands that start and steer a turn, and the reply to each.

Every command is a plain message that any sender may send: the caller through the
``Runtime`` facade, a supervisor actor, another process or host (through the directory, by
``turn_id``). Commands that carry a ``request_id`` are answered with one ``ControlReply`` to
their sender; a rejected command changes nothing.

Priority comes from the TurnActor's mailbox: cancel > approval-resume > max-rounds > the
next LLM call. ``StopTurn`` and ``CancelTurn`` are idempotent; the first reason wins.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import Field, StrictInt, StrictStr, field_validator

from .base import Message
from .chat import ChatMessage
from .events import ForkOrigin
from .llm import ProviderConfig
from .principals import Principal
from .tool import ToolSpec

__all__ = [
    "TURN_COMMANDS", "CancelTurn", "Consumed", "ControlReply", "PauseTurn", "RejectCode", "RespondToApprovals",
    "ResumeTurn", "SendInput", "StartTurn", "StopCause", "StopTool", "StopTurn", "Subscribe",
    "ToolApprovalResponse", "TurnCommand", "TurnOptions", "Unsubscribe", "new_turn_id", "reply_for", "unaddressed",
]  # fmt: skip


def new_turn_id() -> str:
    """A fresh, unique turn id."""
    return "turn_" + uuid.uuid4().hex[:16]


StopCause = Literal["user", "parent", "shutdown", "grace_expired", "budget"]
"""Why a turn is stopped or cancelled: a caller (``user``, the default, also a supervisor),
a parent turn's stop or cancel reaching its child (``parent``), the runtime closing
(``shutdown``), a cancel whose grace ran out and became a stop (``grace_expired``), or the
turn's budget spent (``budget``: it ends ``Finish(budget_exceeded)``)."""


class TurnOptions(Message):
    """How a turn runs. Times are seconds.

    ``approval_window`` is how long an approval waits, once every pending call has a
    decision, before it is committed: a cancel or stop that arrives in that window wins.
    The default, 10 ms, is twice the smallest window in which a cancel sent right behind an
    approval won every trial of ``bench/approval_window.py`` (5 ms: 40/40; 2 ms: 31/40).
    ``approval_timeout`` denies calls still undecided after it (``Approval timed out``).
    ``stop_grace`` is how long a stopped tool's process group gets between SIGTERM and
    SIGKILL (a tool still running then ends with its process); its ``on_stop`` callbacks
    get half of it before the tool sees its stop. ``linger`` is how long a finished TurnActor stays to answer late commands.
    A call placed on another node by capability sends a heartbeat every ``heartbeat``
    seconds; one silent for ``lost_after`` seconds (its host died) ends as failed.

    Bounds: a call still running after ``tool_timeout`` seconds (its tool's own
    ``@tool(timeout=...)`` wins) is stopped and fails saying so; ``None`` lets it run until
    the turn is stopped. A result (and each progress report) longer than
    ``max_result_bytes`` in UTF-8 fails its call in the tool's own process, before it
    crosses the wire. ``finish_history="new"``: each ``Finish`` carries the messages added
    since the turn's previous ``Finish`` (from ``history_from``); ``"full"``: the whole
    history, every time. A subscriber that reads slower than the turn runs is sent at most
    its window of events ahead of what it read; once the turn has ended, one still behind
    after ``reader_grace`` seconds is dropped with an ``Error(reader_dropped)``.

    Budgets: ``max_tokens`` (the providers' reported tokens, prompt and completion) and
    ``max_cost`` (from the prices in ``ProviderConfig``: ``input_price`` and
    ``output_price`` per million tokens) bound the turn and its sub-agents together; at 80%
    of either a ``BudgetWarning`` is emitted, once; once either is spent (as the turn
    learns it: a response's usage, a usage report mid-stream, a sub-agent's report) the
    turn ends ``Finish(budget_exceeded)`` as a stop would end it (a stream in flight is
    aborted, running calls are stopped), with a valid history. ``idle_timeout``: a model
    stream with no message for that long (no delta, no retry, no usage report), or a call
    with no progress report for that long, fails, saying so; a call that reports progress
    goes on.
    """

    kind: Literal["turn_options"] = "turn_options"
    max_rounds: int = Field(default=10, ge=0)
    approval_timeout: float | None = Field(default=None, gt=0)
    approval_window: float = Field(default=0.01, ge=0)
    stop_grace: float = Field(default=2.0, ge=0)
    linger: float = Field(default=2.0, ge=0)
    heartbeat: float = Field(default=1.0, gt=0)
    lost_after: float = Field(default=5.0, gt=0)
    tool_timeout: float | None = Field(default=300.0, gt=0)
    max_result_bytes: int = Field(default=1024 * 1024, ge=1024)
    finish_history: Literal["new", "full"] = "new"
    reader_grace: float = Field(default=300.0, ge=0)
    max_tokens: int | None = Field(default=None, gt=0)
    max_cost: float | None = Field(default=None, gt=0)
    idle_timeout: float | None = Field(default=None, gt=0)


class TurnCommand(Message):
    """A command that steers a running turn (the set is its subclasses: ``TURN_COMMANDS``).

    Each names its turn (``turn_id``) and may carry a ``request_id``; it is answered with
    one ``ControlReply`` when it carries one, and always when it is refused. Actors that
    route commands dispatch on this class (``receiveMsg_TurnCommand``).

    ``answer_within`` says how many seconds its sender waits for the answer: a host that
    does not know the turn (yet: the command may have overtaken its start) answers
    ``unknown_turn`` before then instead of holding it longer (``Runtime.control`` and the
    handles set it from their ``timeout``); without it a command is held ``command_hold``.

    ``by`` names who sent it (a principal: ``messages.principals``): the console sets it from
    the person's login, the command line from ``--as`` or the OS user, the API from the
    caller. It is recorded with what the command decided (the call's ``decided_by``, the stop
    or cancel marker, the events that show the effect) and checked against the tool's
    ``approvers``; None names nobody."""

    turn_id: str | None = None
    request_id: str | None = None
    answer_within: float | None = Field(default=None, gt=0)
    by: Principal | None = None


class StartTurn(Message):
    """Start a turn. Its events go to the sender (and to later ``Subscribe`` senders).

    ``tools`` takes ``ToolSpec``s, or tools as functions and ``Tool`` objects, as
    ``Runtime.run`` does. ``trace_context`` (a W3C ``traceparent``/``tracestate`` carrier,
    ``{}`` for a new trace) asks for the turn's OpenTelemetry spans, children of its parent;
    without it nothing is traced. ``requires`` names node capabilities the turn's host must
    have (placement across nodes); a host that receives the message runs the turn anyway."""

    kind: Literal["start_turn"] = "start_turn"
    turn_id: str = Field(default_factory=new_turn_id)
    messages: list[ChatMessage]
    tools: list[ToolSpec] = Field(default_factory=list)
    provider: ProviderConfig
    options: TurnOptions = Field(default_factory=TurnOptions)
    parent_turn_id: str | None = None
    root_turn_id: str | None = None
    trace_context: dict[str, str] | None = None
    window: int | None = Field(default=None, ge=1)  # the sender's flow control, as in Subscribe
    requires: dict[str, Any] = Field(default_factory=dict)
    request_id: str | None = None  # admission (actors.host.admission) answers it: running, queued, overloaded
    priority: StrictInt = 0
    tenant: StrictStr = ""
    wait: bool = False
    forked_from: ForkOrigin | None = None  # ``runtime.fork``'s: kept in the turn's state and its TurnStarted

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_as_specs(cls, value: Any) -> Any:
        """A ``Tool`` (``@tool``) is taken as its ``spec``; a bare function is refused, saying
        how to make it a tool (this module is plain data: it never imports the tool layer)."""
        if not isinstance(value, (list, tuple)):
            return value
        out = []
        for t in value:
            spec = getattr(t, "spec", None) if not isinstance(t, (dict, ToolSpec)) else None
            if isinstance(spec, ToolSpec):
                out.append(spec)
            elif callable(t) and not isinstance(t, ToolSpec):
                name = getattr(t, "__name__", repr(t))
                raise ValueError(
                    f"{name} is a plain function: StartTurn takes ToolSpecs or tools; wrap it with "
                    "actors.tool(...) or convert with actors.tool_specs([...])"
                )
            else:
                out.append(t)
        return out


class StopTurn(TurnCommand):
    """Stop now: abort the stream, stop every tool, end with ``Finish(stopped)``."""

    kind: Literal["stop_turn"] = "stop_turn"
    turn_id: str
    reason: str = "stop requested"
    cause: StopCause = "user"
    request_id: str | None = None


class CancelTurn(TurnCommand):
    """Cancel at the next safe boundary; after ``grace`` seconds it becomes a stop."""

    kind: Literal["cancel_turn"] = "cancel_turn"
    turn_id: str
    reason: str = "cancel requested"
    cause: StopCause = "user"
    grace: float | None = Field(default=None, ge=0)
    request_id: str | None = None


class ToolApprovalResponse(TurnCommand):
    """A decision on one approval request. Sendable alone (with ``turn_id``) or in a batch;
    in a batch its ``by`` is the batch's unless it names one itself (a batch whose responses
    name another principal than it does is refused, ``invalid``).

    ``arguments`` (an approval only) are the call's arguments as the approver edited them:
    checked against the tool's parameters (a misfit is refused, ``invalid``, saying why, and
    the call stays undecided), the call runs with them, and its tool message says so
    (``"edited_arguments"`` beside its result)."""

    kind: Literal["tool_approval_response"] = "tool_approval_response"
    call_id: str
    approved: bool
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    turn_id: str | None = None
    request_id: str | None = None


class RespondToApprovals(TurnCommand):
    """Several decisions at once; ``deny_rest`` denies every call still undecided."""

    kind: Literal["respond_to_approvals"] = "respond_to_approvals"
    turn_id: str
    responses: list[ToolApprovalResponse] = Field(default_factory=list)
    deny_rest: bool = False
    deny_reason: str | None = None
    request_id: str | None = None


class StopTool(TurnCommand):
    """Stop one call now; it ends with the interrupted result its tool process reports (the
    reply comes first), and the turn goes on."""

    kind: Literal["stop_tool"] = "stop_tool"
    turn_id: str
    call_id: str
    reason: str = "tool stop requested"
    request_id: str | None = None


Timing = Literal["next_call", "now"]


class SendInput(TurnCommand):
    """New input (user messages) for a running turn; it enters the history before the turn's
    next model call, where an ``InputAccepted`` event says so.

    ``next_call``: after the calls running now have their results. ``now``: the stream in
    flight is aborted at once (its text kept in the history, as a stop keeps it) and the
    model is called again with the input; running calls finish first, or are stopped with
    ``stop_calls``. While approvals are pending the input waits for their decisions, unless
    ``deny_pending`` denies every undecided call (``Rejected: the user sent new input``). A
    paused turn keeps the input until it is resumed. A finished turn refuses it
    (``turn_finished``)."""

    kind: Literal["send_input"] = "send_input"
    turn_id: str
    messages: list[ChatMessage]
    when: Timing = "next_call"
    stop_calls: bool = False
    deny_pending: bool = False
    request_id: str | None = None


class PauseTurn(TurnCommand):
    """Hold the turn before its next model call: it ends its run with ``Finish(paused)`` (not
    terminal) once nothing runs, and waits for a ``ResumeTurn``. ``now`` aborts the stream in
    flight first (its text kept, as a stop keeps it); running calls finish either way. A
    paused turn takes stop, cancel, input and approvals; a store keeps it paused across
    restarts and failovers."""

    kind: Literal["pause_turn"] = "pause_turn"
    turn_id: str
    when: Literal["next_step", "now"] = "next_step"
    reason: str = "pause requested"
    request_id: str | None = None


class ResumeTurn(TurnCommand):
    """Let a paused turn go on, with ``messages`` (user input) entering its history first if
    given. A turn that is not paused refuses it (``not_waiting``); one whose pause has not
    taken effect yet has it withdrawn."""

    kind: Literal["resume_turn"] = "resume_turn"
    turn_id: str
    messages: list[ChatMessage] | None = None
    request_id: str | None = None


class Subscribe(Message):
    """Receive this turn's events from ``since`` (its ``seq``) on, then as they happen.

    ``window`` (events) asks for flow control: the turn's host sends at most ``window``
    events past ``unread_from`` (the first the subscriber has not read; ``since`` if not
    given, so asking again never widens the window), then past each ``Consumed``, and holds
    the rest in the turn's log; ``None`` (a supervisor's default) sends every event as it
    happens. The first ``Finish`` a subscriber gets carries the whole history, later ones
    what is new. ``answer_within`` as for a ``TurnCommand`` (``Runtime.attach`` sets it)."""

    kind: Literal["subscribe"] = "subscribe"
    turn_id: str
    since: int = Field(default=0, ge=0)
    request_id: str | None = None
    window: int | None = Field(default=None, ge=1)
    answer_within: float | None = Field(default=None, gt=0)
    unread_from: int | None = Field(default=None, ge=0)


class Consumed(Message):
    """From a subscriber to its turn's host: I have read your events up to ``seq`` (included);
    send me up to my window past it."""

    kind: Literal["consumed"] = "consumed"
    turn_id: str
    seq: int


class Unsubscribe(Message):
    """From a subscriber to its turn's host: send me nothing more of this turn."""

    kind: Literal["unsubscribe"] = "unsubscribe"
    turn_id: str


TURN_COMMANDS: tuple[type[TurnCommand], ...] = (
    StopTurn,
    CancelTurn,
    ToolApprovalResponse,
    RespondToApprovals,
    StopTool,
    SendInput,
    PauseTurn,
    ResumeTurn,
)
"""Every command a turn's rules take; each is a ``TurnCommand``."""


RejectCode = Literal[
    "unknown_turn", "turn_finished", "unknown_call", "not_waiting", "duplicate", "invalid", "not_allowed",
    "overloaded", "queued",
]  # fmt: skip
"""Why a command was refused: the turn is unknown or has finished, the call is unknown or not
waiting, the decision repeats one, the command is malformed, (``not_allowed``) its ``by``
is not one of the ``approvers`` of the call's tool, (``overloaded``) a ``StartTurn`` found its
host's queue full, or (``queued``) the turn is queued: only a stop or a cancel until it starts."""


class ControlReply(Message):
    """The answer to a command that carried a ``request_id``; ``ok=False`` changed nothing.

    ``resumes_at``: set when the command ends a pause (the last decision of an approval round,
    or a stop or cancel of a turn that was waiting), the ``seq`` of the first event of the run
    it starts. ``room``: a start's answer, how many more turns its host would start at once."""

    kind: Literal["control_reply"] = "control_reply"
    turn_id: str
    request_id: str | None = None
    command: str
    ok: bool
    code: RejectCode | None = None
    message: str = ""
    resumes_at: int | None = None
    room: int | None = None


def reply_for(
    command: Message,
    ok: bool,
    code: RejectCode | None = None,
    message: str = "",
    *,
    turn_id: str | None = None,
    resumes_at: int | None = None,
) -> ControlReply:
    """The ``ControlReply`` to ``command``: its turn, its ``request_id``, its kind."""
    return ControlReply(
        turn_id=turn_id if turn_id is not None else (getattr(command, "turn_id", None) or ""),
        request_id=getattr(command, "request_id", None),
        command=getattr(command, "kind", type(command).__name__),
        ok=ok,
        code=code,
        message=message,
        resumes_at=resumes_at,
    )


def unaddressed(command: Message) -> ControlReply | None:
    """The refusal (``invalid``) of a command that names no turn, or None when it names one:
    every place that routes commands by ``turn_id`` checks it here."""
    if getattr(command, "turn_id", None):
        return None
    return reply_for(command, False, "invalid", f"{command.kind} needs a turn_id")
