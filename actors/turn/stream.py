"""The model's stream of one round: started, its messages applied in ``seq`` order, ended.

Free functions ``(rules, message) -> decisions`` over a turn's ``Rules`` (``core``). A
stream's messages are applied in ``seq`` order (``assembly``); duplicates and messages of a
stream the turn no longer waits for change nothing; deltas become ``TextDelta`` events; a
failed, lost or aborted stream keeps the text it had produced (completed work is kept),
and its usage as far as the provider had reported it (``LLMUsage``); a stream silent for
``TurnOptions.idle_timeout`` fails, saying so (``on_idle``). Usage counts against the turn's
budgets as it is reported (``budget``). A response with tool calls opens a batch, each call
classified at once (``running``), unless the turn is being stopped or cancelled.
"""

from __future__ import annotations

from messages import (
    CallState, ChatMessage, LLMCompleted, LLMDeltas, LLMRateLimited, LLMRetrying, LLMUsage, RateLimited, StopCause,
    StreamChat, TextDelta, TurnRetrying, Usage,
)  # fmt: skip

from .assembly import StreamAssembly, StreamMessage
from .core import Rules
from .decisions import Abort, Decision, Persist, SetTimer, Stream, StreamLost
from .running import classify_call, warn
from .sanitize import safe_message, safe_text

__all__ = ["abort_stream", "keep_partial", "on_idle", "on_stream_lost", "on_stream_message", "start_stream"]

IDLE = "idle_stream"  # the name of a stream's idle timer; its token is the stream's number


def start_stream(rules: Rules) -> list[Decision]:
    """The next model call; its start is recorded, so a turn recovered mid-stream says it
    asks again (``TurnRules.recover``)."""
    s = rules.state
    s.streams += 1
    s.stream_id = f"{s.turn_id}/s{s.streams}"
    s.phase = "streaming"
    rules.assembly = StreamAssembly(s.stream_id, rules.now())
    tools = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in s.tools]
    chat = StreamChat(stream_id=s.stream_id, provider=s.provider, messages=list(s.messages), tools=tools)
    out: list[Decision] = [Persist("stream_started"), Stream(chat)]
    if s.options.idle_timeout is not None:
        out.append(SetTimer(IDLE, s.options.idle_timeout, s.streams))
    return out


def on_stream_message(rules: Rules, msg: StreamMessage) -> list[Decision]:
    assembly = rules.assembly
    if rules.state.phase != "streaming" or assembly is None:
        return []  # a stream we aborted or finished
    out: list[Decision] = []
    for m in assembly.accept(msg):
        if rules.state.phase != "streaming":
            break
        assembly.alive_at = rules.now()
        if isinstance(m, LLMUsage):
            assembly.usage = m.usage
            out += warn(rules, m.usage)
            if rules.state.stop is not None:  # the budget is spent: the stream ends now
                return out + rules.advance()
        elif isinstance(m, LLMDeltas):
            text = safe_text(m.text)
            assembly.add_text(text)
            out.append(rules.emit(TextDelta, text=text))
        elif isinstance(m, LLMRetrying):
            out.append(rules.emit(TurnRetrying, attempt=m.attempt, delay=m.delay, reason=m.reason))
        elif isinstance(m, LLMRateLimited):  # a wait for the limit is not silence: idle counts after it
            assembly.alive_at = rules.now() + m.delay
            out.append(rules.emit(RateLimited, until=m.until, reason=m.reason))
        elif isinstance(m, LLMCompleted):
            out.extend(_on_response(rules, m))
        else:
            out.extend(_on_stream_failed(rules, m.error_type, m.message))
    return out


def on_stream_lost(rules: Rules, msg: StreamLost) -> list[Decision]:
    if msg.stream_id != rules.state.stream_id or rules.state.phase != "streaming":
        return []
    return _on_stream_failed(rules, "stream_lost", f"LLM stream lost: {msg.detail}")


def on_idle(rules: Rules, stream_number: int) -> list[Decision]:
    """The stream's idle timer: a stream silent for ``idle_timeout`` fails; one that spoke since
    has its timer set again for what is left."""
    s, assembly, limit = rules.state, rules.assembly, rules.state.options.idle_timeout
    if s.phase != "streaming" or assembly is None or stream_number != s.streams or limit is None:
        return []
    quiet = rules.now() - assembly.alive_at
    if quiet < limit:
        return [SetTimer(IDLE, limit - quiet, s.streams)]
    why = f"the model stream showed no sign of life for {limit:g} s (idle_timeout)"
    return [Abort(assembly.stream_id, why)] + _on_stream_failed(rules, "idle_timeout", why)


def _on_stream_failed(rules: Rules, error_type: str, message: str) -> list[Decision]:
    keep_partial(rules)
    rules.state.phase = "idle"
    if rules.state.cancel is not None:
        return rules.end("cancelled")
    return rules.end("error", (error_type, message))


def keep_partial(rules: Rules) -> None:
    """Completed work is kept: the text of a stream that ended early joins the history, and
    the usage its provider had reported is counted."""
    assembly, s = rules.assembly, rules.state
    text = assembly.text if assembly is not None else ""
    if text:
        s.messages.append(ChatMessage.assistant(text))
    if assembly is not None and assembly.usage is not None:
        _count(rules, assembly.usage)
    rules.assembly = None
    s.stream_id = None


def _count(rules: Rules, usage: Usage) -> None:
    s = rules.state
    s.usage = s.usage + usage
    s.cost += s.provider.cost(usage)


def abort_stream(rules: Rules, reason: str, cause: StopCause = "user") -> list[Decision]:
    """Abort the stream in flight, if any, keeping its text (the phase is the caller's to change)."""
    s = rules.state
    if s.phase != "streaming" or s.stream_id is None:
        return []
    abort = Abort(s.stream_id, reason, cause)
    keep_partial(rules)
    return [abort]


def _on_response(rules: Rules, msg: LLMCompleted) -> list[Decision]:
    s = rules.state
    usage = msg.usage if msg.usage is not None else rules.assembly.usage if rules.assembly is not None else None
    if usage is not None:  # the final report: it includes what was reported before
        _count(rules, usage)
    message = safe_message(msg.message)
    s.messages.append(message)
    s.stream_id, s.phase, rules.assembly = None, "idle", None
    out: list[Decision] = [Persist("llm_response"), *warn(rules)]
    calls = message.tool_calls or []
    if not calls:
        return out + rules.advance(answered=msg.finish_reason)
    s.batch = [CallState(call=c) for c in calls]
    if s.cancel is None and s.stop is None:  # a budget spent by this response: no call runs
        s.phase = "tools"
        for cs in s.batch:
            out.extend(classify_call(rules, cs))
        if s.pending_approvals and s.options.approval_timeout is not None:
            s.approval_deadline = rules.now() + s.options.approval_timeout
            out.append(SetTimer("approval_timeout", s.options.approval_timeout, s.round))
    return out + rules.advance()
