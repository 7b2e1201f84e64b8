"""Budgets and the idle bound end to end (issue 35 items 5 and 6): tokens and cost as the
scripted provider reports them, a stream aborted once the budget is spent, the usage of a
stopped stream, a parent's budget covering its sub-agents, a stream or a call with no sign
of life. Real parts: the scripted provider on 127.0.0.1, tool processes, a multiprocTCPBase
system."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from actors import BudgetWarning, ConfigurationError, Runtime, TextDelta
from actors.lifecycle.processes import session_processes
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.turn.history import history_problems
from actors.turn.results import error_result, interrupted_content
from messages import Error, ProviderConfig, RetryPolicy, TurnOptions, Usage

from . import steer_tools as S
from . import tools_for_tests as T
from .helpers import assert_seq, summary

pytestmark = pytest.mark.integration

RETRY = RetryPolicy(max_attempts=1)


@pytest.fixture
def anthropic(provider: ScriptedProvider) -> Iterator[Runtime]:
    """A Runtime on the scripted provider in Anthropic's format (it reports input tokens first)."""
    rt = Runtime(provider.provider("anthropic", retry=RETRY), hosts=1, tool_processes=2).start()
    try:
        yield rt
    finally:
        rt.close()
        assert rt.admin_sid is not None and session_processes(rt.admin_sid) == []


def test_a_spent_token_budget_ends_the_turn_budget_exceeded_before_the_calls_it_asked_for_run(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("add", {"a": 1, "b": 2})), use_tools(call("add", {"a": 3, "b": 4})), say("never"))
    turn = runtime.run("add twice", tools=[T.add], options=TurnOptions(max_tokens=30))  # 19 tokens a response
    result = turn.result(30)
    assert result.finish_reason == "budget_exceeded" and turn.finished
    events = turn.all_events
    warning = next(e for e in events if isinstance(e, BudgetWarning))
    assert (warning.budget, warning.used, warning.limit) == ("tokens", 38.0, 30.0)
    why = "the turn's token budget is spent: 38 of 30 tokens used"
    assert summary(events)[-4:] == [
        ("budget_warning",), ("tool_finished", "call_1", "interrupted"), ("error", "budget_exceeded", why),
        ("finish", "budget_exceeded"),
    ]  # fmt: skip
    assert result.messages[-1].content == interrupted_content("the turn's budget was spent", why)
    assert len(provider.requests) == 2 and history_problems(result.messages) == []
    assert_seq(events)


def test_a_stream_in_flight_is_aborted_once_its_reported_usage_spends_the_budget(
    anthropic: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("A very long answer that goes on", usage=(500, 40), hold_after=2, hold=threading.Event()))
    turn = anthropic.run("talk", options=TurnOptions(max_tokens=100))
    result = turn.result(30)
    assert provider.requests[0].disconnected.wait(30), "the provider did not see its stream closed"
    assert result.finish_reason == "budget_exceeded"
    assert result.usage == Usage(prompt_tokens=500, completion_tokens=1, total_tokens=501)  # message_start's report
    error = next(e for e in turn.all_events if isinstance(e, Error))
    assert error.message == "the turn's token budget is spent: 501 of 100 tokens used"


@pytest.mark.parametrize("api, counted", [("anthropic", (12, 1)), ("openai", (0, 0))])
def test_a_stopped_stream_counts_the_usage_its_provider_had_reported(
    provider: ScriptedProvider, api: str, counted: tuple[int, int]
) -> None:
    """Anthropic reports the prompt's tokens when the stream starts; OpenAI only at its end."""
    provider.add(say("Thinking it over at length", hold_after=2, hold=threading.Event()))
    with Runtime(provider.provider(api, retry=RETRY), hosts=1, tool_processes=1) as rt:
        turn = rt.run("think")
        turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
        turn.stop()
        usage = turn.result(30).usage
    assert (usage.prompt_tokens, usage.completion_tokens) == counted


def test_the_cost_of_a_turn_at_its_models_prices_and_a_cost_budget_without_prices_refused(
    provider: ScriptedProvider,
) -> None:
    priced = provider.provider(retry=RETRY, input_price=2.0, output_price=8.0)
    provider.add(say("Cheap."))
    with Runtime(priced, hosts=1, tool_processes=1) as rt:
        result = rt.run("hi", options=TurnOptions(max_cost=1.0)).result(30)
        assert result.finish_reason == "stop"
        finish = rt.attach(result.turn_id).wait_for(lambda e: e.kind == "finish", timeout=30)
        assert finish.cost == pytest.approx((12 * 2.0 + 7 * 8.0) / 1e6)  # type: ignore[attr-defined]
        unpriced = ProviderConfig(base_url=provider.base_url, model="m", retry=RETRY)
        with pytest.raises(ConfigurationError, match="max_cost=0.5 needs the prices of model 'm'"):
            rt.run("hi", provider=unpriced, options=TurnOptions(max_cost=0.5))
    assert len(provider.requests) == 1


def test_a_parents_budget_covers_its_sub_agents(runtime: Runtime, provider: ScriptedProvider) -> None:
    """The child may use no more than the parent had left (45 - 19 = 26 tokens); it uses 40,
    ends budget_exceeded, and its use brings the parent over its own budget."""
    provider.add(use_tools(call("ask_helper", {"task": "count"})), say("forty", usage=(30, 10)), say("never"))
    turn = runtime.run("delegate", tools=[S.ask_helper], options=TurnOptions(max_tokens=45))
    result = turn.result(30)
    assert result.finish_reason == "budget_exceeded"
    assert len(provider.requests) == 2  # the parent's, the child's: the parent did not ask again
    finish = turn.all_events[-1]
    assert finish.subagent_usage.total_tokens == 40  # type: ignore[attr-defined]
    tool = next(e for e in turn.all_events if e.kind == "tool_finished")
    child_error = next(
        e.data["event"] for e in turn.all_events
        if e.kind == "tool_progress" and e.data["event"]["kind"] == "error"  # type: ignore[attr-defined]
    )  # fmt: skip
    assert child_error["message"] == "the turn's token budget is spent: 40 of 26 tokens used"
    # failed (the child's end came first) or interrupted (the parent, over its budget with the
    # child's use, stopped the call first): both end the call with exactly one tool message
    assert tool.outcome in ("failed", "interrupted")  # type: ignore[attr-defined]
    assert next(e for e in turn.all_events if isinstance(e, Error)).message == (
        "the turn's token budget is spent: 59 of 45 tokens used, its sub-agents' included"
    )
    assert history_problems(result.messages) == []


# -- the idle bound --------------------------------------------------------------------------


def test_a_call_silent_past_idle_timeout_fails_and_one_that_reports_progress_goes_on(
    anthropic: Runtime, provider: ScriptedProvider
) -> None:
    # ticking reports every 0.25 s for 4 s, twice the bound: a report 8 times as late as due still counts
    provider.add(use_tools(call("quiet", {"seconds": 60}), call("ticking", {"steps": 16, "every": 0.25})), say("Done."))
    options = TurnOptions(idle_timeout=2.0, tool_timeout=None)
    turn = anthropic.run("work", tools=[S.quiet, S.ticking], options=options)
    result = turn.result(30)
    assert result.finish_reason == "stop"
    reason = "Tool 'quiet' showed no sign of life for 2 s (no progress report; idle_timeout)"
    assert [m.content for m in result.messages if m.role == "tool"] == [
        error_result(reason), '{"ok": true, "data": "ticked 16 times"}',
    ]  # fmt: skip


def test_a_stream_with_no_sign_of_life_past_idle_timeout_fails_saying_so(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("one two three", stall_after=1))
    turn = runtime.run("talk", options=TurnOptions(idle_timeout=0.5))
    result = turn.result(30)
    assert provider.requests[0].disconnected.wait(30)
    assert result.finish_reason == "error"
    assert summary(turn.all_events)[-2:] == [
        ("error", "idle_timeout", "the model stream showed no sign of life for 0.5 s (idle_timeout)"),
        ("finish", "error"),
    ]
    assert result.messages[-1].content == "one "
