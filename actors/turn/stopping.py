"""Stop and cancel: of the turn, of one call, and of the turn's work without its end.

Free functions ``(rules, message) -> decisions`` over a turn's ``Rules`` (``core``). Stop
and cancel are idempotent: the first request decides the finish reason, its text and its
cause, and every decision derived from it (abort, interrupts, synthesized tool messages,
``Error``) carries the same ones; a later stop still acts at once. A stop interrupts every
running call at once (``halt``) and the turn ends once each has reported its end (rows 2 to
4 of ``priority``); a cancel lets them finish.
"""

from __future__ import annotations

from messages import CancelTurn, Marker, StopCause, StopTool, StopTurn
from messages.events import FinishReason

from .calls import answered_before
from .core import Rules
from .decisions import Abort, Decision, Persist, SetTimer, StoreFailed
from .results import interrupted_content
from .running import done, interrupt_running, stop_call
from .steering import parked
from .stream import abort_stream, keep_partial

__all__ = ["end_reason", "first_request", "halt", "on_cancel", "on_stop", "on_stop_tool", "on_store_failed", "stop_work"]


def first_request(rules: Rules) -> tuple[StopCause, str]:
    """The cause and text of the first stop or cancel request: what every consequence says."""
    first = rules.state.cancel or rules.state.stop
    return (first.cause, first.reason) if first is not None else ("user", "")


def end_reason(rules: Rules) -> FinishReason:
    """How a turn that was stopped or cancelled ends: cancelled, its budget spent, or stopped."""
    s = rules.state
    if s.cancel is not None:
        return "cancelled"
    return "budget_exceeded" if s.stop is not None and s.stop.cause == "budget" else "stopped"


def on_stop(rules: Rules, msg: StopTurn) -> list[Decision]:
    s = rules.state
    if s.phase == "finished" or s.stop is not None:
        return rules.reply(msg, True, None, "no effect")
    resumes_at = s.next_seq if parked(s) else None
    s.stop = Marker(kind="stop", reason=msg.reason, at=rules.now(), cause=msg.cause, by=msg.by)
    return rules.advance() + rules.reply(msg, True, None, "", resumes_at)


def on_cancel(rules: Rules, msg: CancelTurn) -> list[Decision]:
    s = rules.state
    if s.phase == "finished" or s.cancel is not None or s.stop is not None:
        return rules.reply(msg, True, None, "no effect")
    ok = rules.reply(msg, True, None, "", s.next_seq if parked(s) else None)
    s.cancel = Marker(kind="cancel", reason=msg.reason, at=rules.now(), grace=msg.grace, cause=msg.cause)
    s.cancel.by = msg.by
    out: list[Decision] = [Persist("cancel_marker"), *interrupt_running(s, "cancel", msg.reason, msg.cause)]
    if msg.grace is not None:
        out.append(SetTimer("cancel_grace", msg.grace, 0))
    return out + rules.advance() + ok


def stop_work(rules: Rules, reason: str, cause: StopCause = "user", grace: float | None = None) -> list[Decision]:
    """What stops the turn's work now without ending it or changing it: an ``Abort`` of its
    stream in flight and a stop of every running call (see ``TurnRules.stop_work``)."""
    s = rules.state
    abort: list[Decision] = [Abort(s.stream_id, reason, cause)] if s.phase == "streaming" and s.stream_id else []
    return abort + interrupt_running(s, "stop", reason, cause, grace)


def halt(rules: Rules) -> list[Decision]:
    """Stop now: abort the stream, interrupt every running call (it ends later: rows 2 to 4)."""
    s = rules.state
    cause, why = first_request(rules)
    out: list[Decision] = [Persist("stop_marker"), *abort_stream(rules, why, cause)]
    if s.phase == "streaming":
        s.phase = "idle"
    what = "the turn was cancelled" if s.cancel is not None else _stopped(s.stop)
    for cs in [cs for cs in s.batch or () if cs.status == "running"]:
        out += stop_call(rules, cs, why, ("interrupted", interrupted_content(what, why)), cause)
    return out


def _stopped(stop: Marker | None) -> str:
    """What stopped the turn, for the tool message of a call it interrupted."""
    return "the turn's budget was spent" if stop is not None and stop.cause == "budget" else "the turn was stopped"


def on_stop_tool(rules: Rules, msg: StopTool) -> list[Decision]:
    s = rules.state
    if s.phase == "finished":
        return rules.reply(msg, False, "turn_finished", f"turn {s.turn_id} has finished ({s.finish_reason})")
    cs = s.call(msg.call_id)
    if cs is None and answered_before(s.messages, msg.call_id):
        return rules.reply(msg, False, "not_waiting", f"call {msg.call_id!r} has already finished")
    if cs is None:
        return rules.reply(msg, False, "unknown_call", f"call {msg.call_id!r} is not running in turn {s.turn_id}")
    if cs.status == "done":
        return rules.reply(msg, False, "not_waiting", f"call {msg.call_id!r} has already finished")
    if cs.status == "stopping":
        return rules.reply(msg, True, None, "no effect")
    resumes_at = s.next_seq if s.paused else None  # ending the last waiting call resumes the turn
    cs.stopped_by = msg.by
    stopped = interrupted_content("the call was stopped", msg.reason)
    if cs.status == "running":  # it ends once its process has reported its end
        out = stop_call(rules, cs, msg.reason, ("interrupted", stopped)) + [Persist("call_stopping")]
        return out + rules.reply(msg, True, None, "", resumes_at)
    out = done(rules, cs, "interrupted", stopped) + [Persist("tool_result")] + rules.advance()
    return out + rules.reply(msg, True, None, "", resumes_at if not s.paused else None)


def on_store_failed(rules: Rules, msg: StoreFailed) -> list[Decision]:
    """The store refused the turn's write (not an outage: that only delays the turn); the
    turn, as last stored, ends with an error, its work stopped."""
    if rules.state.phase == "finished":
        return []
    out = stop_work(rules, "the turn store refused its write")
    if rules.state.phase == "streaming":
        keep_partial(rules)
    return out + rules.end("error", ("store_error", f"the turn store refused its write: {msg.detail}"))
