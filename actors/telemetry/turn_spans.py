"""The spans of one turn, read off the decisions its TurnActor carries out.

A turn whose ``StartTurn`` carried a ``trace_context`` gets a ``TurnTrace`` in its host. It
changes nothing the rules decide: it watches each batch of decisions (and the state they
left) and records

- ``invoke_agent``: the turn, from its start in this host to its terminal ``Finish``
  (a turn recovered from the store gets a new one, a child of its first);
  events ``greenroom.approval.requested`` / ``granted`` / ``denied`` / ``resumed``,
  ``greenroom.stop.requested`` and ``greenroom.cancel.requested`` (with their cause),
  ``greenroom.turn.recovered`` and ``greenroom.turn.suspended``; status ERROR (with
  ``error.type``) when the turn ends with ``error``; a stop or a cancel is not an error;
- ``execute_tool {name}``: each call that runs, from its start to its ``ToolFinished``
  (status ERROR when it failed), and a call that failed before it could run (unknown
  tool, bad arguments), as a span of no duration.

The LLM request and the tool call carry their parent's context: ``Stream`` and ``Spawn``
decisions come out with ``trace_context`` set.
"""

from __future__ import annotations

import json
import re
from typing import Any

from messages import Error, Finish, RunTool, ToolApprovalRequest, ToolFinished, TurnEvent, TurnState

from ..turn.decisions import Decision, Emit, Persist, Spawn, Stream
from .spans import RECORDER, Recorder, Span, TraceContext

__all__ = ["TurnTrace"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][\w.]*$")


class TurnTrace:
    """The open spans of one traced turn in its host."""

    def __init__(self, span: Span, state: TurnState, recorder: Recorder) -> None:
        self.span = span
        self.recorder = recorder
        self.tools: dict[str, Span] = {}
        self.decided = {c.call.id for c in state.batch or () if c.decision is not None}
        self.marked = {m.kind for m in (state.stop, state.cancel) if m is not None}
        self.error: tuple[str, str] | None = None

    @classmethod
    def of(cls, state: TurnState, parent: TraceContext | None, recorder: Recorder = RECORDER) -> TurnTrace | None:
        """The trace of a turn starting in this host (``parent``: its ``StartTurn``'s context)
        or recovered (``parent``: its first span's, kept in its state); None if not traced.
        A new turn keeps its span's context in its state (persisted with it)."""
        p = state.provider
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": p.api,
            "gen_ai.system": p.api,
            "gen_ai.request.model": p.model,
            "greenroom.turn.id": state.turn_id,
            "greenroom.turn.parent_id": state.parent_turn_id,
            "greenroom.turn.root_id": state.root_turn_id,
        }
        span = recorder.start("invoke_agent", parent, attributes)
        if span is None:
            return None
        if state.phase == "created":
            state.trace_context = span.context()
        else:
            span.event("greenroom.turn.recovered", **{"greenroom.turn.round": state.round})
        return cls(span, state, recorder)

    def observe(self, decisions: list[Decision], state: TurnState) -> list[Decision]:
        """Record what ``decisions`` do; return them, the LLM request and tool calls with
        their trace context."""
        self._requests(state)
        out: list[Decision] = []
        for d in decisions:
            if isinstance(d, Stream):
                d = Stream(d.request.model_copy(update={"trace_context": self.span.context()}))
            elif isinstance(d, Spawn):
                d = Spawn(self._tool_started(d.run))
            elif isinstance(d, Emit):
                self._emitted(d.event)
            elif isinstance(d, Persist) and d.transition == "approvals_committed":
                self.span.event("greenroom.approval.resumed")
            out.append(d)
        return out

    def suspend(self) -> None:
        """The host goes away and leaves the turn to the store: end what is open."""
        if self.span.ended:
            return
        for span in self.tools.values():
            span.end()
        self.span.event("greenroom.turn.suspended")
        self.span.end()

    # -- what happened --------------------------------------------------------------------

    def _requests(self, state: TurnState) -> None:
        """Stop and cancel requests and approval decisions the last input recorded."""
        for marker in (state.stop, state.cancel):
            if marker is not None and marker.kind not in self.marked:
                self.marked.add(marker.kind)
                self.span.event(f"greenroom.{marker.kind}.requested", **{"greenroom.cause": marker.cause})
        for cs in state.batch or ():
            if cs.decision is not None and cs.call.id not in self.decided:
                self.decided.add(cs.call.id)
                name = "greenroom.approval.granted" if cs.decision == "approved" else "greenroom.approval.denied"
                self.span.event(name, **{"gen_ai.tool.call.id": cs.call.id, "gen_ai.tool.name": cs.call.name})

    def _emitted(self, event: TurnEvent) -> None:
        if isinstance(event, ToolApprovalRequest) and event.child_turn_id is None:
            self.span.event(
                "greenroom.approval.requested", **{"gen_ai.tool.call.id": event.call_id, "gen_ai.tool.name": event.name}
            )
        elif isinstance(event, ToolFinished):
            self._tool_finished(event)
        elif isinstance(event, Error) and event.error_type not in ("stopped", "cancelled"):
            self.error = (event.error_type, event.message)
        elif isinstance(event, Finish) and event.terminal:
            self._finished(event)

    def _finished(self, finish: Finish) -> None:
        span = self.span
        span.set("greenroom.turn.finish_reason", finish.finish_reason)
        span.set("greenroom.turn.rounds", finish.round)
        span.set("gen_ai.usage.input_tokens", finish.usage.prompt_tokens)
        span.set("gen_ai.usage.output_tokens", finish.usage.completion_tokens)
        if finish.finish_reason == "error":
            span.fail(*(self.error or ("error", "the turn ended with an error")))
        span.end()

    def _tool_started(self, run: RunTool) -> RunTool:
        spec = run.spec
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": spec.name,
            "gen_ai.tool.call.id": run.call.id,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": spec.description or None,
            "greenroom.tool.attempt": run.attempt,
        }
        span = self.recorder.start(f"execute_tool {spec.name}", self.span.context(), attributes, remote=False)
        if span is None:
            return run
        self.tools[run.call.id] = span
        return run.model_copy(update={"trace_context": span.context()})

    def _tool_finished(self, event: ToolFinished) -> None:
        span = self.tools.pop(event.call_id, None)
        if span is None:
            if event.outcome != "failed":
                return  # denied, or interrupted before it ran: the turn span tells
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.name}
            attributes["gen_ai.tool.call.id"] = event.call_id
            span = self.recorder.start(f"execute_tool {event.name}", self.span.context(), attributes, remote=False)
            if span is None:
                return
        span.set("greenroom.tool.outcome", event.outcome)
        if event.outcome == "failed":
            span.fail(*_tool_error(event.content))
        span.end()


def _tool_error(content: str) -> tuple[str, str]:
    """(error.type, description) of a failed call's tool message: the exception's class
    name when the message starts with one (``ValueError: ...``), else ``tool_error``."""
    try:
        data = json.loads(content)
        text = data["error"] if isinstance(data, dict) and isinstance(data.get("error"), str) else content
    except ValueError:
        text = content
    head, sep, _ = text.partition(": ")
    return (head if sep and _IDENTIFIER.match(head) else "tool_error"), text
