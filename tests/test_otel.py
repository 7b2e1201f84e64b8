"""OpenTelemetry: one trace per turn, whole across processes, exported by the Runtime's process.

The test process holds one SDK ``TracerProvider`` with an in-memory exporter (cleared before
each test) and gives it to its Runtimes (``tracer_provider=``): the global provider of this
process stays unset, as the test without a provider needs. Spans arrive asynchronously, so
each test waits until the turn's trace holds exactly the spans it expects.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from actors import Runtime
from actors.lifecycle.processes import session_processes
from actors.telemetry.export import SpanSink
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.testing.script import fail
from messages import Error, RetryPolicy, TextDelta, ToolProgress, TurnOptions

from . import otel_tools as O
from . import tools_for_tests as T
from .helpers import ok, wait_until

pytestmark = pytest.mark.integration

EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
MODEL = "scripted-model"


@pytest.fixture(autouse=True)
def _fresh_exporter() -> None:
    EXPORTER.clear()


@pytest.fixture
def traced(provider: ScriptedProvider, fast_retry: RetryPolicy) -> Iterator[Runtime]:
    """The ``runtime`` fixture's Runtime, traced into ``PROVIDER``."""
    rt = Runtime(provider.provider(retry=fast_retry), hosts=1, tool_processes=1, tracer_provider=PROVIDER).start()
    try:
        yield rt
    finally:
        rt.close()
        assert rt.admin_sid is not None
        assert session_processes(rt.admin_sid) == [], "the Runtime left processes behind"


def trace_of(turn_id: str, names: list[str], timeout: float = 10.0) -> list[ReadableSpan]:
    """The spans of the trace of ``turn_id``'s span, once they are exactly ``names``."""

    def spans() -> list[ReadableSpan]:
        finished = EXPORTER.get_finished_spans()
        turn = [s for s in finished if s.attributes and s.attributes.get("greenroom.turn.id") == turn_id]
        if not turn or turn[0].context is None:
            return []
        return [s for s in finished if s.context is not None and s.context.trace_id == turn[0].context.trace_id]

    wait_until(lambda: sorted(s.name for s in spans()) == sorted(names), timeout)
    found = spans()
    assert sorted(s.name for s in found) == sorted(names)
    return sorted(found, key=lambda s: s.start_time or 0)


def one(spans: list[ReadableSpan], name: str, **attributes: Any) -> ReadableSpan:
    [span] = [s for s in spans if s.name == name and attributes.items() <= dict(s.attributes or {}).items()]
    return span


def events(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, dict(e.attributes or {})) for e in span.events]


def span_id(span: ReadableSpan | None) -> int | None:
    return span.context.span_id if span is not None and span.context is not None else None


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def agent_attributes(turn_id: str, **more: Any) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": MODEL,
        "greenroom.turn.id": turn_id,
        "greenroom.turn.root_id": turn_id,
        **more,
    }


def chat_attributes(turn_id: str, port: int, n: int, **more: Any) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": MODEL,
        "gen_ai.request.stream": True,
        "server.address": "127.0.0.1",
        "server.port": port,
        "greenroom.stream.id": f"{turn_id}/s{n}",
        **more,
    }


def test_a_turn_with_a_tool_call_and_an_approval_is_one_trace_under_the_callers_span(
    traced: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    victim = tmp_path / "old.log"
    victim.write_text("x")
    provider.add(use_tools(call("add", {"a": 2, "b": 3}), call("delete_file", {"path": str(victim)})), say("Done."))
    with PROVIDER.get_tracer("tests").start_as_current_span("caller") as caller:
        turn = traced.run("tidy up", tools=[T.add, T.delete_file])
    assert turn.result(30).finish_reason == "awaiting_approval"
    turn.approve("call_2")
    assert turn.result(30).finish_reason == "stop"

    chat = f"chat {MODEL}"
    tools = ["execute_tool add", "execute_tool delete_file"]
    spans = trace_of(turn.turn_id, ["caller", "invoke_agent", chat, chat, *tools])
    agent, add, delete = one(spans, "invoke_agent"), one(spans, tools[0]), one(spans, tools[1])
    first, second = [s for s in spans if s.name == chat]
    assert parent_id(agent) == caller.get_span_context().span_id
    assert [parent_id(s) for s in (first, add, delete, second)] == [span_id(agent)] * 4
    assert [s.kind for s in (agent, first, add, delete, second)] == [
        SpanKind.INTERNAL, SpanKind.CLIENT, SpanKind.INTERNAL, SpanKind.INTERNAL, SpanKind.CLIENT
    ]  # fmt: skip
    assert dict(agent.attributes or {}) == agent_attributes(
        turn.turn_id,
        **{
            "greenroom.turn.finish_reason": "stop",
            "greenroom.turn.rounds": 1,
            "gen_ai.usage.input_tokens": 24,
            "gen_ai.usage.output_tokens": 14,
        },
    )
    called = {"gen_ai.tool.call.id": "call_2", "gen_ai.tool.name": "delete_file"}
    assert events(agent) == [
        ("greenroom.approval.requested", called),
        ("greenroom.approval.granted", called),
        ("greenroom.approval.resumed", {}),
    ]
    usage = {"gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 7}
    assert dict(first.attributes or {}) == chat_attributes(
        turn.turn_id, provider.port, 1, **{"gen_ai.response.finish_reasons": ("tool_calls",)}, **usage
    )
    assert dict(second.attributes or {}) == chat_attributes(
        turn.turn_id, provider.port, 2, **{"gen_ai.response.finish_reasons": ("stop",)}, **usage
    )
    assert dict(delete.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "delete_file",
        "gen_ai.tool.call.id": "call_2",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "Delete a file (needs approval).",
        "greenroom.tool.attempt": 1,
        "greenroom.tool.outcome": "success",
    }
    assert (add.attributes or {})["gen_ai.tool.call.id"] == "call_1"
    assert [s.status.status_code for s in spans] == [StatusCode.UNSET] * 6


def test_a_tool_runs_with_its_execute_tool_span_as_the_current_span(
    traced: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("seen_context")), say("Seen."))
    turn = traced.run("where are you?", tools=[O.seen_context])
    result = turn.result(30)
    assert result.finish_reason == "stop"
    spans = trace_of(turn.turn_id, ["invoke_agent", f"chat {MODEL}", f"chat {MODEL}", "execute_tool seen_context"])
    tool = one(spans, "execute_tool seen_context")
    assert tool.context is not None and one(spans, "invoke_agent").parent is None  # no caller span: a root
    trace_hex, span_hex = f"{tool.context.trace_id:032x}", f"{tool.context.span_id:016x}"
    assert result.messages[2].content == ok(
        {"carrier": {"traceparent": f"00-{trace_hex}-{span_hex}-01"}, "current": [trace_hex, span_hex]}
    )


def test_a_stopped_turn_records_the_stop_and_its_interrupted_call(
    traced: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("wait_for_stop", {"marker": str(tmp_path / "stop.log")})))
    turn = traced.run("wait", tools=[T.wait_for_stop], options=TurnOptions(stop_grace=0.2))
    turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30)
    turn.stop("the user pressed stop")
    assert turn.result(30).finish_reason == "stopped"
    spans = trace_of(turn.turn_id, ["invoke_agent", f"chat {MODEL}", "execute_tool wait_for_stop"])
    agent, tool = one(spans, "invoke_agent"), one(spans, "execute_tool wait_for_stop")
    assert (agent.attributes or {})["greenroom.turn.finish_reason"] == "stopped"
    assert events(agent) == [("greenroom.stop.requested", {"greenroom.cause": "user"})]
    assert (tool.attributes or {})["greenroom.tool.outcome"] == "interrupted"
    assert [s.status.status_code for s in spans] == [StatusCode.UNSET] * 3  # a stop is not an error


def test_a_stop_while_the_model_streams_ends_its_chat_span_as_aborted(
    traced: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("one two three four", hold_after=1, hold=threading.Event()))
    turn = traced.run("count", tools=[])
    turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
    turn.stop()
    assert turn.result(30).finish_reason == "stopped"
    spans = trace_of(turn.turn_id, ["invoke_agent", f"chat {MODEL}"])
    assert dict(one(spans, f"chat {MODEL}").attributes or {}) == chat_attributes(
        turn.turn_id, provider.port, 1, **{"greenroom.stream.aborted": True}
    )
    assert events(one(spans, "invoke_agent")) == [("greenroom.stop.requested", {"greenroom.cause": "user"})]


def test_a_tool_that_raises_ends_its_span_with_an_error_status(traced: Runtime, provider: ScriptedProvider) -> None:
    provider.add(use_tools(call("boom", {"message": "kaboom"})), say("It failed."))
    turn = traced.run("try", tools=[T.boom])
    assert turn.result(30).finish_reason == "stop"
    spans = trace_of(turn.turn_id, ["invoke_agent", f"chat {MODEL}", f"chat {MODEL}", "execute_tool boom"])
    tool = one(spans, "execute_tool boom")
    assert (tool.status.status_code, tool.status.description) == (StatusCode.ERROR, "ValueError: kaboom")
    assert ((tool.attributes or {})["error.type"], (tool.attributes or {})["greenroom.tool.outcome"]) == (
        "ValueError",
        "failed",
    )
    assert one(spans, "invoke_agent").status.status_code == StatusCode.UNSET  # the turn went on


def test_a_turn_that_ends_in_an_error_ends_its_span_with_that_error(
    traced: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(fail(400, "bad request"))
    turn = traced.run("hello", tools=[])
    assert turn.result(30).finish_reason == "error"
    [error] = [e for e in turn.all_events if isinstance(e, Error)]
    spans = trace_of(turn.turn_id, ["invoke_agent", f"chat {MODEL}"])
    for span in spans:
        assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, error.message)
        assert (span.attributes or {})["error.type"] == error.error_type == "http_error"


def test_a_child_turn_is_a_child_of_the_tool_call_that_started_it(traced: Runtime, provider: ScriptedProvider) -> None:
    provider.add(use_tools(call("delegate", {"task": "six times seven?"})), say("Forty-two."), say("42."))
    turn = traced.run("ask the helper", tools=[T.delegate])
    assert turn.result(60).finish_reason == "stop"
    chat = f"chat {MODEL}"
    spans = trace_of(turn.turn_id, ["invoke_agent", "invoke_agent", chat, chat, chat, "execute_tool delegate"])
    parent = one(spans, "invoke_agent", **{"greenroom.turn.id": turn.turn_id})
    delegate = one(spans, "execute_tool delegate")
    [child] = [s for s in spans if s.name == "invoke_agent" and s is not parent]
    assert (parent_id(delegate), parent_id(child)) == (span_id(parent), span_id(delegate))
    assert (child.attributes or {})["greenroom.turn.parent_id"] == turn.turn_id
    child_stream = f"{(child.attributes or {})['greenroom.turn.id']}/s1"
    child_chats = [s for s in spans if (s.attributes or {}).get("greenroom.stream.id") == child_stream]
    assert [parent_id(s) for s in child_chats] == [span_id(child)]


def test_a_turn_recovered_from_the_store_goes_on_in_the_same_trace(
    provider: ScriptedProvider, fast_retry: RetryPolicy, tmp_path: Path
) -> None:
    victim = tmp_path / "old.log"
    victim.write_text("x")
    provider.add(use_tools(call("delete_file", {"path": str(victim)})), say("Deleted."))
    config = provider.provider(retry=fast_retry)
    store = tmp_path / "turns.db"
    with Runtime(config, store=store, hosts=1, tool_processes=1, tracer_provider=PROVIDER) as first:
        turn = first.run("clean up", tools=[T.delete_file])
        assert turn.result(30).finish_reason == "awaiting_approval"
    with Runtime(config, store=store, hosts=1, tool_processes=1, tracer_provider=PROVIDER) as second:
        assert second.recovered == [turn.turn_id]
        later = second.attach(turn.turn_id)
        later.approve("call_1")
        assert later.result(30).finish_reason == "stop"
    for rt in (first, second):
        assert rt.admin_sid is not None and session_processes(rt.admin_sid) == []
    chat = f"chat {MODEL}"
    spans = trace_of(turn.turn_id, ["invoke_agent", "invoke_agent", chat, chat, "execute_tool delete_file"])
    before, after = [s for s in spans if s.name == "invoke_agent"]
    called = {"gen_ai.tool.call.id": "call_1", "gen_ai.tool.name": "delete_file"}
    assert (before.parent, parent_id(after)) == (None, span_id(before))
    assert events(before) == [("greenroom.approval.requested", called), ("greenroom.turn.suspended", {})]
    assert events(after) == [
        ("greenroom.turn.recovered", {"greenroom.turn.round": 0}),
        ("greenroom.approval.granted", called),
        ("greenroom.approval.resumed", {}),
    ]
    others = [s for s in spans if s.name != "invoke_agent"]  # chat, execute_tool, chat
    assert [parent_id(s) for s in others] == [span_id(before), span_id(after), span_id(after)]
    assert (after.attributes or {})["greenroom.turn.finish_reason"] == "stop"
    assert "greenroom.turn.finish_reason" not in (before.attributes or {})


def test_without_a_tracer_provider_no_trace_context_travels(runtime: Runtime, provider: ScriptedProvider) -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # nothing configured in this process
    provider.add(use_tools(call("seen_context")), say("Seen."))
    with PROVIDER.get_tracer("tests").start_as_current_span("caller"):  # a span, but not this runtime's provider
        turn = runtime.run("where are you?", tools=[O.seen_context])
    result = turn.result(30)
    assert result.messages[2].content == ok({"carrier": None, "current": None})
    assert [s.name for s in EXPORTER.get_finished_spans()] == ["caller"]


def test_what_a_new_turn_carries_follows_the_provider_and_the_callers_span() -> None:
    assert SpanSink().trace_context() is None  # the global provider is the API's proxy
    assert SpanSink(trace.NoOpTracerProvider()).trace_context() is None
    assert SpanSink(PROVIDER).trace_context() == {}  # no current span: the turn starts a trace
    with PROVIDER.get_tracer("tests").start_as_current_span("caller") as caller:
        ids = caller.get_span_context()
        flags = int(ids.trace_flags)  # sampled, and the SDK's trace ids are random (W3C level 2)
        assert SpanSink(PROVIDER).trace_context() == {
            "traceparent": f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{flags:02x}"
        }
    unsampled = trace.NonRecordingSpan(trace.SpanContext(1, 2, is_remote=True, trace_flags=trace.TraceFlags(0)))
    with trace.use_span(unsampled):
        assert SpanSink(PROVIDER).trace_context() is None


def test_a_start_and_a_snapshot_written_before_trace_contexts_existed_still_load() -> None:
    import msgpack

    from messages import StartTurn, TurnState, decode, decode_snapshot
    from messages.llm import ProviderConfig

    provider = ProviderConfig(base_url="http://127.0.0.1:1/v1", model="m").model_dump(mode="json")
    hello = [{"kind": "chat_message", "role": "user", "content": "hi"}]
    start = {"kind": "start_turn", "turn_id": "t1", "messages": hello}
    loaded = decode(msgpack.packb({**start, "provider": provider}))
    assert isinstance(loaded, StartTurn) and loaded.trace_context is None
    state = {"turn_id": "t1", "root_turn_id": "t1", "provider": provider}
    snapshot = decode_snapshot(msgpack.packb({"v": 1, "state": state}))
    assert isinstance(snapshot, TurnState) and snapshot.trace_context is None
