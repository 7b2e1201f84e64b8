"""OpenTelemetry metrics, recorded as plain data where turns run and recorded into the owner's
MeterProvider, as spans are (``spans``, ``export``).

Each TurnHost's ``METRICS`` (a ``Recorder``) takes what its turns do, read off the decisions
their TurnActors carry out (``TurnMeter``, beside ``TurnTrace``), as plain ``Point``s, and
the host sends them to the Runtime's process in a ``MetricBatch`` after each message it
handles that made any (as it sends finished spans); there ``MetricSink`` records them
into the instruments of the meter ``greenroom`` of the configured ``MeterProvider``. The
instruments, their units and attributes (``docs/metrics.md``):

- ``gen_ai.client.token.usage`` (histogram, ``{token}``), one point per LLM request and
  ``gen_ai.token.type`` (``input``, ``output``), and ``gen_ai.client.operation.duration``
  (histogram, ``s``), from the request to its answer, retries included, with ``error.type``
  when it failed; both with ``gen_ai.operation.name`` (``chat``), ``gen_ai.provider.name``
  (and ``gen_ai.system``, its name before semantic conventions 1.37),
  ``gen_ai.request.model``, ``server.address``, ``server.port``. A request aborted by a
  stop has no answer and is not recorded;
- ``gen_ai.execute_tool.duration`` (histogram, ``s``): each call that ran, from its start to
  its result, with ``gen_ai.operation.name`` (``execute_tool``), ``gen_ai.tool.name``,
  ``greenroom.tool.outcome`` and ``error.type`` (``tool_error``) when it failed;
- ``greenroom.turns.live`` and ``greenroom.turns.waiting`` (gauges, ``{turn}``): turns
  running or paused in this runtime's hosts, and those paused for approval;
  ``greenroom.approval.oldest_wait`` (gauge, ``s``): how long the longest current wait has
  lasted; ``greenroom.approval.wait.duration`` (histogram, ``s``): each pause for approval,
  when it ends, with ``greenroom.approval.ended_by`` (``decision``, ``stop``, ``cancel``);
- ``greenroom.turn.interruptions`` (counter, ``{interruption}``): stops and cancels of
  turns and stops of single calls, with ``greenroom.interruption.kind`` (``stop``,
  ``cancel``, ``stop_tool``) and ``greenroom.cause`` (``user``, ``parent``, ``shutdown``,
  ``grace_expired``).

No cost when no MeterProvider is configured: a Runtime arms recording in the processes of
its tree as it forks them (``MetricSink.forking``), only when a provider was given or the
global one is an SDK provider when the Runtime is created; otherwise no TurnMeter exists
and no point is made or sent.
No message contents, arguments, reasons or turn ids become attributes.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from messages import Finish, LLMCompleted, LLMFailed, ToolFinished, TurnStarted, TurnState

from ..turn.decisions import Decision, Emit, Interrupt, Spawn, Stream

__all__ = ["METRICS", "MetricBatch", "MetricSink", "Point", "Recorder", "TurnMeter", "armed", "armed_while"]

Attributes = tuple[tuple[str, Any], ...]
Point = tuple[str, float, Attributes]  # (instrument, value, attributes); gauges: ("~gauge", slot, state)

_armed = False


@contextmanager
def armed_while(on: bool) -> Iterator[None]:
    """Record metrics in the processes forked in the block (they keep the flag), if ``on``."""
    global _armed
    before, _armed = _armed, on or _armed
    try:
        yield
    finally:
        _armed = before


def armed() -> bool:
    """Whether this process records metrics (a host forked while its Runtime armed them)."""
    return _armed


@dataclass
class MetricBatch:
    """Points a TurnHost recorded, and its turns live and waiting now (sent to the owner)."""

    slot: int
    points: list[Point]
    live: int
    waiting: list[float] = field(default_factory=list)  # when each waiting turn began to wait


class Recorder:
    """A host's points waiting to be sent, and its live and waiting turns. Actor thread only."""

    def __init__(self) -> None:
        self.points: list[Point] = []
        self.live: set[str] = set()
        self.waiting: dict[str, float] = {}
        self.dirty = False

    def add(self, name: str, value: float, attributes: dict[str, Any]) -> None:
        self.points.append((name, value, tuple(sorted(attributes.items()))))
        self.dirty = True

    def take(self, slot: int) -> MetricBatch | None:
        """What to send now, or None if nothing changed."""
        if not self.dirty:
            return None
        self.dirty = False
        batch = MetricBatch(slot, self.points, len(self.live), sorted(self.waiting.values()))
        self.points = []
        return batch


METRICS = Recorder()


def _chat_attributes(request: Any) -> dict[str, Any]:
    p = request.provider
    url = urlsplit(p.base_url)
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": p.api,
        "gen_ai.system": p.api,
        "gen_ai.request.model": p.model,
        "server.address": url.hostname or "",
        "server.port": url.port or (443 if url.scheme == "https" else 80),
    }


class TurnMeter:
    """What one turn contributes to the metrics, read off its decisions (see the module docstring)."""

    def __init__(self, state: TurnState, recorder: Recorder) -> None:
        self.turn_id = state.turn_id
        self.recorder = recorder
        self.streams: dict[str, tuple[float, dict[str, Any]]] = {}
        self.calls: dict[str, float] = {}
        self.marked = {m.kind for m in (state.stop, state.cancel) if m is not None}
        self.paused_at: float | None = None
        if state.phase not in ("created", "finished"):  # recovered
            recorder.live.add(self.turn_id)
            if state.phase == "awaiting_approval":
                self._pause(state.waiting_since or time.time())
            recorder.dirty = True

    @classmethod
    def of(cls, state: TurnState, recorder: Recorder | None = None) -> TurnMeter | None:
        """The meter of a turn in this host, or None when metrics are not armed."""
        return cls(state, recorder or METRICS) if _armed else None

    def received(self, message: Any) -> None:
        """An input the turn is about to handle: the answer of an LLM request ends it."""
        if not isinstance(message, (LLMCompleted, LLMFailed)):
            return
        started = self.streams.pop(message.stream_id, None)
        if started is None:
            return
        begun, attributes = started
        if isinstance(message, LLMFailed):
            attributes = {**attributes, "error.type": message.error_type}
        self.recorder.add("gen_ai.client.operation.duration", time.monotonic() - begun, attributes)
        usage = message.usage if isinstance(message, LLMCompleted) else None
        if usage is not None:
            self.recorder.add(
                "gen_ai.client.token.usage", usage.prompt_tokens, {**attributes, "gen_ai.token.type": "input"}
            )
            self.recorder.add(
                "gen_ai.client.token.usage", usage.completion_tokens, {**attributes, "gen_ai.token.type": "output"}
            )

    def observe(self, decisions: list[Decision], state: TurnState) -> None:
        """Record what ``decisions`` do (after the turn's rules made them)."""
        r = self.recorder
        for marker in (state.stop, state.cancel):
            if marker is not None and marker.kind not in self.marked:
                self.marked.add(marker.kind)
                r.add("greenroom.turn.interruptions", 1, _interruption(marker.kind, marker.cause))
        for d in decisions:
            if isinstance(d, Stream):
                self.streams[d.request.stream_id] = (time.monotonic(), _chat_attributes(d.request))
            elif isinstance(d, Spawn):
                self.calls.setdefault(d.run.call.id, time.monotonic())
            elif isinstance(d, Interrupt) and d.message.mode == "stop" and state.stop is None and state.cancel is None:
                r.add("greenroom.turn.interruptions", 1, _interruption("stop_tool", d.message.cause))
            elif isinstance(d, Emit):
                self._emitted(d.event, state)

    def _emitted(self, event: Any, state: TurnState) -> None:
        r = self.recorder
        if self.paused_at is not None and not (
            isinstance(event, Finish) and event.finish_reason == "awaiting_approval"
        ):
            ended_by = "stop" if state.stop is not None else "cancel" if state.cancel is not None else "decision"
            r.add(
                "greenroom.approval.wait.duration",
                time.time() - self.paused_at,
                {"greenroom.approval.ended_by": ended_by},
            )
            self.paused_at = None
            r.waiting.pop(self.turn_id, None)
            r.dirty = True
        if isinstance(event, TurnStarted):
            r.live.add(self.turn_id)
            r.dirty = True
        elif isinstance(event, ToolFinished):
            begun = self.calls.pop(event.call_id, None)
            if begun is not None:
                attributes = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": event.name,
                    "greenroom.tool.outcome": event.outcome,
                }
                if event.outcome == "failed":
                    attributes["error.type"] = "tool_error"
                r.add("gen_ai.execute_tool.duration", time.monotonic() - begun, attributes)
        elif isinstance(event, Finish):
            if event.terminal:
                r.live.discard(self.turn_id)
                r.waiting.pop(self.turn_id, None)
                r.dirty = True
            else:
                self._pause(state.waiting_since or time.time())

    def _pause(self, since: float) -> None:
        self.paused_at = since
        self.recorder.waiting[self.turn_id] = since
        self.recorder.dirty = True


def _interruption(kind: str, cause: str) -> dict[str, Any]:
    return {"greenroom.interruption.kind": kind, "greenroom.cause": cause}


_HISTOGRAMS = {
    "gen_ai.client.token.usage": ("{token}", "Number of input and output tokens used.", [
        1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]),
    "gen_ai.client.operation.duration": ("s", "GenAI operation duration.", [
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]),
    "gen_ai.execute_tool.duration": ("s", "The duration of a single tool execution.", None),
    "greenroom.approval.wait.duration": ("s", "How long a turn waited for a person's decisions.", None),
}  # fmt: skip


class MetricSink:
    """The owner's side: records the hosts' points into a MeterProvider's instruments.

    ``meter_provider`` (default: the global one, looked at now) must be an SDK
    ``MeterProvider`` for anything to be recorded; with one, the processes forked inside
    ``forking()`` record. ``put`` runs on the pump thread and only records."""

    def __init__(self, meter_provider: Any = None) -> None:
        self._provider = meter_provider if meter_provider is not None else _global_provider()
        self._lock = threading.Lock()
        self._instruments: dict[str, Any] = {}
        self._hosts: dict[int, MetricBatch] = {}
        if self._provider is not None:
            self._meter()  # the gauges read 0 until a host reports

    @property
    def enabled(self) -> bool:
        return self._provider is not None

    def forking(self) -> Any:
        """A block in which the Runtime's tree is forked: armed if this sink records."""
        return armed_while(self._provider is not None)

    def _meter(self) -> Any:
        if "meter" not in self._instruments:
            from .export import _version

            meter = self._provider.get_meter("greenroom", _version())
            self._instruments["meter"] = meter
            for name, (unit, description, buckets) in _HISTOGRAMS.items():
                extra = {"explicit_bucket_boundaries_advisory": buckets} if buckets else {}
                self._instruments[name] = meter.create_histogram(name, unit=unit, description=description, **extra)
            self._instruments["greenroom.turn.interruptions"] = meter.create_counter(
                "greenroom.turn.interruptions", unit="{interruption}", description="Stops and cancels, by cause."
            )
            gauges = {
                "greenroom.turns.live": ("{turn}", "Turns running or paused.", self._live),
                "greenroom.turns.waiting": ("{turn}", "Turns paused for approval.", self._waiting),
                "greenroom.approval.oldest_wait": ("s", "The age of the longest current wait.", self._oldest),
            }
            for name, (unit, description, read) in gauges.items():
                meter.create_observable_gauge(name, callbacks=[read], unit=unit, description=description)
        return self._instruments["meter"]

    def put(self, batch: MetricBatch) -> None:
        """Record one host's batch (the pump thread)."""
        if self._provider is None:
            return
        with self._lock:
            self._meter()
            self._hosts[batch.slot] = batch
            for name, value, attributes in batch.points:
                instrument = self._instruments.get(name)
                if instrument is None:
                    continue
                if name == "greenroom.turn.interruptions":
                    instrument.add(int(value), dict(attributes))
                else:
                    instrument.record(value, dict(attributes))

    def _observe(self, value: float) -> list[Any]:
        from opentelemetry.metrics import Observation

        return [Observation(value)]

    def _live(self, options: Any) -> list[Any]:
        with self._lock:
            return self._observe(sum(b.live for b in self._hosts.values()))

    def _waiting(self, options: Any) -> list[Any]:
        with self._lock:
            return self._observe(sum(len(b.waiting) for b in self._hosts.values()))

    def _oldest(self, options: Any) -> list[Any]:
        with self._lock:
            since = [w for b in self._hosts.values() for w in b.waiting]
        return self._observe(max(0.0, time.time() - min(since)) if since else 0.0)


def _global_provider() -> Any:
    """The global MeterProvider if it is an SDK one (the API's default records nothing)."""
    api = sys.modules.get("opentelemetry.metrics")
    if api is None:
        return None
    provider = api.get_meter_provider()
    sdk = sys.modules.get("opentelemetry.sdk.metrics")
    if sdk is None or not isinstance(provider, sdk.MeterProvider):
        return None
    return provider
