"""Sub-agents: a tool that runs a child turn (an agent used as a tool).

Inside a tool, ``run_subagent(...)`` starts a child turn through the directory of the node
the tool runs on and waits for it; the child's final answer is returned, and becomes the
parent's tool result. The child's events carry its ``parent_turn_id`` and ``root_turn_id``
and reach the parent's subscribers as ``ToolProgress`` of the calling tool
(``{"child_turn_id": ..., "event": {...}}``). A stop or cancel of the parent call reaches
the child (and, through its own tools, every descendant).

A parent's budget covers its children: a child's ``max_tokens`` and ``max_cost`` are at most
what the parent's had left when the calling tool started (``ToolContext.tokens_left``,
``cost_left``), and the child's use (its own and its sub-agents', with each of its
``Finish``) counts against the parent's, which ends ``budget_exceeded`` once it is spent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from messages import ChatMessage, Finish, ProviderConfig, StartTurn, TurnOptions, new_turn_id

from ..errors import ChildTurnFailed, ConfigurationError, ToolCancelled
from ..telemetry.spans import current_context
from .context import ToolContext

__all__ = ["ChildTurnFailed", "run_subagent"]


class ChildTurn:
    """A child turn as its calling tool sees it: resolved by the ToolActor's thread."""

    def __init__(self, start: StartTurn) -> None:
        self.start = start
        self.done = threading.Event()
        self.finish: Finish | None = None

    def resolve(self, finish: Finish) -> None:
        self.finish = finish
        self.done.set()


def run_subagent(
    messages: str | Sequence[ChatMessage],
    *,
    tools: Iterable[Any] = (),
    system: str | None = None,
    provider: ProviderConfig | None = None,
    options: TurnOptions | None = None,
    timeout: float | None = None,
) -> str:
    """Run a child turn from inside a tool and return its final answer.

    The provider defaults to the parent's. Raises ``ToolCancelled`` if the parent call was
    stopped or cancelled meanwhile, ``ChildTurnFailed`` if the child ended otherwise
    than with an answer.
    """
    from .definition import tool_specs

    ctx = ToolContext.current()
    starter = ctx._child_starter
    if starter is None:
        raise ConfigurationError("run_subagent() needs a tool running in a ToolActor")
    provider = provider or ctx.provider
    if provider is None:
        raise ConfigurationError("run_subagent() needs a provider (the parent turn's is not known here)")
    from ..providers.formats import history

    options = _within(options or TurnOptions(), ctx, provider)

    child = ChildTurn(
        StartTurn(
            turn_id=new_turn_id(),
            messages=history(messages, system),
            tools=tool_specs(tools),
            provider=provider,
            options=options,
            parent_turn_id=ctx.turn_id,
            root_turn_id=ctx.root_turn_id,
            trace_context=current_context(ctx.trace_context),  # a child of the calling tool's span
        )
    )
    starter(child)
    if not child.done.wait(timeout):
        raise ChildTurnFailed(f"child turn {child.start.turn_id} gave no answer within {timeout} s")
    finish = child.finish
    assert finish is not None
    if finish.finish_reason in ("stopped", "cancelled"):
        ctx.cancellation.throw_if_requested()
        raise ToolCancelled(
            "stop" if finish.finish_reason == "stopped" else "cancel",
            f"child turn {child.start.turn_id} {finish.finish_reason}",
        )
    if finish.finish_reason != "stop":
        raise ChildTurnFailed(f"child turn {child.start.turn_id} ended with {finish.finish_reason}")
    for m in reversed(finish.messages):
        if m.role == "assistant":
            return m.content or ""
    return ""


def _within(options: TurnOptions, ctx: ToolContext, provider: ProviderConfig) -> TurnOptions:
    """``options`` bounded by what the parent's budgets have left (a child gets no more)."""
    update: dict[str, Any] = {}
    if ctx.tokens_left is not None:
        if ctx.tokens_left <= 0:
            raise ChildTurnFailed("the parent turn's token budget is spent: no sub-agent can start")
        update["max_tokens"] = min(options.max_tokens or ctx.tokens_left, ctx.tokens_left)
    if ctx.cost_left is not None:
        if ctx.cost_left <= 0:
            raise ChildTurnFailed("the parent turn's cost budget is spent: no sub-agent can start")
        if not provider.priced:
            raise ConfigurationError(
                f"the parent turn has a cost budget, and the sub-agent's model {provider.model!r} has no prices "
                "(ProviderConfig.input_price and output_price): its cost could not be counted"
            )
        update["max_cost"] = min(options.max_cost or ctx.cost_left, ctx.cost_left)
    return options.model_copy(update=update) if update else options
