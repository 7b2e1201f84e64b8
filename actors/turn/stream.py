"""The model's stream of one round: started, its messages applied in ``seq`` order, ended.

Free functions ``(rules, message) -> decisions`` over a turn's ``Rules`` (``core``). A
stream's messages are applied in ``seq`` order (``assembly``); duplicates and messages of a
stream the turn no longer waits for change nothing; deltas become ``TextDelta`` events; a
failed, lost or aborted stream keeps the text it had produced (completed work is kept). A
response with tool calls opens a batch, each call classified at once (``running``).
"""

from __future__ import annotations

from messages import (
    CallState, ChatMessage, LLMCompleted, LLMDeltas, LLMRetrying, StopCause, StreamChat, TextDelta, TurnRetrying,
)  # fmt: skip

from .assembly import StreamAssembly, StreamMessage
from .core import Rules
from .decisions import Abort, Decision, Persist, SetTimer, Stream, StreamLost
from .running import classify_call
from .sanitize import safe_message, safe_text

__all__ = ["abort_stream", "keep_partial_text", "on_stream_lost", "on_stream_message", "start_stream"]


def start_stream(rules: Rules) -> list[Decision]:
    """The next model call; its start is recorded, so a turn recovered mid-stream says it
    asks again (``TurnRules.recover``)."""
    s = rules.state
    s.streams += 1
    s.stream_id = f"{s.turn_id}/s{s.streams}"
    s.phase = "streaming"
    rules.assembly = StreamAssembly(s.stream_id)
    tools = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in s.tools]
    chat = StreamChat(stream_id=s.stream_id, provider=s.provider, messages=list(s.messages), tools=tools)
    return [Persist("stream_started"), Stream(chat)]


def on_stream_message(rules: Rules, msg: StreamMessage) -> list[Decision]:
    assembly = rules.assembly
    if rules.state.phase != "streaming" or assembly is None:
        return []  # a stream we aborted or finished
    out: list[Decision] = []
    for m in assembly.accept(msg):
        if rules.state.phase != "streaming":
            break
        if isinstance(m, LLMDeltas):
            text = safe_text(m.text)
            assembly.add_text(text)
            out.append(rules.emit(TextDelta, text=text))
        elif isinstance(m, LLMRetrying):
            out.append(rules.emit(TurnRetrying, attempt=m.attempt, delay=m.delay, reason=m.reason))
        elif isinstance(m, LLMCompleted):
            out.extend(_on_response(rules, m))
        else:
            out.extend(_on_stream_failed(rules, m.error_type, m.message))
    return out


def on_stream_lost(rules: Rules, msg: StreamLost) -> list[Decision]:
    if msg.stream_id != rules.state.stream_id or rules.state.phase != "streaming":
        return []
    return _on_stream_failed(rules, "stream_lost", f"LLM stream lost: {msg.detail}")


def _on_stream_failed(rules: Rules, error_type: str, message: str) -> list[Decision]:
    keep_partial_text(rules)
    rules.state.phase = "idle"
    if rules.state.cancel is not None:
        return rules.end("cancelled")
    return rules.end("error", (error_type, message))


def keep_partial_text(rules: Rules) -> None:
    """Completed work is kept: the text of a stream that ended early joins the history."""
    text = rules.assembly.text if rules.assembly is not None else ""
    if text:
        rules.state.messages.append(ChatMessage.assistant(text))
    rules.assembly = None
    rules.state.stream_id = None


def abort_stream(rules: Rules, reason: str, cause: StopCause = "user") -> list[Decision]:
    """Abort the stream in flight, if any, keeping its text (the phase is the caller's to change)."""
    s = rules.state
    if s.phase != "streaming" or s.stream_id is None:
        return []
    abort = Abort(s.stream_id, reason, cause)
    keep_partial_text(rules)
    return [abort]


def _on_response(rules: Rules, msg: LLMCompleted) -> list[Decision]:
    s = rules.state
    if msg.usage is not None:
        s.usage = s.usage + msg.usage
    message = safe_message(msg.message)
    s.messages.append(message)
    s.stream_id, s.phase, rules.assembly = None, "idle", None
    calls = message.tool_calls or []
    if not calls:
        return [Persist("llm_response")] + rules.advance(answered=msg.finish_reason)
    s.batch = [CallState(call=c) for c in calls]
    out: list[Decision] = [Persist("llm_response")]
    if s.cancel is None:
        s.phase = "tools"
        for cs in s.batch:
            out.extend(classify_call(rules, cs))
        if s.pending_approvals and s.options.approval_timeout is not None:
            s.approval_deadline = rules.now() + s.options.approval_timeout
            out.append(SetTimer("approval_timeout", s.options.approval_timeout, s.round))
    return out + rules.advance()
