"""Who decided (issue 35 item 4), in the rules and the data: a command's ``by``, a tool's
``approvers``, ``not_allowed``, and where who decided is recorded. No actor system here: the
rules are driven directly, with exact decisions; the end-to-end tests are in
``test_who_decided_e2e.py`` and the console's in ``test_console_users*.py``."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from actors import requires_approval, tool
from actors.errors import ToolDefinitionError
from actors.turn.decisions import Emit, TimerFired
from actors.turn.rules import TurnRules
from messages import (
    CancelTurn,
    ChatMessage,
    Error,
    ReportProgress,
    RespondToApprovals,
    StopTool,
    StopTurn,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolCallStarted,
    ToolFinished,
    ToolResult,
    ToolSpec,
    decode_snapshot,
    encode_snapshot,
)

from .test_turn_rules import GATED, SAFE, kinds, new, respond, step

GUARDED = ToolSpec(name="guarded", ref="x:guarded", approval="always", approvers=["reviewer", "ops"])


def waiting(*calls: tuple[str, str, bool]) -> TurnRules:
    rules, _ = new([SAFE, GATED, GUARDED])
    step(rules)
    respond(rules, *calls)
    return rules


def events(out: list[Any], cls: type) -> list[Any]:
    return [d.event for d in out if isinstance(d, Emit) and isinstance(d.event, cls)]


def refused(out: list[Any]) -> tuple[str | None, str]:
    assert kinds(out) == ["reply"]
    return out[0].reply.code, out[0].reply.message


# -- a principal -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "by, why",
    [
        ("", "a principal has 1 to 64 characters, not 0"),
        ("x" * 65, "a principal has 1 to 64 characters, not 65"),
        ("ops\nrm -rf", "a principal has only printable characters: 'ops\\nrm -rf' does not"),
        ("ops\x1b[31m", "a principal has only printable characters: 'ops\\x1b[31m' does not"),
        (" ops", "a principal has no space at its ends: ' ops' does"),
    ],
)
def test_a_command_whose_by_is_not_a_short_printable_name_is_refused_where_it_is_made(by: str, why: str) -> None:
    with pytest.raises(ValidationError) as caught:
        StopTurn(turn_id="t", by=by)
    assert caught.value.errors()[0]["msg"] == f"Value error, {why}"


def test_a_principal_may_be_a_name_with_spaces_or_an_address() -> None:
    assert StopTurn(turn_id="t", by="Ada Lovelace").by == "Ada Lovelace"
    assert RespondToApprovals(turn_id="t", by="ada@example.com").by == "ada@example.com"


# -- a tool's approvers --------------------------------------------------------------------------


@tool(requires_approval=True, approvers={"reviewer", "ops", "ops"})
def publish(text: str) -> str:
    """Publish a note."""
    return text


@tool
def plain(text: str) -> str:
    """A tool anyone may run."""
    return text


def test_a_tools_approvers_travel_in_its_spec_sorted_once_each() -> None:
    assert publish.spec.approvers == ["ops", "reviewer"]
    assert plain.spec.approvers is None
    assert requires_approval(plain, approvers=["ops"]).spec.approvers == ["ops"]
    assert requires_approval(publish).spec.approvers == ["ops", "reviewer"]  # its own stay


@pytest.mark.parametrize(
    "options, message",
    [
        ({"approvers": {"ops"}}, "tool 'f': approvers decide approvals; the tool needs requires_approval"),
        (
            {"requires_approval": True, "approvers": set()},
            "tool 'f': approvers names at least one principal (None lets anyone decide)",
        ),
        ({"requires_approval": True, "approvers": "ops"}, "tool 'f': approvers is a set of principals, not 'ops'"),
        (
            {"requires_approval": True, "approvers": {"ops\n"}},
            "tool 'f': approvers: a principal has only printable characters: 'ops\\n' does not",
        ),
    ],
)
def test_approvers_that_could_never_decide_are_a_definition_error(options: dict[str, Any], message: str) -> None:
    def f() -> None:
        """Nothing."""

    with pytest.raises(ToolDefinitionError) as caught:
        tool(**options)(f)
    assert str(caught.value) == message


def test_a_spec_with_no_approvers_at_all_is_refused() -> None:
    with pytest.raises(ValidationError, match="approvers names at least one principal"):
        ToolSpec(name="g", ref="x:g", approval="always", approvers=[])


# -- the rules -------------------------------------------------------------------------------------


def test_the_approval_request_says_who_may_decide() -> None:
    rules, _ = new([SAFE, GATED, GUARDED])
    step(rules)
    out = respond(rules, ("c1", "guarded", True), ("c2", "gated", True))
    assert [(e.call_id, e.approvers) for e in events(out, ToolApprovalRequest)] == [
        ("c1", ["ops", "reviewer"]),
        ("c2", None),
    ]


def test_an_approvers_decision_is_recorded_with_its_name_and_shows_when_the_call_starts() -> None:
    rules = waiting(("c1", "guarded", True))
    out = rules.handle(ToolApprovalResponse(call_id="c1", approved=True, by="reviewer", request_id="r"))
    assert kinds(out) == ["persist", "settimer", "reply"] and out[2].reply.ok
    cs = rules.state.call("c1")
    assert cs is not None and (cs.status, cs.decision, cs.decided_by) == ("decided", "approved", "reviewer")
    again = decode_snapshot(encode_snapshot(rules.state))  # the store keeps it
    assert again.call("c1").decided_by == "reviewer"  # type: ignore[union-attr]
    out = rules.handle(TimerFired("commit", 0))
    assert [(e.call_id, e.by) for e in events(out, ToolCallStarted)] == [("c1", "reviewer")]
    out = rules.handle(ToolResult(turn_id="t", call_id="c1", outcome="success", content="ok"))
    assert [(e.outcome, e.by) for e in events(out, ToolFinished)] == [("success", None)]  # ended by itself


@pytest.mark.parametrize(
    "by, who",
    [("intern", "'intern' may not"), (None, "this decision names nobody (by)"), ("Reviewer", "'Reviewer' may not")],
)
def test_a_decision_by_anyone_else_is_refused_not_allowed_and_the_call_stays_undecided(
    by: str | None, who: str
) -> None:
    rules = waiting(("c1", "guarded", True))
    before = rules.state.model_copy(deep=True)
    out = rules.handle(ToolApprovalResponse(call_id="c1", approved=True, by=by, request_id="r"))
    assert refused(out) == ("not_allowed", f"call 'c1' of guarded may be decided only by ops, reviewer: {who}")
    assert rules.state == before
    assert rules.state.pending_approvals == ["c1"]
    assert kinds(rules.handle(ToolApprovalResponse(call_id="c1", approved=False, by="ops"))) == ["persist", "settimer"]


def test_a_batch_is_refused_whole_when_one_of_its_calls_is_not_the_senders_to_decide() -> None:
    rules = waiting(("c1", "gated", True), ("c2", "guarded", True))
    before = rules.state.model_copy(deep=True)
    batch = [ToolApprovalResponse(call_id="c1", approved=True), ToolApprovalResponse(call_id="c2", approved=True)]
    out = rules.handle(RespondToApprovals(turn_id="t", responses=batch, by="intern"))
    assert refused(out)[0] == "not_allowed"
    assert rules.state == before  # c1, anyone's to decide, is not decided either


def test_deny_rest_decides_every_undecided_call_so_it_must_be_allowed_for_each() -> None:
    rules = waiting(("c1", "gated", True), ("c2", "guarded", True))
    approve_one = [ToolApprovalResponse(call_id="c1", approved=True)]
    out = rules.handle(RespondToApprovals(turn_id="t", responses=approve_one, deny_rest=True, by="intern"))
    assert refused(out) == (
        "not_allowed",
        "call 'c2' of guarded may be decided only by ops, reviewer: 'intern' may not",
    )
    assert rules.state.pending_approvals == ["c1", "c2"]
    out = rules.handle(RespondToApprovals(turn_id="t", responses=approve_one, deny_rest=True, by="ops"))
    assert kinds(out) == ["persist", "settimer"]
    assert [(c.call.id, c.decision, c.decided_by) for c in rules.state.batch or ()] == [
        ("c1", "approved", "ops"),
        ("c2", "denied", "ops"),
    ]


def test_a_response_in_a_batch_may_name_the_batchs_principal_but_not_another() -> None:
    rules = waiting(("c1", "guarded", True))
    other = [ToolApprovalResponse(call_id="c1", approved=True, by="ops")]
    out = rules.handle(RespondToApprovals(turn_id="t", responses=other, by="reviewer"))
    assert refused(out) == (
        "invalid",
        "the response for call 'c1' is by 'ops', its batch by 'reviewer': one principal decides",
    )
    out = rules.handle(RespondToApprovals(turn_id="t", responses=other))  # the response's own name decides
    assert kinds(out) == ["persist", "settimer"]
    assert rules.state.call("c1").decided_by == "ops"  # type: ignore[union-attr]


def test_a_denial_says_who_denied_in_the_calls_end() -> None:
    rules = waiting(("c1", "guarded", True))
    rules.handle(ToolApprovalResponse(call_id="c1", approved=False, reason="not today", by="ops"))
    out = rules.handle(TimerFired("commit", 0))
    ended = [(e.outcome, e.content, e.by) for e in events(out, ToolFinished)]
    assert ended == [("denied", "Rejected: not today", "ops")]
    assert rules.state.messages[-1] == ChatMessage.tool("Rejected: not today", "c1", name="guarded")  # as before


def test_the_approval_timeout_denies_in_nobodys_name() -> None:
    rules, _ = new([SAFE, GUARDED], approval_timeout=5.0)
    step(rules)
    respond(rules, ("c1", "guarded", True))
    out = rules.handle(TimerFired("approval_timeout", 0))
    assert [(e.content, e.by) for e in events(out, ToolFinished)] == [("Rejected: Approval timed out", None)]


def test_a_stopped_call_says_who_stopped_it() -> None:
    rules, _ = new([SAFE, GUARDED])
    step(rules)
    respond(rules, ("c1", "safe", False), ("c2", "guarded", True))
    rules.handle(StopTool(turn_id="t", call_id="c1", by="ops"))
    out = rules.handle(ToolResult(turn_id="t", call_id="c1", outcome="interrupted", content="stopped", attempt=1))
    assert [(e.call_id, e.by) for e in events(out, ToolFinished)] == [("c1", "ops")]
    out = rules.handle(StopTool(turn_id="t", call_id="c2", by="intern"))  # stopping is not deciding: anyone may
    assert [(e.call_id, e.outcome, e.by) for e in events(out, ToolFinished)] == [("c2", "interrupted", "intern")]


def test_a_stop_is_marked_with_who_sent_it_and_its_error_says_so() -> None:
    rules, _ = new()
    step(rules)
    out = rules.handle(StopTurn(turn_id="t", reason="enough", by="ops"))
    assert rules.state.stop is not None and rules.state.stop.by == "ops"
    assert [(e.error_type, e.detail, e.by) for e in events(out, Error)] == [("stopped", "enough", "ops")]
    assert rules.handle(StopTurn(turn_id="t", by="intern")) == []  # the first request wins, its name too
    assert rules.state.stop.by == "ops"


def test_a_cancel_is_marked_with_who_sent_it_and_its_error_says_so() -> None:
    rules, _ = new()
    step(rules)
    rules.handle(CancelTurn(turn_id="t", reason="wind down", by="ops"))
    assert rules.state.cancel is not None and rules.state.cancel.by == "ops"
    out = rules.handle(StopTurn(turn_id="t", reason="now", by="intern"))  # the cancel came first: its name is kept
    assert rules.state.stop is not None and rules.state.stop.by == "intern"
    assert [(e.error_type, e.detail, e.by) for e in events(out, Error)] == [("cancelled", "wind down", "ops")]


def test_a_sub_agents_request_reaches_the_parent_with_its_approvers() -> None:
    rules, _ = new()
    step(rules)
    respond(rules, ("c1", "safe", False))
    child = {"turn_id": "child", "call_id": "k1", "name": "release", "arguments": {}, "approvers": ["ops"]}
    out = rules.handle(ReportProgress(turn_id="t", call_id="c1", seq=0, approval=child, attempt=1))
    assert [(e.call_id, e.child_turn_id, e.approvers) for e in events(out, ToolApprovalRequest)] == [
        ("k1", "child", ["ops"])
    ]
