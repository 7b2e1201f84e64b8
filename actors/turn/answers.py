"""The model's part of a turn's rules: one stream per round, its messages in order.

A round starts one stream; its messages are applied in ``seq`` order whatever order they
arrive in (early ones wait, duplicates and messages of an aborted stream change nothing).
Deltas become ``TextDelta`` events; a completed response joins the history and either ends
the turn (no tool calls) or opens a batch whose calls are classified at once (``calls``);
a failed or lost stream keeps the text it had produced and ends the turn with an ``Error``,
or ``cancelled`` when a cancel was waiting for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from messages import CallState, ChatMessage, LLMCompleted, LLMDeltas, LLMRetrying, StreamChat, TextDelta, TurnRetrying

from .decisions import Decision, Persist, SetTimer, Stream
from .sanitize import safe_message, safe_text

if TYPE_CHECKING:
    from .rules import TurnRules

__all__ = ["AnswerRules"]


class AnswerRules:
    """Mixed into ``TurnRules``."""

    def _start_stream(self: TurnRules) -> list[Decision]:
        s = self.state
        s.streams += 1
        s.stream_id = f"{s.turn_id}/s{s.streams}"
        s.phase = "streaming"
        self._text, self._next_seq = "", 0
        self._early.clear()
        tools = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in s.tools]
        request = StreamChat(stream_id=s.stream_id, provider=s.provider, messages=list(s.messages), tools=tools)
        return [Stream(request)]

    def _on_stream_message(self: TurnRules, msg: Any) -> list[Decision]:
        s = self.state
        if s.phase != "streaming" or msg.stream_id != s.stream_id or msg.seq < self._next_seq:
            return []  # a stream we aborted or finished, or a duplicate
        self._early[msg.seq] = msg
        out: list[Decision] = []
        while self._next_seq in self._early and s.phase == "streaming":
            m = self._early.pop(self._next_seq)
            self._next_seq += 1
            if isinstance(m, LLMDeltas):
                text = safe_text(m.text)
                self._text += text
                out.append(self._emit(TextDelta, text=text))
            elif isinstance(m, LLMRetrying):
                out.append(self._emit(TurnRetrying, attempt=m.attempt, delay=m.delay, reason=m.reason))
            elif isinstance(m, LLMCompleted):
                out.extend(self._on_response(m))
            else:
                out.extend(self._on_stream_failed(m.error_type, m.message))
        return out

    def _on_stream_failed(self: TurnRules, error_type: str, message: str) -> list[Decision]:
        self._keep_partial_text()
        self.state.phase = "idle"
        if self.state.cancel is not None:
            return self._end("cancelled")
        return self._end("error", (error_type, message))

    def _keep_partial_text(self: TurnRules) -> None:
        """Completed work is kept: the text of a stream that ended early joins the history."""
        if self._text:
            self.state.messages.append(ChatMessage.assistant(self._text))
        self._text = ""
        self._early.clear()
        self.state.stream_id = None

    def _on_response(self: TurnRules, msg: LLMCompleted) -> list[Decision]:
        s = self.state
        if msg.usage is not None:
            s.usage = s.usage + msg.usage
        message = safe_message(msg.message)
        s.messages.append(message)
        s.stream_id = None
        s.phase = "idle"
        self._text = ""
        calls = message.tool_calls or []
        if not calls:
            return [Persist("llm_response")] + self._advance(answered=msg.finish_reason)
        s.batch = [CallState(call=c) for c in calls]
        out: list[Decision] = [Persist("llm_response")]
        if s.cancel is None:
            s.phase = "tools"
            for cs in s.batch:
                out.extend(self._classify(cs))
            if s.pending_approvals and s.options.approval_timeout is not None:
                s.approval_deadline = self._clock() + s.options.approval_timeout
                out.append(SetTimer("approval_timeout", s.options.approval_timeout, s.round))
        return out + self._advance()
