"""OpenTelemetry spans as plain data, recorded without the OpenTelemetry package.

A message that carries a ``trace_context`` (``StartTurn``, ``StreamChat``, ``RunTool``: a
W3C carrier, ``{"traceparent": ..., "tracestate": ...}``, or ``{}`` for a new trace) asks
for its work to be traced; a message without one is not, and costs nothing here. The
``Recorder`` of a process (``RECORDER``) records spans as ``SpanRecord``s with real W3C
ids; a TurnHost sends those that finished to the Runtime's process (``internal.SpanBatch``),
where ``telemetry_export`` hands them, ids unchanged, to the configured ``TracerProvider``.

- a span is recorded only when its parent context is sampled (or new);
- no message contents, tool arguments, results or reasons are recorded: names, ids,
  counts, outcomes and error types only;
- in a tool's process, ``attach(trace_context)`` makes the call's span the current one,
  so the tool's own instrumentation sees the right parent. It and ``current_context`` are
  the only code here that imports ``opentelemetry``, guarded: without it, they do nothing.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from messages import StreamChat, Usage

__all__ = [
    "RECORDER",
    "Recorder",
    "Span",
    "SpanRecord",
    "TraceContext",
    "attach",
    "chat_span",
    "current_context",
    "end_chat",
]

TraceContext = dict[str, str]
SpanKind = Literal["internal", "client"]

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@dataclass
class SpanRecord:
    """A finished span as plain data: what travels to the Runtime's process."""

    name: str
    kind: SpanKind
    trace_id: int
    span_id: int
    parent_id: int | None  # None: the root of its trace
    remote_parent: bool
    trace_state: str
    start_ns: int
    end_ns: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    error: tuple[str, str] | None = None  # (error.type, description): status ERROR


class Span:
    """An open span; ``end()`` hands it to its recorder (once)."""

    __slots__ = ("_recorder", "record")

    def __init__(self, record: SpanRecord, recorder: Recorder) -> None:
        self.record = record
        self._recorder = recorder

    def set(self, key: str, value: Any) -> None:
        if value is not None and not self.ended:
            self.record.attributes[key] = value

    def event(self, name: str, **attributes: Any) -> None:
        if not self.ended:
            attrs = {k: v for k, v in attributes.items() if v is not None}
            self.record.events.append((name, time.time_ns(), attrs))

    def fail(self, error_type: str, description: str) -> None:
        """Status ERROR with ``description``, and ``error.type``."""
        if not self.ended:
            self.record.error = (error_type, description)
            self.record.attributes["error.type"] = error_type

    def context(self) -> TraceContext:
        """The carrier a child of this span travels with."""
        r = self.record
        carrier = {"traceparent": f"00-{r.trace_id:032x}-{r.span_id:016x}-01"}
        if r.trace_state:
            carrier["tracestate"] = r.trace_state
        return carrier

    @property
    def ended(self) -> bool:
        return self.record.end_ns != 0

    def end(self) -> None:
        if not self.ended:
            self.record.end_ns = max(time.time_ns(), self.record.start_ns)
            self._recorder._finished(self.record)


def _parse(carrier: TraceContext) -> tuple[int, int, bool, str] | None:
    """(trace id, parent span id, sampled, tracestate) of a carrier's valid traceparent."""
    m = _TRACEPARENT.match(carrier.get("traceparent", "").strip().lower())
    if m is None or m.group(1) == "ff":
        return None
    trace_id, span_id = int(m.group(2), 16), int(m.group(3), 16)
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id, bool(int(m.group(4), 16) & 1), carrier.get("tracestate", "")


def _new_id(bits: int) -> int:
    while True:
        value = random.getrandbits(bits)  # the random module reseeds itself in a forked child
        if value:
            return value


class Recorder:
    """The finished spans of this process, waiting to be sent. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.finished: list[SpanRecord] = []

    def start(
        self,
        name: str,
        parent: TraceContext | None,
        attributes: dict[str, Any],
        kind: SpanKind = "internal",
        remote: bool = True,
    ) -> Span | None:
        """A new span, child of ``parent`` (a new trace for ``{}`` or an unreadable one);
        None when ``parent`` is None or not sampled: nothing is recorded then. ``remote``:
        the parent span is in another process."""
        if parent is None:
            return None
        parsed = _parse(parent)
        if parsed is not None and not parsed[2]:
            return None
        trace_id, parent_id, state = (parsed[0], parsed[1], parsed[3]) if parsed else (_new_id(128), None, "")
        record = SpanRecord(
            name, kind, trace_id, _new_id(64), parent_id, remote and parent_id is not None, state, time.time_ns(),
            attributes={k: v for k, v in attributes.items() if v is not None},
        )  # fmt: skip
        return Span(record, self)

    def _finished(self, record: SpanRecord) -> None:
        with self._lock:
            self.finished.append(record)

    def take(self) -> list[SpanRecord]:
        """Every span finished since the last call."""
        with self._lock:
            taken, self.finished = self.finished, []
        return taken

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self.finished = []


RECORDER = Recorder()
os.register_at_fork(after_in_child=RECORDER._forget)  # a forked process sends only its own spans


# -- chat spans (the LLMActor) ---------------------------------------------------------------


def chat_span(request: StreamChat) -> Span | None:
    """The ``chat {model}`` span of one LLM request (None when it is not traced)."""
    if request.trace_context is None:
        return None
    p = request.provider
    url = urlsplit(p.base_url)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": p.api,
        "gen_ai.system": p.api,  # the name before semantic conventions 1.37, still read by many backends
        "gen_ai.request.model": p.model,
        "gen_ai.request.max_tokens": p.max_tokens,
        "gen_ai.request.stream": True,
        "server.address": url.hostname,
        "server.port": url.port or (443 if url.scheme == "https" else 80),
        "greenroom.stream.id": request.stream_id,
    }
    for name in ("temperature", "top_p", "top_k", "frequency_penalty", "presence_penalty", "seed"):
        value = p.params.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[f"gen_ai.request.{name}"] = value
    return RECORDER.start(f"chat {p.model}", request.trace_context, attributes, kind="client", remote=False)


def end_chat(span: Span | None, out: tuple[Any, ...] | None) -> None:
    """Record a stream's output on its span: a retry (an event), its end (``done``,
    ``failed``), or None for an abort (the turn was stopped)."""
    if span is None:
        return
    if out is None:
        span.set("greenroom.stream.aborted", True)
    elif out[0] == "retry":
        return span.event("greenroom.retry", attempt=out[1], delay=out[2])
    elif out[0] == "done":
        span.set("gen_ai.response.finish_reasons", [out[2]])
        usage: Usage | None = out[3]
        if usage is not None:
            span.set("gen_ai.usage.input_tokens", usage.prompt_tokens)
            span.set("gen_ai.usage.output_tokens", usage.completion_tokens)
    else:
        span.fail(out[1], out[2])
    span.end()


# -- a tool's own instrumentation ------------------------------------------------------------


@contextmanager
def attach(trace_context: TraceContext | None) -> Iterator[None]:
    """Make the span of ``trace_context`` the current OpenTelemetry span of this thread or
    task while the block runs, so spans the tool starts itself are its children."""
    parsed = _parse(trace_context) if trace_context else None
    otel = _opentelemetry() if parsed is not None else None
    if otel is None or parsed is None:
        yield
        return
    context, trace = otel
    state = trace.TraceState.from_header([parsed[3]]) if parsed[3] else None
    parent = trace.SpanContext(parsed[0], parsed[1], is_remote=True, trace_flags=trace.TraceFlags(1), trace_state=state)
    token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(parent)))
    try:
        yield
    finally:
        context.detach(token)


def current_context(fallback: TraceContext | None) -> TraceContext | None:
    """The carrier of this thread's current OpenTelemetry span, when there is one that is
    valid; else ``fallback`` (a sub-agent's turn is a child of its tool's span)."""
    if fallback is None:
        return None
    otel = _opentelemetry()
    if otel is None:
        return fallback
    span = otel[1].get_current_span().get_span_context()
    if not span.is_valid:
        return fallback
    carrier = {"traceparent": f"00-{span.trace_id:032x}-{span.span_id:016x}-{int(span.trace_flags):02x}"}
    if span.trace_state:
        carrier["tracestate"] = span.trace_state.to_header()
    return carrier


def _opentelemetry() -> tuple[Any, Any] | None:
    try:
        from opentelemetry import context, trace
    except ImportError:
        return None
    return context, trace
