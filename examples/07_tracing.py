"""Tracing with OpenTelemetry: a turn's spans, exported by the process that owns the Runtime.

pip install -e '.[otel]' opentelemetry-sdk    (in a checkout of greenroom)
python examples/07_tracing.py

The TracerProvider is configured here, in this process only: the turn runs in other
processes (its host, a tool process), which record its spans and send them back here. An
in-memory exporter keeps the example offline; use a BatchSpanProcessor with an OTLP
exporter for a real backend.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from actors import Runtime, tool
from actors.testing import ScriptedProvider, call, say, use_tools


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(requires_approval=True)
def send_email(to: str, subject: str) -> str:
    """Send an email (needs approval)."""
    return f"sent {subject!r} to {to}"


def detail(span: ReadableSpan) -> str:
    a = span.attributes or {}
    op = a.get("gen_ai.operation.name")
    if op == "execute_tool":
        text = f"{a.get('greenroom.tool.outcome')}"
    else:
        reasons = a.get("gen_ai.response.finish_reasons") or ["?"]
        reason = a.get("greenroom.turn.finish_reason") or reasons[0]  # type: ignore[index]
        tokens = f"{a.get('gen_ai.usage.input_tokens')} in / {a.get('gen_ai.usage.output_tokens')} out tokens"
        text = f"{reason}, {tokens}"
    if span.status.description:
        text += f", error: {span.status.description}"
    return f"  [{text}]" if op else ""


def print_tree(spans: Sequence[ReadableSpan]) -> None:
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    children: dict[int | None, list[ReadableSpan]] = {}
    for s in spans:
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in by_id else None
        children.setdefault(parent, []).append(s)

    def show(span: ReadableSpan, depth: int) -> None:
        print("  " * depth + span.name + detail(span))
        for e in span.events:
            what = " ".join(str(v) for v in (e.attributes or {}).values())
            print("  " * (depth + 1) + f"· {e.name}" + (f"  {what}" if what else ""))
        mine = children.get(span.context.span_id if span.context else 0, [])
        for child in sorted(mine, key=lambda c: c.start_time or 0):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)


def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # the Runtime traces into the global provider by default

    script = [
        use_tools(call("add", {"a": 2, "b": 3}), call("send_email", {"to": "ops@example.com", "subject": "5"})),
        say("Added, and sent."),
    ]
    with ScriptedProvider(script) as model, Runtime(model.provider()) as runtime:
        with trace.get_tracer("example").start_as_current_span("handle request"):  # the turn's parent
            turn = runtime.run("Add 2 and 3, then mail the result to ops.", tools=[add, send_email])
            print(turn.result(60).finish_reason, [r.call_id for r in turn.result().pending_approvals])
            turn.approve("call_2")
            print(turn.result(60).finish_reason, "->", turn.result().text)
    # close() has exported every span the turn's processes sent
    spans = exporter.get_finished_spans()
    print_tree(spans)
    print("one trace:", len({s.context.trace_id for s in spans if s.context is not None}) == 1)


if __name__ == "__main__":
    main()
