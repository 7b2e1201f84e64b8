"""OpenTelemetry: spans recorded as plain data where the work happens (``spans``,
``turn_spans`` in a TurnHost), exported by the owner's TracerProvider (``export``).

Runs in: every TurnHost and tool process (recording), the owner (exporting).

May import: ``turn`` (the decisions it watches), ``messages`` and the shared modules.

``from actors.telemetry import ...`` keeps the names of ``spans``.
"""

from .spans import (  # the names of the 0.1.0 module actors.telemetry
    RECORDER,
    Recorder,
    Span,
    SpanRecord,
    TraceContext,
    attach,
    chat_span,
    current_context,
    end_chat,
)

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
