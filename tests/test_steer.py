"""Steering a running turn end to end (issue 35): new input, pause and resume, edited
arguments at approval; from the handle, a supervisor actor, ``Runtime.control`` and the
command line; durable with a store (both backends where it matters). Real parts: the
scripted provider on 127.0.0.1, tool processes, a multiprocTCPBase system."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors import ControlRejected, InputAccepted, Runtime, TextDelta, ToolProgress
from actors.lifecycle.processes import session_processes
from actors.store import open_store
from actors.store.base import is_url
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.tools.definition import tool_specs
from actors.turn.history import history_problems
from messages import ChatMessage, Finish, RetryPolicy, SendInput, StartTurn

from . import steer_tools as S
from .actors_for_tests import Begin, Report, Seen, Supervisor
from .helpers import assert_seq, ok, summary
from .stores import recovered
from .test_durable import greenroom

pytestmark = pytest.mark.integration

RETRY = RetryPolicy(max_attempts=1)


@pytest.fixture(params=["openai", "anthropic"])
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def steered(provider: ScriptedProvider, api: str) -> Iterator[Runtime]:
    """A Runtime on the scripted provider in the ``api``'s format."""
    rt = Runtime(provider.provider(api, retry=RETRY), hosts=1, tool_processes=1).start()
    try:
        yield rt
    finally:
        rt.close()
        assert rt.admin_sid is not None and session_processes(rt.admin_sid) == []


def roles_and_text(request_messages: list[dict[str, Any]], api: str) -> list[tuple[str, str]]:
    """(role, text) of each message a request carried, in the provider's own format."""
    out = []
    for m in request_messages:
        content = m.get("content")
        if isinstance(content, list):  # Anthropic's blocks
            content = "".join(b.get("text", "") if b.get("type") == "text" else f"[{b['type']}]" for b in content)
        out.append((m["role"], content or ""))
    return out


# -- new input -------------------------------------------------------------------------------


def test_input_sent_now_closes_the_stream_and_the_model_is_asked_again_with_what_it_had_said_and_the_input(
    steered: Runtime, provider: ScriptedProvider, api: str
) -> None:
    provider.add(say("Paris is sunny and warm today", hold_after=2, hold=threading.Event()), say("Oslo is cold."))
    turn = steered.run("Weather in Paris?")
    turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
    reply = turn.send_input("And Oslo?", when="now")
    assert (reply.ok, reply.message) == (True, "accepted: it enters before the next model call")
    result = turn.result(30)
    assert provider.requests[0].disconnected.wait(30), "the provider did not see its stream closed"
    events = turn.all_events
    entered = next(e for e in events if isinstance(e, InputAccepted))
    said = "".join(e.text for e in events if isinstance(e, TextDelta) and e.seq < entered.seq)
    assert 0 < len(said) < len("Paris is sunny and warm today")
    assert (entered.request_id, entered.history_index, entered.messages) == (
        reply.request_id, 2, [ChatMessage.user("And Oslo?")],
    )  # fmt: skip
    assert result.finish_reason == "stop" and result.messages == [
        ChatMessage.user("Weather in Paris?"), ChatMessage.assistant(said), ChatMessage.user("And Oslo?"),
        ChatMessage.assistant("Oslo is cold."),
    ]  # fmt: skip
    assert roles_and_text(provider.requests[1].messages, api) == [
        ("user", "Weather in Paris?"), ("assistant", said), ("user", "And Oslo?"),
    ]  # fmt: skip
    assert_seq(events)


def test_input_for_the_next_call_enters_after_the_running_call_has_its_result(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    release = tmp_path / "go"
    provider.add(use_tools(call("wait_for_path", {"path": str(release)})), say("Checked both."))
    turn = runtime.run("check the disk", tools=[S.wait_for_path])
    turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30)
    turn.send_input("and the logs, please")
    release.write_text("")
    result = turn.result(30)
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert result.messages[2] == ChatMessage.tool(ok("found"), "call_1", name="wait_for_path")
    assert result.messages[3] == ChatMessage.user("and the logs, please")
    assert [m["role"] for m in provider.requests[1].messages] == ["user", "assistant", "tool", "user"]
    assert summary(turn.all_events)[-5:] == [
        ("tool_progress", "call_1"), ("tool_finished", "call_1", "success"), ("input_accepted",),
        ("text", "Checked both."), ("finish", "stop"),
    ]  # fmt: skip


def test_input_for_a_finished_or_an_unknown_turn_is_refused_and_changes_nothing(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("Done."))
    turn = runtime.run("hi")
    assert turn.result(30).finish_reason == "stop"
    with pytest.raises(ControlRejected) as refused:
        turn.send_input("one more thing")
    assert (refused.value.code, str(refused.value)) == (
        "turn_finished", f"turn {turn.turn_id} has finished (stop); it takes no input",
    )  # fmt: skip
    unknown = runtime.control(SendInput(turn_id="turn_nowhere", messages=[ChatMessage.user("x")]), timeout=2)
    assert (unknown.ok, unknown.code) == (False, "unknown_turn")
    assert len(provider.requests) == 1 and len(turn.all_events) == 3


def test_a_supervisor_actor_sends_input_that_denies_the_pending_call(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(use_tools(call("transfer", {"to": "alice", "amount": 20})), say("OK, nothing was sent."))
    start = StartTurn(messages=[ChatMessage.user("pay alice")], tools=tool_specs([S.transfer]), provider=runtime.provider)
    sent = SendInput(
        turn_id=start.turn_id, messages=[ChatMessage.user("wait, do not pay")], deny_pending=True, request_id="sup-1"
    )
    asys = runtime.actor_system
    sup = asys.createActor(Supervisor)
    asys.tell(sup, Begin(start, [sent], replies=1))
    seen = asys.ask(sup, Report(), 60)
    assert isinstance(seen, Seen), seen
    assert [(r.command, r.ok, r.request_id) for r in seen.replies] == [("send_input", True, "sup-1")]
    assert summary(seen.events)[-6:] == [
        ("tool_approval_request", "call_1"), ("finish", "awaiting_approval"), ("tool_finished", "call_1", "denied"),
        ("input_accepted",), ("text", "OK, nothing was sent."), ("finish", "stop"),
    ]  # fmt: skip
    assert [m["content"] for m in provider.requests[1].messages[2:]] == [
        "Rejected: the user sent new input", "wait, do not pay",
    ]  # fmt: skip


# -- pause and resume ------------------------------------------------------------------------


def test_a_paused_turn_stays_paused_in_its_store_across_a_restart_and_goes_on_when_resumed(
    provider: ScriptedProvider, store_location: str
) -> None:
    provider.add(say("Step one of the plan", hold_after=1, hold=threading.Event()), say("Done, as asked."))
    with Runtime(provider.provider(retry=RETRY), store=store_location) as rt:
        turn = rt.run("plan it", turn_id="turn_paused")
        turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
        turn.pause(when="now")
        paused = turn.result(30)
        assert paused.finish_reason == "paused" and not turn.finished
    assert provider.requests[0].disconnected.wait(30)
    store = open_store(store_location)
    try:
        assert [(s.turn_id, s.status) for s in store.log.summaries()] == [("turn_paused", "paused")]
    finally:
        store.close()
    listed = greenroom("turns", "list", "--store", store_location, "--json")
    assert [(t["turn_id"], t["status"]) for t in json.loads(listed.stdout)] == [("turn_paused", "paused")]
    with Runtime(provider.provider(retry=RETRY), store=store_location) as rt:
        assert recovered(store_location, rt, ["turn_paused"])
        again = rt.attach("turn_paused")
        assert again.result(30).finish_reason == "paused"  # still paused: its Finish is not repeated
        again.resume("go on with step two")
        result = again.result(30, final=True)
    assert result.finish_reason == "stop"
    assert [m.role for m in result.messages] == ["user", "assistant", "user", "assistant"]
    assert result.messages[2:] == [ChatMessage.user("go on with step two"), ChatMessage.assistant("Done, as asked.")]
    assert len(provider.requests) == 2 and history_problems(result.messages) == []
    assert [e.kind for e in again.all_events].count("finish") == 2


def test_resume_of_a_turn_that_is_not_paused_and_input_that_is_not_user_text_are_refused(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(say("Working on it", hold_after=1, hold=(hold := threading.Event())))
    turn = runtime.run("work")
    turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
    with pytest.raises(ControlRejected, match=f"turn {turn.turn_id} is not paused"):
        turn.resume()
    with pytest.raises(ControlRejected, match="new input is user messages: message 0 is a system message"):
        turn.send_input([ChatMessage.system("obey")])
    hold.set()
    assert turn.result(30).finish_reason == "stop"


def test_a_stop_reaches_a_paused_turn(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(say("Thinking it over", hold_after=1, hold=threading.Event()))
    turn = runtime.run("think")
    turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
    turn.pause(when="now")
    assert turn.result(30).finish_reason == "paused"
    turn.stop("not needed any more")
    result = turn.result(30)
    assert result.finish_reason == "stopped" and turn.finished
    assert summary(turn.all_events)[-3:] == [
        ("finish", "paused"), ("error", "stopped", "Agent run stopped"), ("finish", "stopped"),
    ]  # fmt: skip


def test_the_command_line_pauses_sends_input_to_and_resumes_a_running_turn(
    provider: ScriptedProvider, store_location: str
) -> None:
    provider.add(say("First part", hold_after=1, hold=threading.Event()), say("Second part."))
    with Runtime(provider.provider(retry=RETRY), store=store_location) as rt:
        turn = rt.run("go", turn_id="turn_cli_steer")
        turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
        paused = greenroom("pause", "turn_cli_steer", "--now", "--store", store_location)
        assert paused.returncode == 0, paused.stderr
        assert turn.result(30).finish_reason == "paused"
        sent = greenroom("send-input", "turn_cli_steer", "keep it short", "--store", store_location)
        assert sent.returncode == 0, sent.stderr
        bad = greenroom("approve", "turn_cli_steer", "call_1", "--arguments", "[1]", "--store", store_location)
        assert (bad.returncode, bad.stderr.strip()) == (
            2, "greenroom: --arguments must be a JSON object (the call's arguments), not list",
        )  # fmt: skip
        resumed = greenroom("resume", "turn_cli_steer", "--store", store_location)
        assert resumed.returncode == 0, resumed.stderr
        if not is_url(store_location):
            assert resumed.stdout.startswith("resumed: done by the running runtime (pid ")
        result = turn.result(30, final=True)
        again = greenroom("resume", "turn_cli_steer", "--store", store_location)
    assert result.finish_reason == "stop" and result.messages[-2:] == [
        ChatMessage.user("keep it short"), ChatMessage.assistant("Second part."),
    ]  # fmt: skip
    assert (again.returncode, again.stderr.strip()) == (2, "greenroom: turn turn_cli_steer has already finished (stop)")


# -- edited arguments ------------------------------------------------------------------------


def test_an_approver_edits_the_arguments_the_call_runs_with_them_and_the_model_reads_what_ran(
    steered: Runtime, provider: ScriptedProvider, api: str
) -> None:
    provider.add(use_tools(call("transfer", {"to": "alice", "amount": 200})), say("Sent 20 to alice."))
    turn = steered.run("pay alice", tools=[S.transfer])
    assert [r.call_id for r in turn.result(30).pending_approvals] == ["call_1"]
    with pytest.raises(ControlRejected) as refused:
        turn.approve("call_1", arguments={"to": "alice", "amount": "twenty"})
    assert refused.value.code == "invalid"
    assert str(refused.value) == (
        "the edited arguments of call 'call_1' do not fit tool 'transfer': Invalid arguments for tool 'transfer': "
        "amount: Input should be a valid integer, unable to parse string as an integer"
    )
    assert [r.call_id for r in turn.result(30).pending_approvals] == ["call_1"]  # still undecided
    turn.approve("call_1", arguments={"to": "alice", "amount": 20})
    result = turn.result(30)
    started = next(e for e in turn.all_events if e.kind == "tool_call_started")
    assert started.arguments == {"to": "alice", "amount": 20}  # type: ignore[attr-defined]
    tool_message = json.loads(result.messages[2].content or "")
    assert tool_message == {"ok": True, "data": {"to": "alice", "amount": 20}, "edited_arguments": {"to": "alice", "amount": 20}}
    assert json.loads(result.messages[1].tool_calls[0].arguments) == {"to": "alice", "amount": 200}  # as the model asked
    sent = provider.requests[1].body["messages"]
    if api == "anthropic":  # the tool_use block keeps the model's input; the tool_result says what ran
        assert sent[1]["content"][0]["input"] == {"to": "alice", "amount": 200}
        assert json.loads(sent[2]["content"][0]["content"])["edited_arguments"] == {"to": "alice", "amount": 20}
    else:
        assert json.loads(sent[2]["content"])["edited_arguments"] == {"to": "alice", "amount": 20}
    assert result.finish_reason == "stop"


def test_finish_paused_is_not_terminal_and_result_final_waits_past_it(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(say("Hold on", hold_after=1, hold=threading.Event()), say("There."))
    turn = runtime.run("x")
    turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
    turn.pause(when="now")
    finish = turn.wait_for(lambda e: isinstance(e, Finish), timeout=30)
    assert (finish.finish_reason, finish.terminal) == ("paused", False)  # type: ignore[attr-defined]
    turn.resume()
    assert turn.result(30, final=True).finish_reason == "stop"


def test_edited_arguments_from_the_command_line_while_no_runtime_runs_are_checked_then_run_by_the_next(
    provider: ScriptedProvider, store_location: str
) -> None:
    provider.add(use_tools(call("transfer", {"to": "bob", "amount": 200})), say("Sent Bob 20."))
    with Runtime(provider.provider(retry=RETRY), store=store_location) as rt:
        turn = rt.run("pay bob", tools=[S.transfer], turn_id="turn_edit")
        assert turn.result(30).finish_reason == "awaiting_approval"
    bad = greenroom("approve", "turn_edit", "call_1", "--arguments", '{"to": "bob"}', "--store", store_location)
    assert (bad.returncode, bad.stderr.strip()) == (
        2,
        "greenroom: the edited arguments of call 'call_1' do not fit tool 'transfer': "
        "Invalid arguments for tool 'transfer': amount: Field required",
    )
    fixed = greenroom("approve", "turn_edit", "call_1", "--arguments", '{"to": "bob", "amount": 20}', "--store", store_location)
    assert fixed.returncode == 0, fixed.stderr
    with Runtime(provider.provider(retry=RETRY), store=store_location) as rt:
        assert recovered(store_location, rt, ["turn_edit"])
        result = rt.attach("turn_edit").result(30, final=True)
    assert result.finish_reason == "stop"
    assert json.loads(result.messages[2].content or "") == {
        "ok": True, "data": {"to": "bob", "amount": 20}, "edited_arguments": {"to": "bob", "amount": 20},
    }  # fmt: skip


def test_the_async_handle_sends_input_pauses_resumes_and_approves_with_edited_arguments(
    provider: ScriptedProvider,
) -> None:
    from .test_async import arun

    provider.add(
        say("Counting to a hundred slowly", hold_after=2, hold=threading.Event()),
        use_tools(call("transfer", {"to": "ann", "amount": 9})),
        say("Paid ann 5."),
    )

    async def body(rt: Any) -> Any:
        turn = await rt.run("count", tools=[S.transfer])
        await turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
        await turn.pause(when="now")
        assert (await turn.result(30)).finish_reason == "paused"
        reply = await turn.send_input("then pay ann")
        await turn.resume()
        waiting = await turn.result(30)
        await turn.approve(waiting.pending_approvals[0].call_id, arguments={"to": "ann", "amount": 5})
        return reply, await turn.result(30, final=True)

    reply, result = arun(provider, body)
    assert reply.message == "accepted: it enters once the turn is resumed"
    assert result.finish_reason == "stop" and result.text == "Paid ann 5."
    assert result.messages[2] == ChatMessage.user("then pay ann")
    assert json.loads(result.messages[4].content or "")["edited_arguments"] == {"to": "ann", "amount": 5}
