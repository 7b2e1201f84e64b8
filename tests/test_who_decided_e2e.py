"""Who decided, end to end, on both stores (``store_location``): the API's ``by``, the command
line's ``--as`` (and the OS user), ``not_allowed`` changing nothing, and who decided in the
events, the snapshot and ``turns show``. A real Runtime, real tool processes, the scripted
provider on 127.0.0.1, the command line in its own process."""

from __future__ import annotations

import asyncio
import getpass
import json

import pytest

from actors import AsyncRuntime, ControlRejected, Runtime
from actors.store import open_store
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import Error, RespondToApprovals, StopTurn, ToolApprovalRequest, ToolApprovalResponse, ToolCallStarted
from messages import ToolFinished

from . import approver_tools as A
from .stores import recovered
from .test_durable import config, greenroom

pytestmark = pytest.mark.integration

NOT_INTERN = "call 'call_1' of release may be decided only by ops, reviewer: 'intern' may not"


def stored_call(store: str, turn_id: str, call_id: str) -> tuple[str, str | None, str | None]:
    """``(status, decision, decided_by)`` of a call in the turn's snapshot, as another process reads it."""
    s = open_store(store, create=False)
    try:
        cs = s.log.load(turn_id).call(call_id)
        assert cs is not None
        return cs.status, cs.decision, cs.decided_by
    finally:
        s.close()


def test_the_api_names_who_decides_and_a_decision_by_anyone_else_changes_nothing(
    provider: ScriptedProvider, store_location: str
) -> None:
    store = store_location
    provider.add(use_tools(call("release", {"version": "1.2"}), call("note", {"text": "hi"})), say("Released."))
    with Runtime(config(provider), store=store) as rt:
        turn = rt.run("release it", tools=[A.release, A.note])
        assert turn.result(30).finish_reason == "awaiting_approval"
        requests = [e for e in turn.all_events if isinstance(e, ToolApprovalRequest)]
        assert [(e.call_id, e.approvers) for e in requests] == [("call_1", ["ops", "reviewer"]), ("call_2", None)]
        with pytest.raises(ControlRejected) as caught:
            turn.approve("call_1", by="intern")
        assert (caught.value.code, str(caught.value)) == ("not_allowed", NOT_INTERN)
        unnamed = [ToolApprovalResponse(call_id="call_1", approved=True)]
        nobody = rt.control(RespondToApprovals(turn_id=turn.turn_id, responses=unnamed))
        assert (nobody.ok, nobody.code) == (False, "not_allowed")
        assert stored_call(store, turn.turn_id, "call_1") == ("pending_approval", None, None)
        turn.approve("call_1", by="reviewer")
        assert stored_call(store, turn.turn_id, "call_1") == ("decided", "approved", "reviewer")  # the snapshot
        turn.deny("call_2", "not now", by="intern")  # anyone decides a call of note
        result = turn.result(30, final=True)
    assert result.finish_reason == "stop"
    started = [(e.call_id, e.by) for e in turn.all_events if isinstance(e, ToolCallStarted)]
    finished = [(e.call_id, e.outcome, e.by) for e in turn.all_events if isinstance(e, ToolFinished)]
    assert started == [("call_1", "reviewer")]
    assert sorted(finished) == [("call_1", "success", None), ("call_2", "denied", "intern")]
    s = open_store(store, create=False)
    try:
        stored = [e for e in s.log.events(turn.turn_id, 0) if isinstance(e, (ToolCallStarted, ToolFinished))]
    finally:
        s.close()
    assert sorted((e.kind, e.call_id, e.by) for e in stored) == [
        ("tool_call_started", "call_1", "reviewer"),
        ("tool_finished", "call_1", None),
        ("tool_finished", "call_2", "intern"),
    ]


def test_a_stop_through_runtime_control_is_marked_with_who_sent_it(
    provider: ScriptedProvider, store_location: str
) -> None:
    store = store_location
    provider.add(use_tools(call("release", {"version": "2.0"})))
    with Runtime(config(provider), store=store) as rt:
        turn = rt.run("release it", tools=[A.release])
        assert turn.result(30).finish_reason == "awaiting_approval"
        assert rt.control(StopTurn(turn_id=turn.turn_id, reason="wrong branch", by="ops")).ok
        assert turn.result(30, final=True).finish_reason == "stopped"
    assert [(e.error_type, e.detail, e.by) for e in turn.all_events if isinstance(e, Error)] == [
        ("stopped", "wrong branch", "ops")
    ]
    s = open_store(store, create=False)
    try:
        marker = s.log.load(turn.turn_id).stop
    finally:
        s.close()
    assert marker is not None and (marker.reason, marker.by) == ("wrong branch", "ops")


def test_the_command_line_decides_as_its_name_and_turns_show_says_who(
    provider: ScriptedProvider, store_location: str
) -> None:
    store = store_location
    provider.add(use_tools(call("release", {"version": "3.1"})), say("Released."))
    with Runtime(config(provider), store=store) as rt:
        turn = rt.run("release it", tools=[A.release], turn_id="turn_as1")
        assert turn.result(30).finish_reason == "awaiting_approval"
        intern = greenroom("approve", "turn_as1", "call_1", "--as", "intern", "--store", store)
        assert (intern.returncode, intern.stderr.strip()) == (2, f"greenroom: {NOT_INTERN}")
        os_user = greenroom("approve", "turn_as1", "call_1", "--store", store)  # as the OS user, not an approver
        who = f"{getpass.getuser()!r} may not"
        assert (os_user.returncode, os_user.stderr.strip().rsplit(": ", 1)[1]) == (2, who)
        pending = json.loads(greenroom("turns", "show", "turn_as1", "--store", store, "--json").stdout)
        assert pending["pending_approvals"] == [
            {"call_id": "call_1", "name": "release", "arguments": {"version": "3.1"}, "approvers": ["ops", "reviewer"]}
        ]
        ok = greenroom("approve", "turn_as1", "call_1", "--as", "reviewer", "--store", store, "--json")
        assert (ok.returncode, json.loads(ok.stdout)["by"]) == (0, "reviewer"), ok.stderr
        assert turn.result(30, final=True).finish_reason == "stop"
        stop = greenroom("stop", "turn_as1", "--as", "ops", "--store", store)
        assert stop.returncode == 2  # it has finished: nothing to stop
    shown = greenroom("turns", "show", "turn_as1", "--store", store)
    lines = shown.stdout.splitlines()
    started = [line for line in lines if " tool_call_started " in line]
    assert len(started) == 1 and started[0].endswith(" tool_call_started call_1 approved by reviewer")
    data = json.loads(greenroom("turns", "show", "turn_as1", "--store", store, "--json").stdout)
    assert [(e["kind"], e["by"]) for e in data["events"] if e["kind"] in ("tool_call_started", "tool_finished")] == [
        ("tool_call_started", "reviewer"),
        ("tool_finished", None),
    ]


def test_with_no_runtime_running_the_stored_turns_rules_refuse_a_decision_not_allowed_and_queue_nothing(
    provider: ScriptedProvider, store_location: str
) -> None:
    store = store_location
    provider.add(use_tools(call("release", {"version": "4.0"})))
    with Runtime(config(provider), store=store) as rt:
        assert rt.run("release", tools=[A.release], turn_id="turn_as2").result(30).finish_reason == "awaiting_approval"
    intern = greenroom("deny", "turn_as2", "call_1", "--as", "intern", "--store", store)
    assert (intern.returncode, intern.stderr.strip()) == (2, f"greenroom: {NOT_INTERN}")
    s = open_store(store, create=False)
    try:
        assert s.inbox.pending("turn_as2") == []  # refused before anything was queued
    finally:
        s.close()
    ops = greenroom("deny", "turn_as2", "call_1", "--as", "ops", "--reason", "not this week", "--store", store)
    assert ops.returncode == 0 and "queued" in ops.stdout, ops.stderr
    provider.add(say("Not released."))
    with Runtime(config(provider), store=store) as rt:
        assert recovered(store, rt, ["turn_as2"])
        again = rt.attach("turn_as2")
        assert again.result(30, final=True).finish_reason == "stop"
    assert [(e.outcome, e.content, e.by) for e in again.all_events if isinstance(e, ToolFinished)] == [
        ("denied", "Rejected: not this week", "ops")
    ]
    shown = greenroom("turns", "show", "turn_as2", "--store", store).stdout.splitlines()
    assert any(line.endswith(" tool_finished call_1 denied by ops") for line in shown)


@pytest.mark.parametrize(
    "name, why",
    [("", "a principal has 1 to 64 characters, not 0"), ("ops\tx", "a principal has only printable characters")],
)
def test_a_bad_name_for_as_is_a_usage_error(name: str, why: str) -> None:
    out = greenroom("stop", "turn_x", "--as", name, "--store", "/nonexistent.db")
    assert out.returncode == 2 and why in out.stderr and "--as" in out.stderr


def test_the_async_handle_names_who_decides_too(provider: ScriptedProvider) -> None:
    provider.add(use_tools(call("release", {"version": "7.0"})), say("Released."))

    async def main() -> tuple[str, list[str | None]]:
        async with AsyncRuntime(provider.provider(), hosts=1, tool_processes=1) as rt:
            turn = await rt.run("release", tools=[A.release])
            await turn.result(30)
            try:
                await turn.approve("call_1", by="intern")
                code = "applied"
            except ControlRejected as refused:
                code = refused.code
            await turn.approve("call_1", by="ops")
            await turn.result(30, final=True)
            return code, [e.by for e in turn.all_events if isinstance(e, ToolCallStarted)]

    assert asyncio.run(main()) == ("not_allowed", ["ops"])
