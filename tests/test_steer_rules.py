"""Steering a turn, at the rules (no actor system): new input, pause and resume, edited
arguments at approval. Exact decisions; every history checked the way providers check it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from actors.turn.decisions import Abort, Emit, Interrupt, Persist, Reply, Spawn, Stream
from actors.turn.history import history_problems
from actors.turn.results import interrupted_content
from actors.turn.rules import TurnRules
from actors.turn.steering import NEW_INPUT
from messages import (
    CancelTurn, ChatMessage, Finish, InputAccepted, LLMDeltas, PauseTurn, ResumeTurn, SendInput, StartTurn, StopTurn,
    ToolApprovalResponse, ToolResult, ToolSpec, TurnOptions, decode_snapshot, encode_snapshot,
)  # fmt: skip

from .test_turn_rules import GATED, PROVIDER, SAFE, Clock, kinds, respond, result, step, tool_messages


def new(check: Any = None, **options: Any) -> TurnRules:
    start = StartTurn(
        turn_id="t", messages=[ChatMessage.user("hi")], tools=[SAFE, GATED], provider=PROVIDER, options=TurnOptions(**options)
    )
    extra = {"check_arguments": check} if check is not None else {}
    rules = TurnRules.from_start(start, clock=Clock(), **extra)
    rules.start()
    return rules


def send(rules: TurnRules, text: str = "also Oslo", **fields: Any) -> list[Any]:
    return rules.handle(SendInput(turn_id="t", messages=[ChatMessage.user(text)], request_id="in1", **fields))


def reply_of(out: list[Any]) -> tuple[bool, str | None, str]:
    replies = [d.reply for d in out if isinstance(d, Reply)]
    assert len(replies) == 1, out
    return replies[0].ok, replies[0].code, replies[0].message


def streamed(out: list[Any]) -> list[ChatMessage]:
    """The messages of the one model call in ``out``."""
    (request,) = [d.request for d in out if isinstance(d, Stream)]
    return request.messages


def valid(rules: TurnRules) -> None:
    assert history_problems(rules.state.messages) == []


def accepted(out: list[Any]) -> list[InputAccepted]:
    return [d.event for d in out if isinstance(d, Emit) and isinstance(d.event, InputAccepted)]


# -- new input --------------------------------------------------------------------------------


def test_input_for_the_next_call_waits_for_the_running_calls_then_enters_before_the_model_call() -> None:
    rules = new()
    step(rules)
    respond(rules, ("c1", "safe", False))
    out = send(rules)
    assert kinds(out) == ["persist", "reply"]
    assert reply_of(out) == (True, None, "accepted: it enters before the next model call")
    assert kinds(rules.handle(result("c1")))[-1] == "schedulestep"  # the batch ends: a step
    out = step(rules)
    assert kinds(out) == ["emit:input_accepted", "persist", "stream"]
    (event,) = accepted(out)
    assert (event.history_index, event.request_id, event.messages) == (3, "in1", [ChatMessage.user("also Oslo")])
    assert [m.role for m in streamed(out)] == ["user", "assistant", "tool", "user"]
    assert rules.state.inputs == []
    valid(rules)


def test_input_sent_while_the_model_answers_keeps_the_turn_going_instead_of_finishing() -> None:
    rules = new()
    step(rules)
    send(rules)
    out = respond(rules)  # an answer with no tool calls
    assert kinds(out) == ["persist", "schedulestep"]
    out = step(rules)
    assert kinds(out) == ["emit:input_accepted", "persist", "stream"]
    assert [m.role for m in streamed(out)] == ["user", "assistant", "user"]


def test_input_sent_now_aborts_the_stream_keeps_its_text_and_asks_the_model_again() -> None:
    rules = new()
    step(rules)
    sid = rules.state.stream_id
    rules.handle(LLMDeltas(stream_id=sid, seq=0, text="Paris is"))
    out = send(rules, when="now")
    assert kinds(out) == ["persist", "abort", "persist", "schedulestep", "reply"]
    assert out[1] == Abort(sid, NEW_INPUT)
    assert rules.state.messages[-1] == ChatMessage.assistant("Paris is")
    assert rules.handle(LLMDeltas(stream_id=sid, seq=1, text=" sunny")) == []  # the aborted stream's: dropped
    out = step(rules)
    assert kinds(out) == ["emit:input_accepted", "persist", "stream"]
    assert streamed(out)[-2:] == [ChatMessage.assistant("Paris is"), ChatMessage.user("also Oslo")]
    valid(rules)


def test_input_sent_now_before_any_text_leaves_no_empty_assistant_message() -> None:
    rules = new()
    step(rules)
    send(rules, when="now")
    out = step(rules)
    assert [m.role for m in streamed(out)] == ["user", "user"]


def test_input_sent_now_lets_running_calls_finish_unless_asked_to_stop_them() -> None:
    rules = new()
    step(rules)
    respond(rules, ("c1", "safe", False))
    assert not any(isinstance(d, Interrupt) for d in send(rules, when="now"))
    rules2 = new()
    step(rules2)
    respond(rules2, ("c1", "safe", False))
    out = send(rules2, when="now", stop_calls=True)
    assert [d.message.call_id for d in out if isinstance(d, Interrupt)] == ["c1"]
    assert rules2.state.batch is not None and rules2.state.batch[0].status == "stopping"
    stopped = interrupted_content("the call was stopped", NEW_INPUT)
    rules2.handle(ToolResult(turn_id="t", call_id="c1", outcome="interrupted", content=stopped, attempt=1))
    out = step(rules2)
    assert tool_messages(rules2) == [("c1", stopped)]
    assert streamed(out)[-1] == ChatMessage.user("also Oslo")
    valid(rules2)


def test_input_waits_for_pending_approvals_and_enters_once_they_are_decided() -> None:
    rules = new()
    step(rules)
    respond(rules, ("c1", "gated", True))
    assert rules.state.phase == "awaiting_approval"
    out = send(rules, when="now")
    assert reply_of(out) == (True, None, "accepted: it enters once the pending approvals are decided")
    assert rules.state.pending_approvals == ["c1"]
    rules.handle(ToolApprovalResponse(call_id="c1", approved=True))
    rules.handle(_commit())
    rules.handle(result("c1"))
    out = step(rules)
    assert kinds(out)[0] == "emit:input_accepted"
    valid(rules)


def test_deny_pending_denies_each_undecided_call_saying_why_and_resumes_the_turn() -> None:
    rules = new()
    step(rules)
    respond(rules, ("c1", "gated", True), ("c2", "gated", True))
    rules.handle(ToolApprovalResponse(call_id="c1", approved=True))
    out = send(rules, deny_pending=True)
    assert kinds(out) == ["persist", "settimer", "reply"]
    assert out[-1].reply.resumes_at == rules.state.next_seq
    rules.handle(_commit())
    rules.handle(result("c1"))
    assert tool_messages(rules) == [("c1", '{"ok": true, "data": 1}'), ("c2", f"Rejected: {NEW_INPUT}")]
    out = step(rules)
    assert streamed(out)[-1] == ChatMessage.user("also Oslo")
    valid(rules)


def _commit() -> Any:
    from actors.turn.decisions import TimerFired

    return TimerFired("commit", 0)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"messages": []}, "new input needs at least one message"),
        ({"messages": [ChatMessage.assistant("I said")]}, "new input is user messages: message 0 is a assistant message"),
        (
            {"messages": [ChatMessage.user("x")], "stop_calls": True},
            "stop_calls stops the running calls for input sent now: give when='now'",
        ),
    ],
)
def test_input_that_is_not_user_text_is_refused_and_changes_nothing(fields: dict[str, Any], message: str) -> None:
    rules = new()
    step(rules)
    before = rules.state.model_copy(deep=True)
    out = rules.handle(SendInput(turn_id="t", request_id="q", **fields))
    assert kinds(out) == ["reply"] and reply_of(out) == (False, "invalid", message)
    assert rules.state == before


def test_input_for_a_finished_turn_is_refused_turn_finished() -> None:
    rules = new()
    step(rules)
    respond(rules)
    out = send(rules)
    assert reply_of(out) == (False, "turn_finished", "turn t has finished (stop); it takes no input")


def test_input_for_a_turn_being_stopped_is_refused() -> None:
    rules = new()
    step(rules)
    respond(rules, ("c1", "safe", False))
    rules.handle(StopTurn(turn_id="t"))
    assert reply_of(send(rules)) == (False, "not_waiting", "turn t is being stopped")


def test_input_that_never_entered_is_dropped_by_the_end_of_the_turn() -> None:
    rules = new()
    step(rules)
    send(rules)
    out = rules.handle(StopTurn(turn_id="t"))
    assert "emit:input_accepted" not in kinds(out) and rules.state.inputs == []


# -- pause and resume ------------------------------------------------------------------------


def test_a_pause_holds_the_turn_at_its_next_model_call_with_finish_paused() -> None:
    rules = new()
    step(rules)
    out = rules.handle(PauseTurn(turn_id="t", request_id="p1"))
    assert kinds(out) == ["persist", "reply"]
    respond(rules, ("c1", "safe", False))
    out = rules.handle(result("c1"))
    assert kinds(out)[-1] == "schedulestep"
    out = step(rules)
    assert kinds(out) == ["emit:finish:paused", "persist"]
    finish = out[0].event
    assert not finish.terminal and rules.state.phase == "paused"
    assert step(rules) == []  # a paused turn does nothing until resumed
    out = rules.handle(ResumeTurn(turn_id="t", request_id="r1"))
    assert kinds(out) == ["persist", "schedulestep", "reply"]
    assert out[-1].reply.resumes_at == rules.state.next_seq
    assert kinds(step(rules)) == ["persist", "stream"]
    valid(rules)


def test_a_pause_now_aborts_the_stream_as_a_stop_does_but_keeps_the_turn() -> None:
    rules = new()
    step(rules)
    sid = rules.state.stream_id
    rules.handle(LLMDeltas(stream_id=sid, seq=0, text="Half"))
    out = rules.handle(PauseTurn(turn_id="t", when="now"))
    assert any(isinstance(d, Abort) for d in out)
    out = step(rules)
    assert kinds(out) == ["emit:finish:paused", "persist"]
    assert out[0].event.messages[-1] == ChatMessage.assistant("Half")


def test_input_and_a_stop_reach_a_paused_turn() -> None:
    rules = new()
    rules.handle(PauseTurn(turn_id="t"))
    step(rules)
    assert rules.state.phase == "paused"
    out = send(rules, when="now")
    assert reply_of(out) == (True, None, "accepted: it enters once the turn is resumed")
    assert kinds(out) == ["persist", "reply"]
    out = rules.handle(StopTurn(turn_id="t", request_id="s"))
    assert kinds(out)[-4:] == ["emit:finish:stopped", "persist", "done", "reply"]
    assert out[-1].reply.resumes_at is not None


def test_resume_with_input_enters_it_first() -> None:
    rules = new()
    rules.handle(PauseTurn(turn_id="t"))
    step(rules)
    rules.handle(ResumeTurn(turn_id="t", messages=[ChatMessage.user("now go")], request_id="r"))
    out = step(rules)
    assert kinds(out) == ["emit:input_accepted", "persist", "stream"]
    assert accepted(out)[0].request_id == "r"


def test_a_cancel_of_a_paused_turn_ends_it_at_its_next_step() -> None:
    rules = new()
    rules.handle(PauseTurn(turn_id="t"))
    step(rules)
    assert kinds(rules.handle(CancelTurn(turn_id="t"))) == ["persist", "schedulestep"]
    assert kinds(step(rules))[-3:] == ["emit:finish:cancelled", "persist", "done"]


def test_a_resume_of_a_turn_that_is_not_paused_is_refused_and_changes_nothing() -> None:
    rules = new()
    step(rules)
    before = rules.state.model_copy(deep=True)
    out = rules.handle(ResumeTurn(turn_id="t", request_id="r"))
    assert reply_of(out) == (False, "not_waiting", "turn t is not paused") and rules.state == before


def test_a_resume_before_the_pause_took_effect_withdraws_it() -> None:
    rules = new()
    step(rules)
    rules.handle(PauseTurn(turn_id="t"))
    out = rules.handle(ResumeTurn(turn_id="t", request_id="r"))
    assert reply_of(out) == (True, None, "the pause had not taken effect: withdrawn")
    assert kinds(respond(rules))[-2:] == ["persist", "done"]  # it answered and finished: no pause


def test_a_second_pause_has_no_effect_and_a_pause_of_a_finished_turn_is_refused() -> None:
    rules = new()
    rules.handle(PauseTurn(turn_id="t"))
    assert reply_of(rules.handle(PauseTurn(turn_id="t", request_id="p"))) == (True, None, "no effect")
    done = new()
    step(done)
    respond(done)
    assert reply_of(done.handle(PauseTurn(turn_id="t")))[:2] == (False, "turn_finished")


def test_a_paused_turn_stays_paused_when_recovered_from_its_snapshot() -> None:
    rules = new()
    rules.handle(PauseTurn(turn_id="t"))
    step(rules)
    send(rules)
    again = TurnRules(decode_snapshot(encode_snapshot(rules.state)), clock=Clock())
    assert again.recover("restart") == [Persist("recovered")]  # no event: its Finish(paused) is not repeated
    assert again.state.phase == "paused" and len(again.state.inputs) == 1


# -- edited arguments ------------------------------------------------------------------------


def _fits(spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
    return None if isinstance(arguments.get("to"), str) else "to: Field required"


def test_an_approval_with_edited_arguments_runs_the_call_with_them_and_its_tool_message_says_so() -> None:
    rules = new(check=_fits)
    step(rules)
    respond(rules, ("c1", "gated", True))
    out = rules.handle(ToolApprovalResponse(call_id="c1", approved=True, arguments={"to": "bob"}, request_id="a"))
    assert reply_of(out) == (True, None, "recorded")
    out = rules.handle(_commit())
    (spawn,) = [d for d in out if isinstance(d, Spawn)]
    assert spawn.run.arguments == {"to": "bob"}
    assert [d.event.arguments for d in out if isinstance(d, Emit)] == [{"to": "bob"}]
    rules.handle(result("c1"))
    assert json.loads(tool_messages(rules)[0][1]) == {"ok": True, "data": 1, "edited_arguments": {"to": "bob"}}
    assert rules.state.messages[1].tool_calls[0].arguments == "{}"  # the model's call stays as it made it
    valid(rules)


def test_edited_arguments_that_do_not_fit_are_refused_and_the_call_stays_undecided() -> None:
    rules = new(check=_fits)
    step(rules)
    respond(rules, ("c1", "gated", True))
    before = rules.state.model_copy(deep=True)
    out = rules.handle(ToolApprovalResponse(call_id="c1", approved=True, arguments={"to": 5}, request_id="a"))
    assert reply_of(out) == (False, "invalid", "the edited arguments of call 'c1' do not fit tool 'gated': to: Field required")
    assert rules.state == before and rules.state.pending_approvals == ["c1"]
    out = rules.handle(ToolApprovalResponse(call_id="c1", approved=False, arguments={"to": "x"}, request_id="b"))
    assert reply_of(out) == (False, "invalid", "call 'c1': arguments are edited to approve a call, not to deny it")


def test_an_edited_call_that_is_stopped_still_names_the_arguments_it_ran_with() -> None:
    rules = new(check=_fits)
    step(rules)
    respond(rules, ("c1", "gated", True))
    rules.handle(ToolApprovalResponse(call_id="c1", approved=True, arguments={"to": "bob"}))
    rules.handle(_commit())
    rules.handle(StopTurn(turn_id="t", reason="enough"))
    stopped = interrupted_content("the turn was stopped", "enough")
    out = rules.handle(ToolResult(turn_id="t", call_id="c1", outcome="interrupted", content=stopped, attempt=1))
    finish = next(d.event for d in out if isinstance(d, Emit) and isinstance(d.event, Finish))
    assert json.loads(finish.messages[-1].content)["edited_arguments"] == {"to": "bob"}
    valid(rules)


def test_a_request_id_answered_for_another_kind_of_command_does_not_replay_that_answer() -> None:
    """Request ids are unique per command; one reused for a command of another kind is not
    taken for a command sent again (its answer would say what the other did)."""
    rules = new()
    step(rules)
    assert reply_of(send(rules))[0]  # request id "in1"
    assert reply_of(send(rules)) == (True, None, "accepted: it enters before the next model call")
    assert len(rules.state.inputs) == 1  # sent again: applied once
    out = rules.handle(PauseTurn(turn_id="t", request_id="in1"))
    assert kinds(out) == ["persist", "reply"] and rules.state.hold is not None
