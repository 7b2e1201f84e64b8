"""OpenTelemetry metrics: the GenAI conventions' and greenroom's own, read with the SDK's in-memory reader.

Each test gives its Runtime a fresh SDK ``MeterProvider`` with an ``InMemoryMetricReader``
(``meter_provider=``); the global provider of this process stays unset. Points arrive
from the hosts asynchronously, so each test waits until the reader holds what it expects.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from actors import Runtime
from actors.lifecycle.processes import session_processes
from actors.telemetry.metrics import MetricSink
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import RetryPolicy

from . import console_tools as C
from . import tools_for_tests as T
from .helpers import wait_until

pytestmark = pytest.mark.integration


def collect(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """Every metric the reader holds: (attributes, (count, sum)) for histograms, (attributes, value) otherwise."""
    out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            assert scope.scope.name == "greenroom"
            for metric in scope.metrics:
                points = out.setdefault(metric.name, [])
                for p in metric.data.data_points:
                    value = (p.count, p.sum) if hasattr(p, "bucket_counts") else p.value
                    points.append((dict(p.attributes), value))
    return out


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def measured(provider: ScriptedProvider, reader: InMemoryMetricReader) -> Iterator[Runtime]:
    meters = MeterProvider(metric_readers=[reader])
    rt = Runtime(
        provider.provider(retry=RetryPolicy(max_attempts=1)), hosts=1, tool_processes=2, meter_provider=meters
    ).start()
    try:
        yield rt
    finally:
        rt.close()
        meters.shutdown()
        assert rt.admin_sid is not None and session_processes(rt.admin_sid) == []


def chat(provider: ScriptedProvider) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "scripted-model",
        "server.address": "127.0.0.1",
        "server.port": provider.port,
    }


def test_a_turn_reports_tokens_and_durations_per_request_and_per_call_by_the_conventions(
    measured: Runtime, provider: ScriptedProvider, reader: InMemoryMetricReader
) -> None:
    provider.add(use_tools(call("add", {"a": 2, "b": 3})), say("Five."))
    assert measured.run("add", tools=[T.add]).result(30).finish_reason == "stop"
    assert wait_until(
        lambda: (
            collect(reader).get("greenroom.turns.live") == [({}, 0)]
            and "gen_ai.execute_tool.duration" in collect(reader)
        )
    )
    found = collect(reader)
    assert found["gen_ai.client.token.usage"] == [
        ({**chat(provider), "gen_ai.token.type": "input"}, (2, 24)),
        ({**chat(provider), "gen_ai.token.type": "output"}, (2, 14)),
    ]
    [(attributes, (count, seconds))] = found["gen_ai.client.operation.duration"]
    assert (attributes, count) == (chat(provider), 2) and seconds > 0
    [(attributes, (count, _))] = found["gen_ai.execute_tool.duration"]
    assert (attributes, count) == (
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "add", "greenroom.tool.outcome": "success"},
        1,
    )
    assert found["greenroom.turns.waiting"] == [({}, 0)]
    assert "greenroom.turn.interruptions" not in found


def test_a_wait_for_approval_is_seen_while_it_lasts_and_measured_when_it_ends(
    measured: Runtime, provider: ScriptedProvider, reader: InMemoryMetricReader
) -> None:
    provider.add(use_tools(call("publish", {"text": "note"})), say("Published."))
    turn = measured.run("publish", tools=[C.publish])
    assert turn.result(30).finish_reason == "awaiting_approval"
    assert wait_until(lambda: collect(reader).get("greenroom.turns.waiting") == [({}, 1)])
    found = collect(reader)
    assert found["greenroom.turns.live"] == [({}, 1)]
    [(_, oldest)] = found["greenroom.approval.oldest_wait"]
    assert oldest >= 0
    turn.approve("call_1")
    assert turn.result(30).finish_reason == "stop"
    assert wait_until(lambda: collect(reader).get("greenroom.turns.live") == [({}, 0)])
    found = collect(reader)
    assert found["greenroom.turns.waiting"] == [({}, 0)]
    assert found["greenroom.approval.oldest_wait"] == [({}, 0.0)]
    [(attributes, (count, _))] = found["greenroom.approval.wait.duration"]
    assert (attributes, count) == ({"greenroom.approval.ended_by": "decision"}, 1)


def test_stops_cancels_and_stopped_calls_are_counted_by_cause(
    measured: Runtime, provider: ScriptedProvider, reader: InMemoryMetricReader, tmp_path: Path
) -> None:
    provider.add(use_tools(call("wait_for_stop", {"marker": str(tmp_path / "a")})))
    stopped = measured.run("one", tools=[T.wait_for_stop])
    stopped.wait_for(lambda e: e.kind == "tool_progress")
    stopped.stop("enough")
    assert stopped.result(30).finish_reason == "stopped"
    provider.add(use_tools(call("cooperative", {"marker": str(tmp_path / "b")})))
    cancelled = measured.run("two", tools=[T.cooperative])
    cancelled.wait_for(lambda e: e.kind == "tool_progress")
    cancelled.cancel("wind down")
    assert cancelled.result(30).finish_reason == "cancelled"
    provider.add(
        use_tools(call("wait_for_stop", {"marker": str(tmp_path / "c")}), call("add", {"a": 1, "b": 1})), say("Ok.")
    )
    one_call = measured.run("three", tools=[T.wait_for_stop, T.add])
    one_call.wait_for(lambda e: e.kind == "tool_progress")
    one_call.stop_tool("call_1")
    assert one_call.result(30).finish_reason == "stop"
    expected = [
        ({"greenroom.interruption.kind": "stop", "greenroom.cause": "user"}, 1),
        ({"greenroom.interruption.kind": "cancel", "greenroom.cause": "user"}, 1),
        ({"greenroom.interruption.kind": "stop_tool", "greenroom.cause": "user"}, 1),
    ]
    assert wait_until(lambda: collect(reader).get("greenroom.turn.interruptions") == expected), collect(reader)
    outcomes = {
        (a["gen_ai.tool.name"], a["greenroom.tool.outcome"]) for a, _ in collect(reader)["gen_ai.execute_tool.duration"]
    }
    assert outcomes == {("wait_for_stop", "interrupted"), ("cooperative", "interrupted"), ("add", "success")}


def test_without_a_meter_provider_nothing_is_recorded_anywhere(provider: ScriptedProvider, runtime: Runtime) -> None:
    sink = MetricSink()
    assert not sink.enabled  # the API's default provider records nothing
    provider.add(use_tools(call("host_armed", {})), say("Done."))
    result = runtime.run("ask the host", tools=[C.host_armed]).result(30)
    assert result.messages[2].content == '{"ok": true, "data": false}'  # the host has no TurnMeter


def test_with_a_meter_provider_the_hosts_record(measured: Runtime, provider: ScriptedProvider) -> None:
    provider.add(use_tools(call("host_armed", {})), say("Done."))
    result = measured.run("ask the host", tools=[C.host_armed]).result(30)
    assert result.messages[2].content == '{"ok": true, "data": true}'
