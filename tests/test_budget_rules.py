"""Budgets and the idle bound, at the rules (no actor system): tokens and cost as providers
and sub-agents report them, the warning at 80%, the end ``budget_exceeded`` with a valid
history, the usage of a stream that was stopped, a stream or a call with no sign of life."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from actors.turn.decisions import Abort, Emit, Interrupt, SetTimer, Spawn, TimerFired
from actors.turn.history import history_problems
from actors.turn.results import error_result, interrupted_content
from actors.turn.rules import TurnRules
from messages import (
    BudgetWarning, ChatMessage, Error, Finish, LLMCompleted, LLMDeltas, LLMUsage, ProviderConfig, ReportProgress,
    StartTurn, StopTurn, ToolCall, ToolResult, TurnOptions, Usage,
)  # fmt: skip

from .test_turn_rules import GATED, PROVIDER, SAFE, Clock, kinds, step, tool_messages

PRICED = PROVIDER.model_copy(update={"input_price": 1.0, "output_price": 10.0})  # per million tokens


def new(provider: ProviderConfig = PROVIDER, **options: Any) -> tuple[TurnRules, Clock]:
    clock = Clock()
    start = StartTurn(
        turn_id="t", messages=[ChatMessage.user("hi")], tools=[SAFE, GATED], provider=provider, options=TurnOptions(**options)
    )
    rules = TurnRules.from_start(start, clock=clock)
    rules.start()
    return rules, clock


def complete(rules: TurnRules, usage: tuple[int, int] | None, *calls: str, seq: int = 0) -> list[Any]:
    tool_calls = [ToolCall(id=c, name="safe", arguments="{}") for c in calls] or None
    u = Usage(prompt_tokens=usage[0], completion_tokens=usage[1], total_tokens=sum(usage)) if usage else None
    message = ChatMessage.assistant(None if calls else "done", tool_calls)
    finish = "tool_calls" if calls else "stop"
    return rules.handle(LLMCompleted(stream_id=rules.state.stream_id, seq=seq, message=message, finish_reason=finish, usage=u))


def events(out: list[Any], cls: type) -> list[Any]:
    return [d.event for d in out if isinstance(d, Emit) and isinstance(d.event, cls)]


def test_a_budget_of_zero_or_less_is_refused() -> None:
    for field, value in (("max_tokens", 0), ("max_tokens", -5), ("max_cost", 0.0), ("idle_timeout", 0)):
        with pytest.raises(ValidationError, match="greater than 0"):
            TurnOptions(**{field: value})


def test_the_token_budget_warns_at_80_percent_once_and_ends_the_turn_once_spent() -> None:
    rules, _ = new(max_tokens=100)
    step(rules)
    out = complete(rules, (70, 15), "c1")  # 85 tokens: the warning, and the call runs
    assert [(w.budget, w.used, w.limit) for w in events(out, BudgetWarning)] == [("tokens", 85.0, 100.0)]
    assert any(isinstance(d, Spawn) for d in out)
    rules.handle(ToolResult(turn_id="t", call_id="c1", outcome="success", content="1", attempt=1))
    step(rules)
    out = complete(rules, (10, 6), "c2")  # 101: spent; the call it asked for never runs
    assert events(out, BudgetWarning) == [] and not any(isinstance(d, Spawn) for d in out)
    assert kinds(out)[-5:] == ["emit:tool_finished", "emit:error", "emit:finish:budget_exceeded", "persist", "done"]
    error, finish = events(out, Error)[0], events(out, Finish)[0]
    assert (error.error_type, error.message, error.cause) == (
        "budget_exceeded", "the turn's token budget is spent: 101 of 100 tokens used", "budget",
    )  # fmt: skip
    assert finish.terminal and finish.usage.total_tokens == 101
    assert tool_messages(rules)[-1] == ("c2", interrupted_content("the turn's budget was spent", error.message))
    assert history_problems(rules.state.messages) == []


def test_the_cost_budget_counts_at_each_models_prices() -> None:
    rules, _ = new(PRICED, max_cost=0.001)
    step(rules)
    out = complete(rules, (300, 60))  # 300 * 1 + 60 * 10 = 900 per million: 0.0009
    finish = events(out, Finish)[0]
    assert finish.finish_reason == "stop" and finish.cost == pytest.approx(0.0009)
    assert [w.budget for w in events(out, BudgetWarning)] == ["cost"]


def test_a_turn_without_prices_reports_no_cost() -> None:
    rules, _ = new()
    step(rules)
    assert events(complete(rules, (3, 4)), Finish)[0].cost is None


def test_usage_reported_mid_stream_that_spends_the_budget_aborts_the_stream_and_counts() -> None:
    rules, _ = new(max_tokens=50)
    step(rules)
    sid = rules.state.stream_id
    rules.handle(LLMDeltas(stream_id=sid, seq=0, text="Long"))
    out = rules.handle(LLMUsage(stream_id=sid, seq=1, usage=Usage(prompt_tokens=60, completion_tokens=1, total_tokens=61)))
    assert [type(d) for d in out if isinstance(d, Abort)] == [Abort]
    finish = events(out, Finish)[0]
    assert finish.finish_reason == "budget_exceeded" and finish.usage.total_tokens == 61
    assert finish.messages[-1] == ChatMessage.assistant("Long")


def test_a_stopped_stream_counts_the_usage_its_provider_had_reported() -> None:
    rules, _ = new()
    step(rules)
    sid = rules.state.stream_id
    rules.handle(LLMUsage(stream_id=sid, seq=0, usage=Usage(prompt_tokens=40, completion_tokens=1, total_tokens=41)))
    out = rules.handle(StopTurn(turn_id="t"))
    assert events(out, Finish)[0].usage == Usage(prompt_tokens=40, completion_tokens=1, total_tokens=41)


def test_a_completed_streams_final_usage_replaces_what_it_reported_before() -> None:
    rules, _ = new()
    step(rules)
    sid = rules.state.stream_id
    rules.handle(LLMUsage(stream_id=sid, seq=0, usage=Usage(prompt_tokens=40, completion_tokens=1, total_tokens=41)))
    out = complete(rules, (40, 9), seq=1)
    assert events(out, Finish)[0].usage.total_tokens == 49


def test_sub_agents_usage_counts_against_the_parents_budget_and_a_spent_one_stops_the_calls() -> None:
    rules, _ = new(PRICED, max_tokens=90)
    step(rules)
    out = complete(rules, (10, 0), "c1", "c2")
    (run1, run2) = [d.run for d in out if isinstance(d, Spawn)]
    assert (run1.tokens_left, run1.cost_left) == (80, None)
    used = Usage(prompt_tokens=50, completion_tokens=20, total_tokens=70)
    out = rules.handle(ReportProgress(turn_id="t", call_id="c1", seq=0, data={"child": 1}, usage=used, cost=0.01, attempt=1))
    assert [w.used for w in events(out, BudgetWarning)] == [80.0]
    assert rules.state.subagent_usage == used
    again = rules.handle(ReportProgress(turn_id="t", call_id="c1", seq=1, usage=used, attempt=1))  # in all: nothing new
    assert kinds(again) == ["emit:tool_progress"]
    more = Usage(prompt_tokens=60, completion_tokens=25, total_tokens=85)
    out = rules.handle(ToolResult(turn_id="t", call_id="c1", outcome="success", content="1", usage=more, attempt=1))
    assert [d.message.call_id for d in out if isinstance(d, Interrupt)] == ["c2"]  # spent (95): the rest stopped
    done = interrupted_content("the turn's budget was spent", rules.state.stop.reason if rules.state.stop else "")
    out = rules.handle(ToolResult(turn_id="t", call_id="c2", outcome="interrupted", content=done, attempt=1))
    finish = events(out, Finish)[0]
    assert finish.finish_reason == "budget_exceeded" and finish.subagent_usage.total_tokens == 85
    assert events(out, Error)[0].message == "the turn's token budget is spent: 95 of 90 tokens used, its sub-agents' included"
    assert finish.cost == pytest.approx(0.00001 + 0.01)


def test_a_sub_agents_usage_reported_after_its_call_was_stopped_still_counts() -> None:
    rules, _ = new()
    step(rules)
    complete(rules, (1, 1), "c1")
    rules.handle(StopTurn(turn_id="t"))
    used = Usage(total_tokens=30)
    rules.handle(ReportProgress(turn_id="t", call_id="c1", seq=0, usage=used, attempt=1))
    out = rules.handle(ToolResult(turn_id="t", call_id="c1", outcome="interrupted", content="x", usage=used, attempt=1))
    assert events(out, Finish)[0].subagent_usage.total_tokens == 30


# -- the idle bound --------------------------------------------------------------------------


def test_a_stream_with_no_sign_of_life_for_idle_timeout_fails_saying_so() -> None:
    rules, clock = new(idle_timeout=30)
    out = step(rules)
    assert SetTimer("idle_stream", 30, 1) in out
    sid = rules.state.stream_id
    clock.now += 20
    rules.handle(LLMDeltas(stream_id=sid, seq=0, text="a"))
    clock.now += 10
    assert rules.handle(TimerFired("idle_stream", 1)) == [SetTimer("idle_stream", 20, 1)]  # it spoke 10 s ago
    clock.now += 20
    out = rules.handle(TimerFired("idle_stream", 1))
    assert out[0] == Abort(sid, "the model stream showed no sign of life for 30 s (idle_timeout)")
    error = events(out, Error)[0]
    assert (error.error_type, error.message) == ("idle_timeout", "the model stream showed no sign of life for 30 s (idle_timeout)")
    assert events(out, Finish)[0].messages[-1] == ChatMessage.assistant("a")


def test_a_call_that_reports_progress_goes_on_and_one_silent_for_idle_timeout_fails() -> None:
    rules, clock = new(idle_timeout=5, tool_timeout=None)
    step(rules)
    out = complete(rules, None, "c1", "c2")
    assert SetTimer("idle:c1:1", 5, 0) in out and SetTimer("idle:c2:1", 5, 0) in out
    for _ in range(4):  # c1 reports every 3 s: it goes on, past the bound
        clock.now += 3
        rules.handle(ReportProgress(turn_id="t", call_id="c1", seq=0, data="page", attempt=1))
        out = rules.handle(TimerFired("idle:c1:1", 0))
        assert all(not isinstance(d, Interrupt) for d in out)
    out = rules.handle(TimerFired("idle:c2:1", 0))
    reason = "Tool 'safe' showed no sign of life for 5 s (no progress report; idle_timeout)"
    assert [d.message.call_id for d in out if isinstance(d, Interrupt)] == ["c2"]
    rules.handle(ToolResult(turn_id="t", call_id="c2", outcome="interrupted", content="x", attempt=1))
    rules.handle(ToolResult(turn_id="t", call_id="c1", outcome="success", content="1", attempt=1))
    assert tool_messages(rules) == [("c1", "1"), ("c2", error_result(reason))]
