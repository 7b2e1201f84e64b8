"""The calls of a batch as they run: started, reported on, stopped alone, timed out, ended.

Free functions ``(rules, message) -> decisions`` over a turn's ``Rules`` (``core``). Every
call ends with exactly one ``ToolFinished`` (``done``); the batch's tool messages join the
history, in the order of the assistant's ``tool_calls``, once the whole batch has ended
(``append_tool_messages``). A call stopped (the turn's stop, ``StopTool``, its time limit)
is ``stopping`` until its tool process reports its end, or its backstop timer gives it the
end it was told it would have, saying so. With ``TurnOptions.idle_timeout`` a call with no
progress report for that long is stopped and fails, saying so. What a call's sub-agents
used (its reports and its result carry it, in all) counts against the turn's budgets.
"""

from __future__ import annotations

from typing import Any, Literal

from messages import (
    BudgetWarning, CallState, ChatMessage, InterruptTool, ReportProgress, StopCause, ToolApprovalRequest,
    ToolCallStarted, ToolFinished, ToolOutcome, ToolProgress, ToolResult, ToolSpec, TurnState, Usage,
)  # fmt: skip

from . import budget
from .calls import Fails, Runs, classify, run_message
from .core import Rules
from .decisions import Decision, Interrupt, Persist, SetTimer, Spawn, ToolLost
from .results import error_result, with_edited, with_note
from .sanitize import safe_text

__all__ = [
    "STOP_CONFIRM_MARGIN", "End", "Mode", "append_tool_messages", "call_ended", "classify_call", "done", "interrupt",
    "interrupt_running", "on_call_timer", "on_progress", "on_tool_lost", "on_tool_result", "spawn", "stale",
    "stop_call", "unreported", "warn",
]  # fmt: skip

STOP_CONFIRM_MARGIN = 5.0  # seconds past stop_grace a stopped call's process has to report its end

End = tuple[ToolOutcome, str]  # a call's outcome and its tool message
Mode = Literal["stop", "cancel"]  # as InterruptTool.mode


def classify_call(rules: Rules, cs: CallState) -> list[Decision]:
    """Decide a fresh call's fate: it fails at once, waits for approval, or runs now."""
    fate = classify(cs.call, rules.specs.get(cs.call.name), rules.needs_approval)
    if isinstance(fate, Fails):
        return done(rules, cs, "failed", fate.content)
    cs.arguments = fate.arguments
    if isinstance(fate, Runs):
        return spawn(rules, cs, rules.specs[cs.call.name])
    cs.status = "pending_approval"
    spec = rules.specs[cs.call.name]
    request: dict[str, Any] = dict(call_id=cs.call.id, name=cs.call.name, arguments=fate.arguments)
    request.update(description=spec.description, approvers=spec.approvers)
    return [rules.emit(ToolApprovalRequest, **request)]


def spawn(rules: Rules, cs: CallState, spec: ToolSpec) -> list[Decision]:
    """Run the call (again): its next attempt, a ``ToolCallStarted``, its time limit."""
    s = rules.state
    cs.status = "running"
    cs.attempt += 1
    run = run_message(s, cs, spec)
    started = {"call_id": cs.call.id, "name": cs.call.name, "arguments": cs.arguments, "round": s.round}
    started["by"] = cs.decided_by
    out: list[Decision] = [Spawn(run), rules.emit(ToolCallStarted, **started)]
    timeout = spec.timeout if spec.timeout is not None else s.options.tool_timeout
    if timeout is not None:
        out.append(SetTimer(f"tool_timeout:{cs.call.id}:{cs.attempt}", timeout, s.round))
    if s.options.idle_timeout is not None:
        rules.alive[cs.call.id] = rules.now()
        out.append(SetTimer(f"idle:{cs.call.id}:{cs.attempt}", s.options.idle_timeout, s.round))
    return out


def done(rules: Rules, cs: CallState, outcome: ToolOutcome, content: str) -> list[Decision]:
    """The call has ended: its one ``ToolFinished``, ``content`` being its tool message (which
    names the arguments it ran with when the approver edited them)."""
    if cs.edited:
        content = with_edited(content, cs.arguments)
    cs.status, cs.outcome, cs.content = "done", outcome, content
    rules.alive.pop(cs.call.id, None)
    end = dict(call_id=cs.call.id, name=cs.call.name, outcome=outcome, content=content, by=ended_by(cs))
    return [rules.emit(ToolFinished, **end)]


def ended_by(cs: CallState) -> str | None:
    """Who ended the call by a command (``ToolFinished.by``): who stopped it, else who denied it."""
    return cs.stopped_by or (cs.decided_by if cs.decision == "denied" else None)


def append_tool_messages(state: TurnState) -> None:
    """The batch's tool messages join the history, in the order of its calls; the batch closes."""
    s = state
    for cs in s.batch or ():
        s.messages.append(ChatMessage.tool(cs.content or "", cs.call.id, name=cs.call.name))
    s.batch = None
    s.paused = s.commit_pending = False
    s.approval_deadline = s.waiting_since = None


def on_tool_result(rules: Rules, msg: ToolResult) -> list[Decision]:
    cs = rules.state.call(msg.call_id)
    if stale(cs, msg.attempt):
        return []  # an earlier run's: never recorded
    spent = _subagents(rules, cs, msg.usage, msg.cost)
    return spent + call_ended(rules, msg.call_id, msg.outcome, safe_text(msg.content))


def on_tool_lost(rules: Rules, msg: ToolLost) -> list[Decision]:
    cs = rules.state.call(msg.call_id)
    if cs is not None and cs.status == "stopping":  # stopped, and its process is gone
        return call_ended(rules, msg.call_id, *unreported(cs, msg.message))
    return call_ended(rules, msg.call_id, "failed", error_result(msg.message))


def call_ended(rules: Rules, call_id: str, outcome: ToolOutcome, content: str) -> list[Decision]:
    """A call's end as reported (a stopped call's too: completed work is kept), but a time limit's stays."""
    s = rules.state
    cs = s.call(call_id)
    if s.phase == "finished" or cs is None or cs.status not in ("running", "stopping"):
        return []  # a duplicate, or the turn has ended: the first end wins
    if cs.status == "stopping" and cs.outcome == "failed":  # past its time limit
        outcome, content = "failed", cs.content or content
    return done(rules, cs, outcome, content) + [Persist("tool_result")] + rules.advance()


def on_call_timer(rules: Rules, what: str, call_id: str, attempt: str) -> list[Decision]:
    """A call past its time limit is stopped (it fails, saying so, once ended); a stopped call whose
    process never reported (its node vanished, say) ends as it was told it would, saying so."""
    s, status = rules.state, "stopping" if what == "stop_backstop" else "running"
    cs = s.call(call_id)
    if cs is None or str(cs.attempt) != attempt or cs.status != status:
        return []
    if what == "idle":
        return _on_idle(rules, cs)
    if what == "stop_backstop":
        why = f"its tool process did not report its end within {s.options.stop_grace + STOP_CONFIRM_MARGIN:g} s"
        return call_ended(rules, call_id, *unreported(cs, why))
    spec = rules.specs[cs.call.name]
    limit = spec.timeout if spec.timeout is not None else s.options.tool_timeout
    reason = f"Tool '{cs.call.name}' timed out after {limit:g} s"
    return stop_call(rules, cs, reason, ("failed", error_result(reason))) + [Persist("call_stopping")]


def _on_idle(rules: Rules, cs: CallState) -> list[Decision]:
    """A running call silent for ``idle_timeout`` is stopped and fails; one that reported since
    has its timer set again for what is left."""
    s, limit = rules.state, rules.state.options.idle_timeout
    if limit is None:
        return []
    quiet = rules.now() - rules.alive.get(cs.call.id, rules.now())
    if quiet < limit:
        return [SetTimer(f"idle:{cs.call.id}:{cs.attempt}", limit - quiet, s.round)]
    reason = f"Tool '{cs.call.name}' showed no sign of life for {limit:g} s (no progress report; idle_timeout)"
    return stop_call(rules, cs, reason, ("failed", error_result(reason))) + [Persist("call_stopping")]


def stop_call(rules: Rules, cs: CallState, why: str, end: End, cause: StopCause = "user") -> list[Decision]:
    """Interrupt a running call: ``stopping`` until its process reports, or its backstop gives it ``end``."""
    s = rules.state
    cs.status, (cs.outcome, cs.content) = "stopping", end
    name, delay = f"stop_backstop:{cs.call.id}:{cs.attempt}", s.options.stop_grace + STOP_CONFIRM_MARGIN
    return [interrupt(s, cs, "stop", why, cause), SetTimer(name, delay, s.round)]


def interrupt_running(
    state: TurnState, mode: Mode, reason: str, cause: StopCause = "user", grace: float | None = None
) -> list[Decision]:
    """An ``Interrupt`` of every running call."""
    return [interrupt(state, cs, mode, reason, cause, grace) for cs in state.batch or () if cs.status == "running"]


def interrupt(
    state: TurnState, cs: CallState, mode: Mode, reason: str, cause: StopCause, grace: float | None = None
) -> Interrupt:
    t, c = state.turn_id, cs.call.id
    return Interrupt(
        InterruptTool(turn_id=t, call_id=c, mode=mode, reason=reason, cause=cause, attempt=cs.attempt, grace=grace)
    )


def on_progress(rules: Rules, msg: ReportProgress) -> list[Decision]:
    cs = rules.state.call(msg.call_id)
    if cs is None or rules.state.phase == "finished" or stale(cs, msg.attempt):
        return []
    spent = _subagents(rules, cs, msg.usage, msg.cost)
    if cs.status != "running":
        return spent + (rules.advance() if spent and rules.state.stop is not None else [])
    rules.alive[cs.call.id] = rules.now()
    if msg.approval is not None:  # a child turn's call waits for a human: say so here
        a = msg.approval
        fields = dict(name=a["name"], arguments=a.get("arguments"), description=a.get("description", ""))
        fields["approvers"] = a.get("approvers")
        out = [rules.emit(ToolApprovalRequest, call_id=a["call_id"], child_turn_id=a["turn_id"], **fields)]
    else:
        out = [rules.emit(ToolProgress, call_id=msg.call_id, data=msg.data)]
    return spent + out + (rules.advance() if spent and rules.state.stop is not None else [])


def _subagents(rules: Rules, cs: CallState | None, usage: Usage | None, cost: float | None) -> list[Decision]:
    """What a call's sub-agents have used, in all, as it reports it: what is new is counted
    (with a ``Persist``), and checked against the budgets."""
    if cs is None or cs.status not in ("running", "stopping") or (usage is None and cost is None):
        return []
    s = rules.state
    new_usage = budget.minus(usage, cs.usage) if usage is not None else Usage()
    new_cost = max(0.0, cost - cs.cost) if cost is not None else 0.0
    if budget.tokens(new_usage) == 0 and new_cost == 0.0:
        return []
    if usage is not None:
        cs.usage = usage
    if cost is not None:
        cs.cost = cost
    s.subagent_usage = s.subagent_usage + new_usage
    s.cost += new_cost
    return [Persist("subagent_usage"), *warn(rules)]


def warn(rules: Rules, extra: Usage | None = None) -> list[Decision]:
    """A ``BudgetWarning`` for each budget now at 80%, once; a spent one sets the stop marker."""
    found = budget.check(rules.state, rules.now(), extra)
    return [rules.emit(BudgetWarning, budget=name, used=used, limit=limit) for name, used, limit in found]


def unreported(cs: CallState, why: str) -> End:
    """The end of a stopped call whose process did not report it: the one it was given, saying why."""
    return cs.outcome or "interrupted", with_note(cs.content or "", why)


def stale(cs: CallState | None, attempt: int | None) -> bool:
    """A result or progress report from another run of the call than its current one."""
    return cs is not None and attempt is not None and attempt != cs.attempt
