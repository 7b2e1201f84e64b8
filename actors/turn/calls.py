"""What becomes of a tool call the model made, decided before anything runs.

``classify`` reads one call against the turn's tools: a call of an unknown tool fails
with ``Tool '<name>' not found``; arguments that are not a JSON object (or nest deeper than
``sanitize.MAX_DEPTH``) fail with a message saying what is wrong; a gated call waits for a
human; any other call runs. Pure: it reads its arguments and the predicate it is given.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from messages import CallState, ChatMessage, RunTool, ToolCall, ToolSpec, TurnState

from .budget import left
from .results import error_result
from .sanitize import TooDeep, safe_json

__all__ = [
    "CheckArguments", "Fails", "NeedsApproval", "Runs", "Waits", "answered_before", "classify", "run_message", "timer_call",
]  # fmt: skip

NeedsApproval = Callable[[ToolSpec, dict[str, Any]], bool]
CheckArguments = Callable[[ToolSpec, dict[str, Any]], "str | None"]  # why the arguments do not fit, or None


@dataclass(frozen=True)
class Fails:
    """The call ends at once, ``failed``, with ``content`` as its tool message."""

    content: str


@dataclass(frozen=True)
class Waits:
    """The call waits for a human decision on its parsed ``arguments``."""

    arguments: dict[str, Any]


@dataclass(frozen=True)
class Runs:
    """The call runs now with its parsed ``arguments``."""

    arguments: dict[str, Any]


def classify(call: ToolCall, spec: ToolSpec | None, needs_approval: NeedsApproval) -> Fails | Waits | Runs:
    """The fate of a fresh call of ``spec`` (None: the model named no tool of the turn)."""
    name = call.name
    if spec is None:
        return Fails(f"Tool '{name}' not found")
    raw = (call.arguments or "").strip() or "{}"
    try:
        args = safe_json(json.loads(raw))
    except TooDeep as exc:
        return Fails(error_result(f"Invalid arguments for tool '{name}': {exc}"))
    except (ValueError, RecursionError) as exc:
        return Fails(error_result(f"Invalid arguments for tool '{name}': not valid JSON ({exc})"))
    if not isinstance(args, dict):
        got = type(args).__name__
        return Fails(error_result(f"Invalid arguments for tool '{name}': expected a JSON object, got {got}"))
    return Waits(args) if needs_approval(spec, args) else Runs(args)


def answered_before(messages: Sequence[ChatMessage], call_id: str) -> bool:
    """Whether ``call_id`` is a call of an earlier round of ``messages`` (it has its tool message)."""
    return any(call_id in [c.id for c in m.tool_calls or ()] for m in messages)


def idempotency_key(state: TurnState, call: CallState) -> str:
    """The call's key, made at its first run and kept (``CallState.key``) for every attempt:
    ``TURN:ROUND:CALL``, unique per call though a provider reuse its call ids from round to
    round. A call started by greenroom before keys had rounds keeps its old key."""
    if call.key is None:
        old = call.attempt > 1  # run before, by an older greenroom (its state has no key)
        call.key = f"{state.turn_id}:{call.call.id}" if old else f"{state.turn_id}:{state.round}:{call.call.id}"
    return call.key


def run_message(state: TurnState, call: CallState, spec: ToolSpec) -> RunTool:
    """The ``RunTool`` for attempt ``call.attempt`` of ``call``: what a tool process needs and
    nothing secret (the provider names its key's variable; a tool process drops it); what
    the turn's budgets have left bounds the sub-agents it starts."""
    tokens_left, cost_left = left(state)
    return RunTool(
        turn_id=state.turn_id,
        root_turn_id=state.root_turn_id,
        call=call.call,
        spec=spec,
        arguments=call.arguments or {},
        idempotency_key=idempotency_key(state, call),
        attempt=call.attempt,
        stop_grace=state.options.stop_grace,
        heartbeat=state.options.heartbeat if spec.requires else None,
        provider=state.provider,
        max_result_bytes=state.options.max_result_bytes,
        tokens_left=tokens_left,
        cost_left=cost_left,
    )


def timer_call(name: str) -> tuple[str, str, str]:
    """``(what, call_id, attempt)`` of a call's timer, named ``"{what}:{call_id}:{attempt}"``."""
    what, _, rest = name.partition(":")
    call_id, _, attempt = rest.rpartition(":")
    return what, call_id, attempt
