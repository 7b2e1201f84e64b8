"""The Runtime's side of tracing: whether to trace a turn, and exporting what comes back.

``SpanSink.trace_context()`` is asked at each ``run()``: with no ``TracerProvider``
configured (the API's default proxy or no-op one, or ``opentelemetry`` never imported) it
answers None, so the turn carries no context and nothing is recorded anywhere; otherwise the
W3C carrier of the caller's current span (``{}`` when there is none: the turn is a root),
or None when that span is not sampled.

``SpanSink.put(records)`` takes the spans a host sent (``SpanBatch``, on the pump thread) and
a thread of its own hands them, with their own trace and span ids, times, attributes,
events and status, to the provider's span processors (``on_end``; ``on_start`` is not
called for them), as ``opentelemetry.sdk.trace.ReadableSpan``s under the instrumentation
scope ``greenroom`` and the provider's resource. That takes the SDK's ``TracerProvider``
(or a subclass); a provider of another kind is not traced. ``close()`` exports what is
queued (bounded) and stops the thread.

This module imports ``opentelemetry`` only when it is already imported (or a provider was
given), inside its functions: greenroom works without the ``otel`` extra.
"""

from __future__ import annotations

import functools
import queue
import sys
import threading
from typing import Any

from ..logs import logger
from .spans import SpanRecord, TraceContext

__all__ = ["SpanSink"]


log = logger("greenroom.telemetry")


class SpanSink:
    """One Runtime's tracing: ``tracer_provider`` or, when None, the global one at each use."""

    def __init__(self, tracer_provider: Any = None) -> None:
        self._given = tracer_provider
        self._queue: queue.SimpleQueue[list[SpanRecord] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def provider(self) -> Any:
        """The TracerProvider that takes this runtime's spans, or None."""
        provider = self._given
        if provider is None:
            api = sys.modules.get("opentelemetry.trace")
            if api is None:
                return None  # never imported: nothing can have been configured
            provider = api.get_tracer_provider()
        processor = getattr(provider, "_active_span_processor", None)
        if processor is None or getattr(provider, "_disabled", False):
            return None
        return provider

    def trace_context(self) -> TraceContext | None:
        """What a new turn carries: see the module docstring."""
        if self.provider() is None:
            return None
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        current = trace.get_current_span().get_span_context()
        if current.is_valid and not current.trace_flags.sampled:
            return None
        carrier: TraceContext = {}
        TraceContextTextMapPropagator().inject(carrier)
        return carrier

    def put(self, records: list[SpanRecord]) -> None:
        """Queue ``records`` for export (never blocks)."""
        if not records:
            return
        with self._lock:
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="greenroom-spans", daemon=True)
                self._thread.start()
        self._queue.put(records)

    def close(self, timeout: float = 1.0) -> None:
        """Export what is queued, within ``timeout``, and stop."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            records = self._queue.get()
            if records is None:
                return
            provider = self.provider()
            if provider is None:
                continue
            try:
                export(provider, records)
            except Exception:  # an exporter's failure must not end the thread
                log().exception("exporting %d span(s) failed", len(records))


def export(provider: Any, records: list[SpanRecord]) -> None:
    """Hand ``records`` to ``provider``'s span processors as finished spans."""
    from opentelemetry.attributes import BoundedAttributes
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

    scope = InstrumentationScope("greenroom", _version())
    processor = provider._active_span_processor
    sampled = TraceFlags(TraceFlags.SAMPLED)
    for r in records:
        state = TraceState.from_header([r.trace_state]) if r.trace_state else None
        context = SpanContext(r.trace_id, r.span_id, is_remote=False, trace_flags=sampled, trace_state=state)
        parent = None
        if r.parent_id is not None:
            parent = SpanContext(r.trace_id, r.parent_id, r.remote_parent, trace_flags=sampled, trace_state=state)
        status = Status(StatusCode.ERROR, r.error[1]) if r.error is not None else Status(StatusCode.UNSET)
        span = ReadableSpan(
            r.name,
            context=context,
            parent=parent,
            resource=provider.resource,
            attributes=BoundedAttributes(attributes=r.attributes, immutable=True),  # as the SDK cleans them
            events=[Event(name, attributes, timestamp) for name, timestamp, attributes in r.events],
            kind=SpanKind.CLIENT if r.kind == "client" else SpanKind.INTERNAL,
            status=status,
            start_time=r.start_ns,
            end_time=r.end_ns,
            instrumentation_scope=scope,
        )
        processor.on_end(span)


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("greenroom")
    except PackageNotFoundError:
        return "0"
