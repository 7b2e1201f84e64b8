"""A stop waits for its calls (issue 36), on the turn's rules alone: no actor system.

A stopped turn emits no ``Finish`` while a stopped call has not reported its end, ends once
every call has, and a backstop timer closes a call whose report never comes.
"""

from __future__ import annotations

from typing import Any

from actors.turn.decisions import Emit, Interrupt, Persist, SetTimer, TimerFired, ToolLost
from actors.turn.results import error_result, interrupted_content, with_note
from actors.turn.rules import STOP_CONFIRM_MARGIN, TurnRules
from messages import (
    Finish,
    Marker,
    ReportProgress,
    StopTool,
    StopTurn,
    ToolApprovalResponse,
    ToolResult,
    ToolSpec,
    decode_snapshot,
    encode_snapshot,
)

from .test_turn_rules import SAFE, kinds, new, respond, step, tool_messages

BACKSTOP = 2.0 + STOP_CONFIRM_MARGIN  # the default stop_grace, plus the margin
STOPPED = interrupted_content("the call was stopped", "user")  # what a tool process reports


def reported(call_id: str, outcome: str = "interrupted", content: str = STOPPED) -> ToolResult:
    return ToolResult(turn_id="t", call_id=call_id, outcome=outcome, content=content)  # type: ignore[arg-type]


def running(*calls: str, **options: Any) -> TurnRules:
    """A turn whose calls ``calls`` (of the tool ``safe``) run."""
    rules, _ = new(**options)
    step(rules)
    respond(rules, *[(c, "safe", False) for c in calls])
    return rules


def finishes(out: list[Any]) -> list[str]:
    return [d.event.finish_reason for d in out if isinstance(d, Emit) and isinstance(d.event, Finish)]


def test_a_stopped_turn_emits_no_finish_while_a_stopped_call_has_not_reported_and_ends_once_every_call_has() -> None:
    rules = running("c1", "c2")
    out = rules.handle(StopTurn(turn_id="t", reason="user", request_id="r"))
    assert kinds(out) == ["persist", "interrupt", "settimer", "interrupt", "settimer", "reply"]
    assert [d.message.call_id for d in out if isinstance(d, Interrupt)] == ["c1", "c2"]
    assert finishes(out) == []
    out = rules.handle(reported("c2"))
    assert kinds(out) == ["emit:tool_finished", "persist"]  # c1 has not reported: the turn waits
    out = rules.handle(reported("c1"))
    assert kinds(out) == ["emit:tool_finished", "persist", "emit:error", "emit:finish:stopped", "persist", "done"]
    assert tool_messages(rules) == [("c1", STOPPED), ("c2", STOPPED)]
    assert rules.state.phase == "finished"


def test_a_stopped_call_that_had_just_returned_keeps_its_result() -> None:
    rules = running("c1")
    rules.handle(StopTurn(turn_id="t", reason="user"))
    out = rules.handle(reported("c1", "success", '{"ok": true, "data": 42}'))
    assert finishes(out) == ["stopped"]
    assert tool_messages(rules) == [("c1", '{"ok": true, "data": 42}')]


def test_the_backstop_closes_a_stopped_call_that_never_reports_as_interrupted_saying_so() -> None:
    rules = running("c1", "c2")
    out = rules.handle(StopTurn(turn_id="t", reason="user"))
    assert [d for d in out if isinstance(d, SetTimer)] == [
        SetTimer("stop_backstop:c1:1", BACKSTOP, 0),
        SetTimer("stop_backstop:c2:1", BACKSTOP, 0),
    ]
    rules.handle(reported("c2"))
    assert rules.handle(TimerFired("stop_backstop:c2:1", 0)) == []  # c2 has reported: its backstop does nothing
    out = rules.handle(TimerFired("stop_backstop:c1:1", 0))
    assert kinds(out) == ["emit:tool_finished", "persist", "emit:error", "emit:finish:stopped", "persist", "done"]
    never = with_note(
        interrupted_content("the turn was stopped", "user"),
        f"its tool process did not report its end within {BACKSTOP:g} s",
    )
    assert out[0].event.outcome == "interrupted" and out[0].event.content == never
    assert tool_messages(rules) == [("c1", never), ("c2", STOPPED)]
    assert rules.handle(reported("c1")) == []  # too late: the first end wins


def test_a_second_stop_while_the_calls_end_changes_nothing_and_the_first_reason_wins() -> None:
    rules = running("c1")
    rules.handle(StopTurn(turn_id="t", reason="first"))
    assert kinds(rules.handle(StopTurn(turn_id="t", reason="second", request_id="x"))) == ["reply"]
    assert rules.handle(StopTurn(turn_id="t", reason="third")) == []
    out = rules.handle(reported("c1", content=interrupted_content("the call was stopped", "first")))
    errors = [d.event for d in out if isinstance(d, Emit) and d.event.kind == "error"]
    assert [(e.error_type, e.detail) for e in errors] == [("stopped", "first")]


def test_while_a_stopped_turn_waits_its_approvals_are_refused_and_its_progress_dropped() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "safe", False), ("c2", "gated", True))
    rules.handle(StopTurn(turn_id="t", reason="user"))
    out = rules.handle(ToolApprovalResponse(turn_id="t", call_id="c2", approved=True, request_id="a"))
    assert kinds(out) == ["reply"] and not out[0].reply.ok
    assert rules.handle(ReportProgress(turn_id="t", call_id="c1", seq=0, data="late")) == []
    out = rules.handle(reported("c1"))
    assert finishes(out) == ["stopped"]
    assert tool_messages(rules) == [("c1", STOPPED), ("c2", interrupted_content("the turn was stopped", "user"))]


def test_a_call_past_its_time_limit_fails_once_its_process_has_reported_whatever_it_reports() -> None:
    rules = running("c1", tool_timeout=0.5)
    out = rules.handle(TimerFired("tool_timeout:c1:1", 0))
    assert kinds(out) == ["interrupt", "settimer", "persist"]  # no ToolFinished until the process confirms
    timed_out = error_result("Tool 'safe' timed out after 0.5 s")
    out = rules.handle(reported("c1", content=interrupted_content("the call was stopped", "late")))
    assert kinds(out)[:2] == ["emit:tool_finished", "persist"]
    assert (out[0].event.outcome, out[0].event.content) == ("failed", timed_out)
    assert tool_messages(rules) == [("c1", timed_out)]


def test_a_stopped_call_whose_process_is_lost_ends_interrupted_saying_so() -> None:
    rules = running("c1")
    rules.handle(StopTool(turn_id="t", call_id="c1", reason="too slow"))
    out = rules.handle(ToolLost("c1", "Tool 'safe' failed: its process exited before the call finished"))
    assert out[0].event.outcome == "interrupted"
    assert out[0].event.content == with_note(
        interrupted_content("the call was stopped", "too slow"),
        "Tool 'safe' failed: its process exited before the call finished",
    )


def test_a_turn_stop_after_a_stop_tool_waits_for_both_calls() -> None:
    rules = running("c1", "c2")
    rules.handle(StopTool(turn_id="t", call_id="c1", reason="too slow"))
    out = rules.handle(StopTurn(turn_id="t", reason="user"))
    assert [d.message.call_id for d in out if isinstance(d, Interrupt)] == ["c2"]  # c1 is stopping already
    assert finishes(rules.handle(reported("c2"))) == []
    assert finishes(rules.handle(reported("c1", content=interrupted_content("the call was stopped", "too slow")))) == [
        "stopped"
    ]


def test_a_stop_of_a_turn_with_nothing_running_ends_it_at_once() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "gated", True))  # waits for a human: nothing runs
    out = rules.handle(StopTurn(turn_id="t", reason="user"))
    assert kinds(out) == ["emit:tool_finished", "emit:error", "emit:finish:stopped", "persist", "done"]


def test_a_call_stopped_alone_recovered_after_a_restart_ends_with_the_end_it_was_given() -> None:
    retry = ToolSpec(name="again", ref="x:again", retry_safe=True)
    rules, _ = new(tools=[SAFE, retry])
    step(rules)
    respond(rules, ("c1", "again", False))
    rules.handle(StopTool(turn_id="t", call_id="c1", reason="too slow"))  # written; its end was not
    recovered = TurnRules(decode_snapshot(encode_snapshot(rules.state)))
    out = recovered.recover()
    assert not any(type(d).__name__ == "Spawn" for d in out), "a stopped call never runs again"
    assert tool_messages(recovered) == [
        (
            "c1",
            with_note(
                interrupted_content("the call was stopped", "too slow"),
                "recovered after a restart before its process reported",
            ),
        )
    ]


def test_a_stopped_turn_recovered_after_a_restart_ends_stopped() -> None:
    rules = running("c1")
    rules.handle(StopTurn(turn_id="t", reason="user"))
    assert isinstance(rules.state.stop, Marker)
    recovered = TurnRules(decode_snapshot(encode_snapshot(rules.state)))
    out = recovered.recover()
    assert finishes(out) == ["stopped"]
    assert any(isinstance(d, Persist) for d in out)
    assert tool_messages(recovered) == [("c1", interrupted_content("the turn was stopped", "user"))]
