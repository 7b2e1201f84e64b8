"""The tool-call part of a turn's rules: each call of a response gets exactly one end.

A call of an unknown tool fails with ``Tool '<name>' not found``; arguments that are not a
JSON object (or nest deeper than ``text.MAX_DEPTH``) fail with a message saying what is
wrong; a gated call waits for approval; any other call runs at once. Results are recorded
once (the first end wins), and the batch's tool messages are appended in the order of the
assistant's ``tool_calls`` when every call has ended.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from messages import CallState, ChatMessage, RunTool, ToolApprovalRequest, ToolCallStarted, ToolFinished, ToolSpec
from messages.tool import ToolOutcome

from ..tools.definition import error_result
from .decisions import Decision, Persist, Spawn
from .sanitize import TooDeep, safe_json

if TYPE_CHECKING:
    from .rules import TurnRules

__all__ = ["CallRules"]


class CallRules:
    """Mixed into ``TurnRules``."""

    def _classify(self: TurnRules, cs: CallState) -> list[Decision]:
        """Decide a fresh call's fate: fails at once, waits for approval, or runs now."""
        name = cs.call.name
        spec = self._specs.get(name)
        if spec is None:
            return self._done(cs, "failed", f"Tool '{name}' not found")
        raw = (cs.call.arguments or "").strip() or "{}"
        try:
            args = safe_json(json.loads(raw))
        except TooDeep as exc:
            return self._done(cs, "failed", error_result(f"Invalid arguments for tool '{name}': {exc}"))
        except (ValueError, RecursionError) as exc:
            return self._done(
                cs, "failed", error_result(f"Invalid arguments for tool '{name}': not valid JSON ({exc})")
            )
        if not isinstance(args, dict):
            got = type(args).__name__
            return self._done(
                cs, "failed", error_result(f"Invalid arguments for tool '{name}': expected a JSON object, got {got}")
            )
        cs.arguments = args
        if self._needs_approval(spec, args):
            cs.status = "pending_approval"
            request = dict(call_id=cs.call.id, name=name, arguments=args, description=spec.description)
            return [self._emit(ToolApprovalRequest, **request)]
        return self._spawn(cs, spec)

    def _spawn(self: TurnRules, cs: CallState, spec: ToolSpec) -> list[Decision]:
        s = self.state
        cs.status = "running"
        cs.attempt += 1
        run = RunTool(
            turn_id=s.turn_id,
            root_turn_id=s.root_turn_id,
            call=cs.call,
            spec=spec,
            arguments=cs.arguments or {},
            idempotency_key=f"{s.turn_id}:{cs.call.id}",
            attempt=cs.attempt,
            stop_grace=s.options.stop_grace,
            heartbeat=s.options.heartbeat if spec.requires else None,
            provider=s.provider,
        )
        started = dict(call_id=cs.call.id, name=cs.call.name, arguments=cs.arguments, round=s.round)
        return [Spawn(run), self._emit(ToolCallStarted, **started)]

    def _done(self: TurnRules, cs: CallState, outcome: ToolOutcome, content: str) -> list[Decision]:
        cs.status, cs.outcome, cs.content = "done", outcome, content
        return [self._emit(ToolFinished, call_id=cs.call.id, name=cs.call.name, outcome=outcome, content=content)]

    def _append_tool_messages(self: TurnRules) -> None:
        s = self.state
        for cs in s.batch or ():
            s.messages.append(ChatMessage.tool(cs.content or "", cs.call.id, name=cs.call.name))
        s.batch = None
        s.paused = s.commit_pending = False
        s.approval_deadline = s.waiting_since = None

    def _on_tool_result(self: TurnRules, call_id: str, outcome: ToolOutcome, content: str) -> list[Decision]:
        s = self.state
        cs = s.call(call_id)
        if s.phase == "finished" or cs is None or cs.status != "running":
            return []  # a call that was stopped, or a duplicate: the first end wins
        return self._done(cs, outcome, content) + [Persist("tool_result")] + self._advance()

    def _answered_before(self: TurnRules, call_id: str) -> bool:
        """Whether ``call_id`` is a call of an earlier round (it has its tool message)."""
        return any(call_id in [c.id for c in m.tool_calls or ()] for m in self.state.messages)
