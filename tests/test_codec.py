"""The msgpack codec: every message class round-trips; bad bytes fail clearly."""

from __future__ import annotations

import msgpack
import pytest

import messages as m
from messages.codec import CodecError, SnapshotVersionError, decode_many, join_encoded, split_encoded

call = m.ToolCall(id="call_1", name="add", arguments='{"a": 1, "b": 2}')
provider = m.ProviderConfig(
    base_url="http://127.0.0.1:1/v1", model="x", api_key_env="OPENAI_API_KEY", headers={"x-trace": "1"},
    input_price=0.15, output_price=0.6,
)
spec = m.ToolSpec(
    name="add",
    description="Add.",
    ref="tests.tools_for_tests:add",
    approval="predicate",
    approval_ref="a:b",
    requires={"gpu": True},
)
history = [
    m.ChatMessage.system("s"),
    m.ChatMessage.user("u"),
    m.ChatMessage.assistant(None, [call]),
    m.ChatMessage.tool("{}", "call_1", name="add"),
]
ids = {"turn_id": "t1", "seq": 4, "parent_turn_id": "p", "root_turn_id": "r"}

SAMPLES: dict[str, m.Message] = {
    "tool_call": call,
    "chat_message": history[2],
    "usage": m.Usage(prompt_tokens=3, completion_tokens=4, total_tokens=7),
    "timeouts": m.Timeouts(connect=1.5, read=2.0, total=None),
    "retry_policy": m.RetryPolicy(max_attempts=2, initial_delay=0.1, max_delay=1.0, jitter=0.0),
    "provider_config": provider,
    "stream_chat": m.StreamChat(
        stream_id="t1/s1",
        provider=provider,
        messages=history,
        tools=[{"name": "add", "description": "", "parameters": {}}],
    ),
    "llm_deltas": m.LLMDeltas(stream_id="t1/s1", seq=0, text="hé"),
    "llm_retrying": m.LLMRetrying(stream_id="t1/s1", seq=1, attempt=1, delay=0.5, reason="HTTP 429"),
    "llm_rate_limited": m.LLMRateLimited(stream_id="t1/s1", seq=1, until=1.7e9, delay=2.5, reason="requests_per_minute"),
    "rate_limit": m.RateLimit(requests_per_minute=60, tokens_per_minute=90_000, window=60.0),
    "llm_completed": m.LLMCompleted(
        stream_id="t1/s1", seq=2, message=history[2], finish_reason="tool_calls", usage=m.Usage(total_tokens=1)
    ),
    "llm_usage": m.LLMUsage(stream_id="t1/s1", seq=1, usage=m.Usage(prompt_tokens=40, completion_tokens=1, total_tokens=41)),
    "llm_failed": m.LLMFailed(
        stream_id="t1/s1", seq=3, error_type="http_error", message="HTTP 500", partial_text="par"
    ),
    "abort_stream": m.AbortStream(stream_id="t1/s1", reason="stop"),
    "tool_spec": spec,
    "run_tool": m.RunTool(
        turn_id="t1",
        root_turn_id="t1",
        call=call,
        spec=spec,
        arguments={"a": 1, "b": [2, None]},
        idempotency_key="t1:call_1",
        attempt=2,
        stop_grace=0.5,
        heartbeat=1.0,
        provider=provider,
    ),
    "tool_result": m.ToolResult(
        turn_id="t1", call_id="call_1", outcome="failed", content='{"ok": false}', usage=m.Usage(total_tokens=9), cost=0.5
    ),
    "report_progress": m.ReportProgress(turn_id="t1", call_id="call_1", seq=0, data={"pct": 50}, usage=m.Usage()),
    "interrupt_tool": m.InterruptTool(turn_id="t1", call_id="call_1", mode="cancel", reason="r"),
    "turn_options": m.TurnOptions(
        max_rounds=3, approval_timeout=2.5, approval_window=0.0, stop_grace=1.0, linger=0.5, max_tokens=1000,
        max_cost=0.5, idle_timeout=30.0,
    ),
    "start_turn": m.StartTurn(
        turn_id="t1", messages=history, tools=[spec], provider=provider, parent_turn_id="p", root_turn_id="r"
    ),
    "stop_turn": m.StopTurn(turn_id="t1", reason="user", request_id="q"),
    "cancel_turn": m.CancelTurn(turn_id="t1", reason="sup", grace=1.0),
    "tool_approval_response": m.ToolApprovalResponse(
        call_id="call_1", approved=True, reason="fixed", turn_id="t1", arguments={"a": 1, "b": [2]}
    ),
    "send_input": m.SendInput(
        turn_id="t1", messages=[m.ChatMessage.user("also Oslo")], when="now", stop_calls=True, deny_pending=True,
        request_id="q",
    ),
    "pause_turn": m.PauseTurn(turn_id="t1", when="now", reason="look", request_id="q"),
    "resume_turn": m.ResumeTurn(turn_id="t1", messages=[m.ChatMessage.user("go on")], request_id="q"),
    "respond_to_approvals": m.RespondToApprovals(
        turn_id="t1",
        responses=[m.ToolApprovalResponse(call_id="c", approved=True)],
        deny_rest=True,
        deny_reason="later",
    ),
    "stop_tool": m.StopTool(turn_id="t1", call_id="call_1"),
    "subscribe": m.Subscribe(turn_id="t1", since=3, window=64),
    "consumed": m.Consumed(turn_id="t1", seq=41),
    "unsubscribe": m.Unsubscribe(turn_id="t1"),
    "node_info": m.NodeInfo(node="10.0.0.2:1900", capabilities={"sandbox": True, "gpu": "a100"}),
    "membership_changed": m.MembershipChanged(
        node="10.0.0.2:1900", joined=False, capabilities={"sandbox": True}, at=12.5
    ),
    "watch_membership": m.WatchMembership(),
    "list_nodes": m.ListNodes(request_id="q"),
    "node_list": m.NodeList(request_id="q", nodes=[m.NodeInfo(node="n", capabilities={})]),
    "tool_alive": m.ToolAlive(turn_id="t1", call_id="c", node="10.0.0.2:1900"),
    "control_reply": m.ControlReply(
        turn_id="t1", request_id="q", command="stop_turn", ok=False, code="duplicate", message="m", resumes_at=7
    ),
    "turn_started": m.TurnStarted(**ids, forked_from=m.ForkOrigin(turn_id="turn_0", at=3, at_seq=5, replaced=True)),
    "fork_origin": m.ForkOrigin(turn_id="turn_0", at=3),
    "text_delta": m.TextDelta(text="hi", **ids),
    "tool_call_started": m.ToolCallStarted(call_id="c", name="add", arguments={"a": 1}, **ids),
    "tool_progress": m.ToolProgress(call_id="c", data=[1, "two"], **ids),
    "tool_finished": m.ToolFinished(call_id="c", name="add", outcome="interrupted", content="x", **ids),
    "tool_approval_request": m.ToolApprovalRequest(call_id="c", name="add", arguments={"a": 1}, description="d", **ids),
    "turn_retrying": m.TurnRetrying(attempt=2, delay=0.25, reason="HTTP 503", **ids),
    "rate_limited": m.RateLimited(until=1.7e9, reason="retry_after", **ids),
    "input_accepted": m.InputAccepted(messages=[m.ChatMessage.user("also Oslo")], history_index=4, request_id="q", **ids),
    "budget_warning": m.BudgetWarning(budget="cost", used=0.81, limit=1.0, **ids),
    "error": m.Error(error_type="stopped", message="Agent run stopped", detail="user", **ids),
    "finish": m.Finish(
        finish_reason="awaiting_approval",
        usage=m.Usage(total_tokens=2),
        subagent_usage=m.Usage(total_tokens=5),
        cost=0.25,
        round=1,
        messages=history,
        pending_approvals=["c"],
        **ids,
    ),
}


def test_every_message_class_has_a_sample() -> None:
    assert set(SAMPLES) == set(m.message_classes())


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_every_message_class_round_trips(kind: str) -> None:
    msg = SAMPLES[kind]
    assert msg.kind == kind
    data = m.encode(msg)
    assert isinstance(data, bytes)
    back = m.decode(data)
    assert type(back) is type(msg)
    assert back == msg


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_every_message_encodes_to_the_bytes_of_its_json_mode_dump(kind: str) -> None:
    msg = SAMPLES[kind]  # the wire form of stored events never changes (flat classes skip model_dump)
    assert m.encode(msg) == msgpack.packb(msg.model_dump(mode="json"), use_bin_type=True)


def test_a_flat_message_with_its_optional_fields_left_out_encodes_as_its_dump() -> None:
    delta = m.TextDelta(turn_id="t", seq=0, text="")
    assert m.encode(delta) == msgpack.packb(delta.model_dump(mode="json"), use_bin_type=True)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 300])
def test_encoded_messages_joined_in_one_array_decode_back_in_order(n: int) -> None:
    events = [m.TextDelta(turn_id="t", seq=i, text=f"{i} ") for i in range(n)]
    assert decode_many(join_encoded([m.encode(e) for e in events])) == events


@pytest.mark.parametrize("n", [15, 16, 65_535, 65_536])
def test_an_array_of_any_length_has_the_header_msgpack_reads(n: int) -> None:
    """Each side of msgpack's header sizes (fixarray, array 16, array 32), cheap items."""
    assert msgpack.unpackb(join_encoded([msgpack.packb(i) for i in range(n)])) == list(range(n))


@pytest.mark.parametrize("n", [0, 1, 15, 16, 300, 65_536])
def test_a_joined_array_splits_back_into_each_messages_fields_and_bytes(n: int) -> None:
    payloads = [m.encode(m.TextDelta(turn_id="t", seq=i, text=f"{i} ")) for i in range(n)]
    split = split_encoded(join_encoded(payloads))
    assert [raw for _, raw in split] == payloads
    assert [fields for fields, _ in split] == [msgpack.unpackb(p) for p in payloads]


def test_an_array_that_does_not_split_is_a_clear_error() -> None:
    with pytest.raises(CodecError, match="malformed message payload: expected a map, got int"):
        split_encoded(join_encoded([msgpack.packb(1)]))
    with pytest.raises(CodecError, match="malformed message array: OutOfData"):
        split_encoded(b"\x93\x80")


def test_an_array_with_a_message_that_does_not_fit_is_a_clear_error() -> None:
    bad = msgpack.packb({"kind": "text_delta", "turn_id": "t", "seq": "x", "text": ""})
    with pytest.raises(CodecError, match="malformed 'text_delta' message"):
        decode_many(join_encoded([m.encode(m.TextDelta(turn_id="t", seq=0, text="a")), bad]))
    with pytest.raises(CodecError, match="expected an array, got dict"):
        decode_many(bad)


def test_an_unknown_kind_is_a_clear_error() -> None:
    with pytest.raises(CodecError, match="unknown message kind 'no_such_thing'"):
        m.decode(msgpack.packb({"kind": "no_such_thing"}))


def test_malformed_bytes_are_a_clear_error() -> None:
    with pytest.raises(CodecError, match="malformed message payload"):
        m.decode(b"\xc1\xff\x00")


def test_a_payload_that_is_not_a_map_is_a_clear_error() -> None:
    with pytest.raises(CodecError, match="expected a map, got list"):
        m.decode(msgpack.packb([1, 2]))


def test_a_payload_without_kind_is_a_clear_error() -> None:
    with pytest.raises(CodecError, match="no 'kind' field"):
        m.decode(msgpack.packb({"turn_id": "t"}))


def test_fields_that_do_not_fit_are_a_clear_error() -> None:
    with pytest.raises(CodecError, match="malformed 'stop_turn' message"):
        m.decode(msgpack.packb({"kind": "stop_turn", "turn_id": 5, "bogus": True}))


def test_encoding_something_that_is_not_a_message_fails() -> None:
    with pytest.raises(CodecError, match="not a greenroom message class"):
        m.encode(m.CallState(call=call))  # type: ignore[arg-type]


def test_a_snapshot_round_trips_and_an_unknown_version_fails_fast() -> None:
    state = m.TurnState(turn_id="t1", root_turn_id="t1", provider=provider, tools=[spec], messages=history)
    assert m.decode_snapshot(m.encode_snapshot(state)) == state
    raw = msgpack.unpackb(m.encode_snapshot(state))
    raw["v"] = 99
    with pytest.raises(SnapshotVersionError, match="snapshot schema version 99 is not supported"):
        m.decode_snapshot(msgpack.packb(raw))


def test_a_provider_config_refuses_a_secret_header() -> None:
    with pytest.raises(ValueError, match="carries a secret"):
        m.ProviderConfig(base_url="http://x", model="m", headers={"Authorization": "Bearer sk-123"})


def test_a_provider_config_names_its_key_and_never_holds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GREENROOM_CODEC_KEY", "sk-from-the-environment")
    config = m.ProviderConfig(base_url="http://x", model="m", api_key_env="GREENROOM_CODEC_KEY")
    assert b"sk-from-the-environment" not in m.encode(config)
    assert b"GREENROOM_CODEC_KEY" in m.encode(config)
    assert "api_key" not in m.ProviderConfig.model_fields
