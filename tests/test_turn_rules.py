"""The turn's rules driven directly: no actor system, no network, exact decisions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from actors.turn.decisions import (
    Abort,
    Emit,
    Reply,
    SetTimer,
    Spawn,
    TakeStep,
    TimerFired,
    ToolLost,
)
from actors.turn.results import interrupted_content
from actors.turn.rules import STOP_CONFIRM_MARGIN, TurnRules
from messages import (
    CancelTurn,
    ChatMessage,
    Finish,
    LLMCompleted,
    LLMDeltas,
    LLMFailed,
    ProviderConfig,
    ReportProgress,
    RespondToApprovals,
    StartTurn,
    StopTool,
    StopTurn,
    ToolApprovalResponse,
    ToolCall,
    ToolResult,
    ToolSpec,
    TurnOptions,
)

PROVIDER = ProviderConfig(base_url="http://127.0.0.1:9/v1", model="m")
SAFE = ToolSpec(name="safe", ref="x:safe")
GATED = ToolSpec(name="gated", ref="x:gated", approval="always", description="Needs a human.")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def new(tools: list[ToolSpec] | None = None, **options: Any) -> tuple[TurnRules, list[Any]]:
    start = StartTurn(
        turn_id="t",
        messages=[ChatMessage.user("hi")],
        tools=tools or [SAFE, GATED],
        provider=PROVIDER,
        options=TurnOptions(**options),
    )
    rules = TurnRules.from_start(start, clock=Clock())
    return rules, rules.start()


def kinds(decisions: list[Any]) -> list[str]:
    out = []
    for d in decisions:
        if isinstance(d, Emit):
            out.append(f"emit:{d.event.kind}" + (f":{d.event.finish_reason}" if isinstance(d.event, Finish) else ""))
        else:
            out.append(type(d).__name__.lower())
    return out


def step(rules: TurnRules) -> list[Any]:
    return rules.handle(TakeStep("t"))


def respond(rules: TurnRules, *calls: tuple[str, str, bool]) -> list[Any]:
    """Stream a response with tool calls ``(id, name, _)`` and complete it."""
    stream_id = rules.state.stream_id
    tool_calls = [ToolCall(id=c[0], name=c[1], arguments="{}") for c in calls]
    return rules.handle(
        LLMCompleted(
            stream_id=stream_id,
            seq=0,
            message=ChatMessage.assistant(None, tool_calls or None),
            finish_reason="tool_calls" if calls else "stop",
        )
    )


def result(call_id: str, content: str = '{"ok": true, "data": 1}') -> ToolResult:
    return ToolResult(turn_id="t", call_id=call_id, outcome="success", content=content)


def tool_messages(rules: TurnRules) -> list[tuple[str | None, str | None]]:
    return [(m.tool_call_id, m.content) for m in rules.state.messages if m.role == "tool"]


def test_start_emits_started_persists_and_takes_a_step() -> None:
    _, out = new()
    assert kinds(out) == ["emit:turn_started", "persist", "schedulestep"]


def test_a_step_starts_a_stream_with_the_history_and_tools() -> None:
    rules, _ = new()
    out = step(rules)
    assert kinds(out) == ["persist", "stream"]  # its start is recorded: recovered mid-stream, it asks again
    assert out[1].request.messages == [ChatMessage.user("hi")]
    assert [t["name"] for t in out[1].request.tools] == ["safe", "gated"]


def test_deltas_are_applied_in_seq_order_and_stale_ones_dropped() -> None:
    rules, _ = new()
    step(rules)
    sid = rules.state.stream_id
    assert rules.handle(LLMDeltas(stream_id=sid, seq=1, text="B")) == []
    out = rules.handle(LLMDeltas(stream_id=sid, seq=0, text="A"))
    assert [d.event.text for d in out] == ["A", "B"]
    assert rules.handle(LLMDeltas(stream_id=sid, seq=1, text="B")) == []
    assert rules.handle(LLMDeltas(stream_id="other", seq=2, text="C")) == []


def test_a_mixed_response_runs_the_safe_call_and_asks_only_about_the_gated_one() -> None:
    rules, _ = new()
    step(rules)
    out = respond(rules, ("c1", "safe", False), ("c2", "gated", True))
    assert kinds(out) == ["persist", "spawn", "emit:tool_call_started", "settimer", "emit:tool_approval_request"]
    request = out[4].event
    assert (request.call_id, request.name, request.arguments, request.description) == (
        "c2",
        "gated",
        {},
        "Needs a human.",
    )
    out = rules.handle(result("c1"))
    assert kinds(out) == ["emit:tool_finished", "persist", "emit:finish:awaiting_approval", "persist"]
    assert out[2].event.pending_approvals == ["c2"]
    assert rules.state.phase == "awaiting_approval"


def test_approval_commits_after_the_window_and_runs_the_call() -> None:
    rules, _ = new(approval_window=0.05)
    step(rules)
    respond(rules, ("c1", "gated", True))
    out = rules.handle(ToolApprovalResponse(call_id="c1", approved=True, request_id="r1"))
    assert kinds(out) == ["persist", "settimer", "reply"]
    assert out[1] == SetTimer("commit", 0.05, 0)
    assert out[2].reply.ok
    out = rules.handle(TimerFired("commit", 0))
    assert kinds(out) == ["persist", "spawn", "emit:tool_call_started", "settimer"]
    out = rules.handle(result("c1"))
    assert kinds(out) == ["emit:tool_finished", "persist", "persist", "schedulestep"]
    assert tool_messages(rules) == [("c1", '{"ok": true, "data": 1}')]
    assert rules.state.round == 1


@pytest.mark.parametrize("reason, content", [("not now", "Rejected: not now"), (None, "Rejected: User denied")])
def test_a_denied_call_gets_the_seed_rejection_message(reason: str | None, content: str) -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "gated", True))
    rules.handle(ToolApprovalResponse(call_id="c1", approved=False, reason=reason))
    out = rules.handle(TimerFired("commit", 0))
    assert kinds(out) == ["persist", "emit:tool_finished", "persist", "schedulestep"]
    assert out[1].event.outcome == "denied"
    assert tool_messages(rules) == [("c1", content)]


def test_two_gated_calls_resume_only_after_the_second_answer() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "gated", True), ("c2", "gated", True))
    assert kinds(rules.handle(ToolApprovalResponse(call_id="c1", approved=True))) == ["persist"]
    assert kinds(rules.handle(ToolApprovalResponse(call_id="c2", approved=False))) == ["persist", "settimer"]


@pytest.mark.parametrize(
    "response, code, message",
    [
        (
            ToolApprovalResponse(call_id="zz", approved=True, request_id="q"),
            "unknown_call",
            "no approval was requested for call 'zz' in turn t",
        ),
        (
            ToolApprovalResponse(call_id="c0", approved=True, request_id="q"),
            "not_waiting",
            "call 'c0' is not waiting for approval",
        ),
    ],
)
def test_a_response_for_a_call_that_is_not_waiting_is_refused_and_changes_nothing(
    response: Any, code: str, message: str
) -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c0", "safe", False), ("c1", "gated", True))
    before = rules.state.model_copy(deep=True)
    out = rules.handle(response)
    assert kinds(out) == ["reply"]
    assert (out[0].reply.ok, out[0].reply.code, out[0].reply.message) == (False, code, message)
    assert rules.state == before


def test_a_second_response_for_the_same_call_is_a_duplicate() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "gated", True), ("c2", "gated", True))
    rules.handle(ToolApprovalResponse(call_id="c1", approved=True))
    before = rules.state.model_copy(deep=True)
    out = rules.handle(ToolApprovalResponse(call_id="c1", approved=False))
    assert (out[0].reply.code, out[0].reply.message) == ("duplicate", "call 'c1' was already approved")
    assert rules.state == before


def test_a_response_after_the_turn_finished_is_refused() -> None:
    rules, _ = new()
    step(rules)
    respond(rules)
    out = rules.handle(ToolApprovalResponse(call_id="c1", approved=True))
    assert (out[0].reply.code, out[0].reply.message) == (
        "turn_finished",
        "turn t has finished (stop); nothing can be approved",
    )


def test_deny_rest_denies_what_is_undecided_and_goes_on() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "gated", True), ("c2", "gated", True))
    out = rules.handle(
        RespondToApprovals(turn_id="t", responses=[ToolApprovalResponse(call_id="c1", approved=True)], deny_rest=True)
    )
    assert kinds(out) == ["persist", "settimer"]
    rules.handle(TimerFired("commit", 0))
    rules.handle(result("c1"))
    assert tool_messages(rules) == [("c1", '{"ok": true, "data": 1}'), ("c2", "Rejected: User denied")]


def test_cancel_queued_before_the_commit_wins_and_the_approved_call_never_runs() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "gated", True))
    rules.handle(ToolApprovalResponse(call_id="c1", approved=True))
    out = rules.handle(CancelTurn(turn_id="t", reason="supervisor"))
    assert kinds(out) == ["persist", "schedulestep"]
    out = step(rules)
    assert kinds(out) == ["emit:tool_finished", "emit:error", "emit:finish:cancelled", "persist", "done"]
    assert out[1].event.message == "Agent run cancelled"
    assert rules.handle(TimerFired("commit", 0)) == []
    assert tool_messages(rules) == [("c1", interrupted_content("the turn was cancelled", "supervisor"))]
    assert not any(isinstance(d, Spawn) for d in out)


def test_max_rounds_is_checked_after_approved_tools_ran() -> None:
    rules, _ = new(max_rounds=1)
    step(rules)
    respond(rules, ("c1", "gated", True))
    rules.handle(ToolApprovalResponse(call_id="c1", approved=True))
    rules.handle(TimerFired("commit", 0))
    rules.handle(result("c1"))
    assert kinds(step(rules)) == ["emit:finish:max_rounds", "persist", "done"]


def test_the_approval_timeout_denies_undecided_calls() -> None:
    rules, _ = new(approval_timeout=5.0)
    step(rules)
    out = respond(rules, ("c1", "gated", True))
    assert SetTimer("approval_timeout", 5.0, 0) in out
    rules.handle(TimerFired("approval_timeout", 0))
    assert tool_messages(rules) == [("c1", "Rejected: Approval timed out")]


def test_stop_while_streaming_aborts_keeps_partial_text_and_ends_stopped() -> None:
    rules, _ = new()
    step(rules)
    sid = rules.state.stream_id
    rules.handle(LLMDeltas(stream_id=sid, seq=0, text="Partial"))
    out = rules.handle(StopTurn(turn_id="t", reason="user", request_id="r"))
    assert kinds(out) == ["persist", "abort", "emit:error", "emit:finish:stopped", "persist", "done", "reply"]
    assert out[1] == Abort(sid, "user")
    assert (out[2].event.message, out[2].event.detail) == ("Agent run stopped", "user")
    assert rules.state.messages[-1] == ChatMessage.assistant("Partial")
    assert rules.handle(LLMDeltas(stream_id=sid, seq=1, text="late")) == []


def test_stop_while_tools_run_interrupts_them_and_ends_the_turn_once_each_has_reported() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "safe", False), ("c2", "gated", True))
    out = rules.handle(StopTurn(turn_id="t", reason="user"))
    assert kinds(out) == ["persist", "interrupt", "settimer"]  # no ToolFinished, no Finish yet
    assert (out[1].message.call_id, out[1].message.mode, out[1].message.reason) == ("c1", "stop", "user")
    assert out[2] == SetTimer("stop_backstop:c1:1", 2.0 + STOP_CONFIRM_MARGIN, 0)
    assert rules.state.phase == "tools" and rules.state.call("c1").status == "stopping"  # type: ignore[union-attr]
    stopped = interrupted_content("the call was stopped", "user")  # what the tool process reports
    out = rules.handle(ToolResult(turn_id="t", call_id="c1", outcome="interrupted", content=stopped))
    assert kinds(out) == [
        "emit:tool_finished",
        "persist",
        "emit:tool_finished",
        "emit:error",
        "emit:finish:stopped",
        "persist",
        "done",
    ]
    assert [(e.event.call_id, e.event.outcome) for e in out if isinstance(e, Emit) and e.event.kind == "tool_finished"] == [
        ("c1", "interrupted"),
        ("c2", "interrupted"),
    ]
    assert tool_messages(rules) == [("c1", stopped), ("c2", interrupted_content("the turn was stopped", "user"))]
    assert rules.handle(result("c1")) == []


def test_stop_and_cancel_are_idempotent_and_the_first_reason_wins() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "safe", False))
    out = rules.handle(CancelTurn(turn_id="t", reason="first"))
    assert kinds(out) == ["persist", "interrupt"]
    assert kinds(rules.handle(CancelTurn(turn_id="t", reason="second"))) == []
    out = rules.handle(StopTurn(turn_id="t", reason="third"))
    assert kinds(out) == ["persist", "interrupt", "settimer"]
    assert out[1].message.reason == "first"
    assert kinds(rules.handle(StopTurn(turn_id="t", reason="fourth", request_id="x"))) == ["reply"]
    assert kinds(rules.handle(CancelTurn(turn_id="t", reason="fifth"))) == []
    out = rules.handle(result("c1"))
    assert "emit:finish:cancelled" in kinds(out)
    assert rules.state.cancel.reason == "first"
    assert kinds(rules.handle(StopTurn(turn_id="t", reason="sixth", request_id="y"))) == ["reply"]


def test_cancel_lets_the_running_response_complete_then_ends() -> None:
    rules, _ = new()
    step(rules)
    assert kinds(rules.handle(CancelTurn(turn_id="t", reason="r"))) == ["persist"]
    out = respond(rules, ("c1", "safe", False))
    assert kinds(out) == ["persist", "schedulestep"]
    out = step(rules)
    assert kinds(out) == ["emit:tool_finished", "emit:error", "emit:finish:cancelled", "persist", "done"]


def test_cancel_waits_for_running_tools_and_a_grace_turns_it_into_a_stop() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "safe", False))
    out = rules.handle(CancelTurn(turn_id="t", reason="r", grace=2.0))
    assert SetTimer("cancel_grace", 2.0, 0) in out
    assert step(rules) == []  # the call is still running
    out = rules.handle(TimerFired("cancel_grace", 0))
    assert kinds(out) == ["persist", "interrupt", "settimer"]
    assert (out[1].message.mode, out[1].message.reason, out[1].message.cause) == ("stop", "r", "user")
    assert rules.state.stop.cause == "grace_expired"  # type: ignore[union-attr]
    cancelled = interrupted_content("the call was cancelled", "r")
    out = rules.handle(ToolResult(turn_id="t", call_id="c1", outcome="interrupted", content=cancelled))
    assert kinds(out) == ["emit:tool_finished", "persist", "emit:error", "emit:finish:cancelled", "persist", "done"]
    assert tool_messages(rules) == [("c1", cancelled)]


def test_stop_tool_ends_one_call_and_the_turn_goes_on() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "safe", False), ("c2", "safe", False))
    out = rules.handle(StopTool(turn_id="t", call_id="c1", reason="too slow", request_id="q"))
    assert kinds(out) == ["interrupt", "settimer", "persist", "reply"]  # its ToolFinished comes with its end
    assert kinds(rules.handle(StopTool(turn_id="t", call_id="c1", reason="again", request_id="q2"))) == ["reply"]
    assert kinds(rules.handle(result("c2"))) == ["emit:tool_finished", "persist"]  # c1 has not ended: the batch waits
    stopped = interrupted_content("the call was stopped", "too slow")
    out = rules.handle(ToolResult(turn_id="t", call_id="c1", outcome="interrupted", content=stopped))
    assert kinds(out) == ["emit:tool_finished", "persist", "persist", "schedulestep"]
    assert tool_messages(rules) == [("c1", stopped), ("c2", '{"ok": true, "data": 1}')]
    assert rules.state.phase == "idle"


def _code(out: list[Any]) -> tuple[bool, str | None]:
    replies = [d.reply for d in out if isinstance(d, Reply)]
    assert len(replies) == 1, out
    return replies[0].ok, replies[0].code


def test_stop_tool_of_a_call_that_finished_is_not_waiting_in_its_batch_and_after_it() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "safe", False), ("c2", "safe", False))
    rules.handle(result("c1"))
    assert _code(rules.handle(StopTool(turn_id="t", call_id="c1", request_id="q1"))) == (False, "not_waiting")
    rules.handle(result("c2"))  # the batch is over: the next round's stream starts
    step(rules)
    assert _code(rules.handle(StopTool(turn_id="t", call_id="c1", request_id="q2"))) == (False, "not_waiting")
    assert _code(rules.handle(StopTool(turn_id="t", call_id="c9", request_id="q3"))) == (False, "unknown_call")


def test_a_lost_tool_actor_fails_its_call() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "safe", False))
    rules.handle(ToolLost("c1", "Tool 'safe' failed: its process exited before the call finished"))
    assert tool_messages(rules) == [
        (
            "c1",
            json.dumps(
                {"ok": False, "error": "Tool 'safe' failed: its process exited before the call finished", "data": None}
            ),
        )
    ]


def test_a_failed_stream_keeps_partial_text_and_ends_with_error() -> None:
    rules, _ = new()
    step(rules)
    sid = rules.state.stream_id
    rules.handle(LLMDeltas(stream_id=sid, seq=0, text="Half"))
    out = rules.handle(LLMFailed(stream_id=sid, seq=1, error_type="stream_broken", message="cut"))
    assert kinds(out) == ["emit:error", "emit:finish:error", "persist", "done"]
    assert rules.state.messages == [ChatMessage.user("hi"), ChatMessage.assistant("Half")]


def test_an_invalid_history_at_start_ends_the_turn_with_an_error() -> None:
    bad = [ChatMessage.user("hi"), ChatMessage.assistant(None, [ToolCall(id="c", name="safe")])]
    rules = TurnRules.from_start(StartTurn(turn_id="t", messages=bad, provider=PROVIDER))
    out = rules.start()
    assert kinds(out) == ["emit:turn_started", "emit:error", "emit:finish:error", "persist", "done"]
    assert out[1].event.message == "end of history: tool call(s) 'c' have no tool message"


def test_a_turn_given_a_conversation_says_how_long_its_opening_is() -> None:
    talk = [ChatMessage.user("hi"), ChatMessage.assistant("Hello."), ChatMessage.user("again")]
    first = TurnRules.from_start(StartTurn(turn_id="t", messages=talk, provider=PROVIDER)).start()[0]
    assert first.event.kind == "turn_started" and first.event.opening == 3
    _, fresh = new()
    assert fresh[0].event.opening is None  # every message before the first assistant one: all of them


def test_every_finish_leaves_a_valid_history() -> None:
    from actors.turn.history import history_problems

    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "safe", False), ("c2", "gated", True), ("c3", "nope", False))
    rules.handle(StopTurn(turn_id="t"))
    rules.handle(result("c1"))
    assert rules.state.phase == "finished"
    assert history_problems(rules.state.messages) == []


def test_a_stop_marker_survives_a_restart_and_the_recovered_turn_ends_stopped() -> None:
    from messages import Marker, decode_snapshot, encode_snapshot

    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "safe", False))
    rules.state.stop = Marker(kind="stop", reason="user", at=1.0)  # written; the end was not
    recovered = TurnRules(decode_snapshot(encode_snapshot(rules.state)))  # the process died here
    out = recovered.recover()
    assert kinds(out) == ["emit:tool_finished", "emit:error", "emit:finish:stopped", "persist", "done"]
    assert tool_messages(recovered) == [("c1", interrupted_content("the turn was stopped", "user"))]


def test_recovery_reruns_only_retry_safe_calls_and_keeps_recorded_results() -> None:
    safe_retry = ToolSpec(name="again", ref="x:again", retry_safe=True)
    rules, _ = new(tools=[SAFE, safe_retry])
    step(rules)
    respond(rules, ("c1", "safe", False), ("c2", "again", False), ("c3", "safe", False))
    rules.handle(result("c3", '"done before the crash"'))
    out = TurnRules(rules.state.model_copy(deep=True)).recover()
    spawned = [d.run for d in out if isinstance(d, Spawn)]
    assert [(r.call.id, r.attempt, r.idempotency_key) for r in spawned] == [("c2", 2, "t:0:c2")]  # its first key
    finished = [d.event for d in out if isinstance(d, Emit) and d.event.kind == "tool_finished"]
    assert [(e.call_id, e.outcome) for e in finished] == [("c1", "interrupted")]


# -- stale results and keys (issue 30) ------------------------------------------------------------


def test_a_result_or_progress_of_an_earlier_run_of_a_call_is_dropped_and_never_recorded() -> None:
    safe_retry = ToolSpec(name="again", ref="x:again", retry_safe=True)
    rules, _ = new(tools=[SAFE, safe_retry])
    step(rules)
    respond(rules, ("c1", "again", False))
    recovered = TurnRules(rules.state.model_copy(deep=True))  # the host died; the call runs again
    recovered.recover()
    assert recovered.state.call("c1").attempt == 2  # type: ignore[union-attr]
    late = result("c1", '{"ok": true, "data": "from the first run"}').model_copy(update={"attempt": 1})
    progress = ReportProgress(turn_id="t", call_id="c1", seq=0, data={"page": 1}, attempt=1)
    assert (recovered.handle(late), recovered.handle(progress)) == ([], [])
    assert recovered.state.call("c1").status == "running"  # type: ignore[union-attr]
    now = result("c1", '{"ok": true, "data": "from this run"}').model_copy(update={"attempt": 2})
    assert "emit:tool_finished" in kinds(recovered.handle(now))


def test_an_idempotency_key_is_unique_per_call_across_rounds_and_the_same_on_every_attempt() -> None:
    rules, _ = new()
    step(rules)
    first = [d.run for d in respond(rules, ("call_1", "safe", False)) if isinstance(d, Spawn)]
    rules.handle(result("call_1"))
    step(rules)
    second = [d.run for d in respond(rules, ("call_1", "safe", False)) if isinstance(d, Spawn)]  # the same id again
    assert [r.idempotency_key for r in first + second] == ["t:0:call_1", "t:1:call_1"]
