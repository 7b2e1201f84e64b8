"""Steering a running turn: new input (``SendInput``), a pause (``PauseTurn``) and its end
(``ResumeTurn``).

Free functions ``(rules, message) -> decisions`` over a turn's ``Rules`` (``core``). Each
command is checked before anything changes (a refusal is a ``Reply`` and nothing else):
input for a finished turn is refused ``turn_finished``, one for a turn being stopped
``not_waiting``, input that is not user text ``invalid``; a resume of a turn that is not
paused ``not_waiting``. What each then does is in ``priority``'s table: input waits in the
state (``TurnState.inputs``) for the next model call, where it enters the history with an
``InputAccepted`` event (``take_inputs``); ``now`` asks for the stream in flight to end at
once (row 8); a pause holds the turn at its next model call (row 17, ``hold``), a resume
lets it go on.
"""

from __future__ import annotations

from collections.abc import Sequence

from messages import ChatMessage, InputAccepted, PauseTurn, RejectCode, ResumeTurn, SendInput
from messages.state import Hold, QueuedInput, TurnState

from .core import Rules
from .decisions import Decision, Persist, SetTimer
from .results import interrupted_content
from .running import stop_call
from .sanitize import safe_message
from .stream import abort_stream

__all__ = ["NEW_INPUT", "hold", "input_problem", "interrupt_stream", "on_pause", "on_resume", "on_send_input", "parked",
           "take_inputs"]  # fmt: skip

NEW_INPUT = "the user sent new input"  # why a call is denied or stopped for new input


def parked(state: TurnState) -> bool:
    """The turn's run has ended with a ``Finish`` and it waits (for decisions, or to be
    resumed): a command that moves it on starts its next run (``ControlReply.resumes_at``)."""
    return state.paused or state.phase == "paused"


def input_problem(messages: Sequence[ChatMessage]) -> str | None:
    """Why ``messages`` cannot be a turn's new input, or None: it is one or more user messages."""
    if not messages:
        return "new input needs at least one message"
    for i, m in enumerate(messages):
        if m.role != "user":
            return f"new input is user messages: message {i} is a {m.role} message"
        if m.tool_calls or m.tool_call_id:
            return f"new input is user messages: message {i} carries tool calls or answers one"
    return None


def _refusal(rules: Rules, what: str) -> tuple[RejectCode, str] | None:
    s = rules.state
    if s.phase == "finished":
        return "turn_finished", f"turn {s.turn_id} has finished ({s.finish_reason}); it takes no {what}"
    if s.stop is not None or s.cancel is not None:
        return "not_waiting", f"turn {s.turn_id} is being {'stopped' if s.stop else 'cancelled'}"
    return None


def on_send_input(rules: Rules, msg: SendInput) -> list[Decision]:
    s = rules.state
    refused = _refusal(rules, "input")
    if refused is None:
        problem = input_problem(msg.messages)
        if problem is None and msg.stop_calls and msg.when != "now":
            problem = "stop_calls stops the running calls for input sent now: give when='now'"
        refused = ("invalid", problem) if problem is not None else None
    if refused is not None:
        return rules.reply(msg, False, *refused)
    resumes_at = s.next_seq if parked(s) and msg.deny_pending and s.pending_approvals else None
    out: list[Decision] = []
    if msg.deny_pending:
        out += _deny_pending(rules)
    queued = QueuedInput(messages=[safe_message(m) for m in msg.messages], when=msg.when, request_id=msg.request_id,
                         at=rules.now())  # fmt: skip
    s.inputs.append(queued)
    if msg.stop_calls:
        why = interrupted_content("the call was stopped", NEW_INPUT)
        for cs in [c for c in s.batch or () if c.status == "running"]:
            out += stop_call(rules, cs, NEW_INPUT, ("interrupted", why))
    out = [Persist("input_queued")] + out + rules.advance()
    return out + rules.reply(msg, True, None, _where(s), resumes_at)


def _where(s: TurnState) -> str:
    """Where queued input stands, for the sender."""
    if s.phase == "paused" or s.hold is not None:
        return "accepted: it enters once the turn is resumed"
    if s.pending_approvals:
        return "accepted: it enters once the pending approvals are decided"
    return "accepted: it enters before the next model call"


def _deny_pending(rules: Rules) -> list[Decision]:
    """Every undecided call denied for new input; the batch commits after the approval window."""
    s = rules.state
    if not s.pending_approvals:
        return []
    for cs in s.batch or ():
        if cs.status == "pending_approval":
            cs.status, cs.decision, cs.decision_reason = "decided", "denied", NEW_INPUT
    if s.commit_pending:
        return []
    s.commit_pending = True
    return [SetTimer("commit", s.options.approval_window, s.round)]


def on_pause(rules: Rules, msg: PauseTurn) -> list[Decision]:
    s = rules.state
    refused = _refusal(rules, "pause")
    if refused is not None:
        return rules.reply(msg, False, *refused)
    if s.phase == "paused" or (s.hold is not None and (s.hold.when == "now" or msg.when == "next_step")):
        return rules.reply(msg, True, None, "no effect")
    s.hold = Hold(when=msg.when, reason=msg.reason, at=rules.now())
    return [Persist("pause_requested")] + rules.advance() + rules.reply(msg, True, None, "")


def on_resume(rules: Rules, msg: ResumeTurn) -> list[Decision]:
    s = rules.state
    refused = _refusal(rules, "resume")
    if refused is None and s.hold is None:
        refused = ("not_waiting", f"turn {s.turn_id} is not paused")
    if refused is None and msg.messages is not None:
        problem = input_problem(msg.messages)
        refused = ("invalid", problem) if problem is not None else None
    if refused is not None:
        return rules.reply(msg, False, *refused)
    held = s.phase == "paused"
    resumes_at = s.next_seq if held else None
    if msg.messages:
        s.inputs.append(QueuedInput(messages=[safe_message(m) for m in msg.messages], request_id=msg.request_id,
                                    at=rules.now()))  # fmt: skip
    s.hold = None
    if held:
        s.phase, s.waiting_since = "idle", None
    message = "" if held else "the pause had not taken effect: withdrawn"
    return [Persist("resumed")] + rules.advance() + rules.reply(msg, True, None, message, resumes_at)


def hold(rules: Rules) -> list[Decision]:
    """The pause takes effect: the run ends ``Finish(paused)``; the turn waits to be resumed."""
    s = rules.state
    s.phase, s.waiting_since = "paused", rules.now()
    return [rules.finish("paused"), Persist("paused_turn")]


def interrupt_stream(rules: Rules) -> list[Decision]:
    """Input or a pause ``now``: the stream in flight ends at once, its text kept."""
    s = rules.state
    why = "a pause was asked for" if s.hold is not None and s.hold.when == "now" else NEW_INPUT
    out = abort_stream(rules, why)
    s.phase = "idle"
    return out + [Persist("stream_interrupted")]


def take_inputs(rules: Rules) -> list[Decision]:
    """The queued input enters the history, in the order it came, each with its ``InputAccepted``."""
    s = rules.state
    out: list[Decision] = []
    for queued in s.inputs:
        index = len(s.messages)
        s.messages.extend(queued.messages)
        out.append(rules.emit(InputAccepted, messages=queued.messages, history_index=index, request_id=queued.request_id))
    s.inputs = []
    return out

