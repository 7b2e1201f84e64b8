"""Tools for the steering tests (new input, pause, edited arguments, budgets, the idle bound),
importable by path in every process the runtime starts."""

from __future__ import annotations

import os
from typing import Any

from actors import ToolContext, run_subagent, tool


@tool(requires_approval=True)
def transfer(to: str, amount: int) -> dict[str, Any]:
    """Send ``amount`` to ``to`` (pretend); answers with what it ran with."""
    return {"to": to, "amount": amount}


@tool
def quiet(seconds: float) -> str:
    """Work for ``seconds`` without a word (no progress report), unless stopped."""
    ToolContext.current().cancellation.wait(seconds)
    ToolContext.current().cancellation.throw_if_requested()
    return "done quietly"


@tool
def ticking(steps: int, every: float) -> str:
    """Work ``steps`` steps of ``every`` seconds, reporting progress after each."""
    ctx = ToolContext.current()
    for i in range(steps):
        ctx.cancellation.wait(every)
        ctx.cancellation.throw_if_requested()
        ctx.report_progress({"step": i})
    return f"ticked {steps} times"


@tool
def wait_for_path(path: str) -> str:
    """Return once ``path`` exists (the test creates it when it is ready), reporting progress first."""
    ctx = ToolContext.current()
    ctx.report_progress("waiting")
    while not os.path.exists(path):
        if ctx.cancellation.wait(0.01):
            ctx.cancellation.throw_if_requested()
    return "found"


@tool
def ask_helper(task: str) -> str:
    """Hand ``task`` to a sub-agent with no tools; return its answer."""
    return run_subagent(task)
