"""Tools for the tracing tests. Module level, so ToolActors import them by path."""

from __future__ import annotations

from typing import Any

from actors import ToolContext, tool


@tool
def seen_context() -> dict[str, Any]:
    """Say which trace context the call got, and what OpenTelemetry sees as the current span."""
    from opentelemetry import trace

    with trace.get_tracer("a tool's own instrumentation").start_as_current_span("inner") as inner:
        current = inner.get_span_context()  # no provider here: the parent's context, not recording
    return {
        "carrier": ToolContext.current().trace_context,
        "current": [f"{current.trace_id:032x}", f"{current.span_id:016x}"] if current.is_valid else None,
    }


@tool(requires={"sandbox": True})
def seen_context_placed() -> dict[str, Any]:
    """``seen_context`` placed on a sandbox node; also says which network namespace ran it."""
    import os

    return {**seen_context.fn(), "netns": os.readlink("/proc/self/ns/net")}
