"""A turn's budgets: the tokens and cost it and its sub-agents have used, against
``TurnOptions.max_tokens`` and ``max_cost``. Pure: it reads and updates the turn's state.

Tokens are the providers' reported totals (prompt and completion): the turn's own model
calls (``TurnState.usage``, a stopped stream's as far as its provider had reported it) and
its sub-agents' (``subagent_usage``, every level below, as each call reports them). Cost is
``ProviderConfig.cost`` of each response at its provider's prices, plus what the sub-agents
report. A budget is spent once what was used reaches it; ``check`` then sets the turn's stop
marker (cause ``budget``), which the priority carries out as any stop (``priority`` rows 2
to 4), and the turn ends ``Finish(budget_exceeded)``. At ``WARN_AT`` of a budget it asks
for one ``BudgetWarning``.
"""

from __future__ import annotations

from messages import Marker, Usage
from messages.state import TurnState

__all__ = ["WARN_AT", "check", "left", "minus", "tokens"]

WARN_AT = 0.8  # the share of a budget at which the turn warns, once


def tokens(usage: Usage) -> int:
    """The tokens of ``usage``: its total, or prompt and completion when a provider gave no total."""
    return usage.total_tokens or usage.prompt_tokens + usage.completion_tokens


def minus(a: Usage, b: Usage) -> Usage:
    """``a - b``, each count at least 0 (what a cumulative report adds to what was counted)."""
    return Usage(
        prompt_tokens=max(0, a.prompt_tokens - b.prompt_tokens),
        completion_tokens=max(0, a.completion_tokens - b.completion_tokens),
        total_tokens=max(0, a.total_tokens - b.total_tokens),
    )


def _used(state: TurnState, extra: Usage | None) -> tuple[int, float]:
    """Tokens and cost used so far, with ``extra`` (a stream's usage reported so far, not yet counted)."""
    own = state.usage + extra if extra is not None else state.usage
    cost = state.cost + (state.provider.cost(extra) if extra is not None else 0.0)
    return tokens(own) + tokens(state.subagent_usage), cost


def left(state: TurnState) -> tuple[int | None, float | None]:
    """What each budget has left (None: no such budget), for a call whose sub-agents it bounds."""
    used_tokens, used_cost = _used(state, None)
    o = state.options
    return (
        max(0, o.max_tokens - used_tokens) if o.max_tokens is not None else None,
        max(0.0, o.max_cost - used_cost) if o.max_cost is not None else None,
    )


def check(state: TurnState, now: float, extra: Usage | None = None) -> list[tuple[str, float, float]]:
    """The warnings now due, as ``(budget, used, limit)``, each once per turn; once a budget is
    spent, the turn's stop marker (unless it is already being stopped)."""
    o = state.options
    if o.max_tokens is None and o.max_cost is None:
        return []
    used_tokens, used_cost = _used(state, extra)
    out: list[tuple[str, float, float]] = []
    spent: str | None = None
    for name, used, limit in (("tokens", float(used_tokens), o.max_tokens), ("cost", used_cost, o.max_cost)):
        if limit is None:
            continue
        if used >= WARN_AT * limit and name not in state.budget_warned:
            state.budget_warned.append(name)
            out.append((name, used, float(limit)))
        if used >= limit and spent is None:
            spent = _spent(name, used, limit, bool(tokens(state.subagent_usage)))
    if spent is not None and state.stop is None and state.phase != "finished":
        state.stop = Marker(kind="stop", reason=spent, at=now, cause="budget")
    return out


def _spent(name: str, used: float, limit: float, children: bool) -> str:
    whose = ", its sub-agents' included" if children else ""
    if name == "tokens":
        return f"the turn's token budget is spent: {used:,.0f} of {limit:,.0f} tokens used{whose}"
    return f"the turn's cost budget is spent: {used:.6g} of {limit:.6g} used{whose}"
