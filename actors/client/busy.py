"""What a session does with a message, whatever its turn is doing: one pure function per input.

A session runs one turn at a time. Its state is the turn running on it (if any), the
messages waiting for it (``enqueue``) and the turn being rolled back (if any); the inputs
are a new message (``on_message``), the running turn's end (``on_end``) and a withdrawal
(``on_withdraw``). Each returns the new state and the decisions to carry out, in order; the
``Session`` applies them (start a turn, send input, stop a turn, append to the history).
A test drives these without any actor system.

What a message does while a turn runs, by its policy (``on_busy``):

    ==========  ==========================================  ==========================================
    policy      the running turn                            the session's history
    ==========  ==========================================  ==========================================
    reject      goes on                                     unchanged; the message is refused (busy)
    enqueue     goes on                                     the message starts the next turn at its end
    interrupt   takes the message as input now (SendInput)  the running turn's, input included
    rollback    stopped; its messages dropped               as before it, then the message's turn
    ==========  ==========================================  ==========================================

On an idle session every policy starts the message's turn at once. A message's id is the id
of the turn it starts. Messages waiting start in the order they came, one at each end; a
rollback leaves them waiting (they follow the turn that replaced the one rolled back). A
waiting message can be withdrawn; one that started cannot (``started``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = [
    "BUSY_POLICIES",
    "Append",
    "Decision",
    "Drop",
    "Enqueue",
    "Policy",
    "Refuse",
    "SessionState",
    "Start",
    "Steer",
    "Stop",
    "Withdrawn",
    "on_end",
    "on_message",
    "on_withdraw",
]

Policy = Literal["reject", "enqueue", "interrupt", "rollback"]
BUSY_POLICIES: tuple[Policy, ...] = ("reject", "enqueue", "interrupt", "rollback")


@dataclass(frozen=True)
class SessionState:
    """The session as its rules see it."""

    running: str | None = None  # the turn running on the session
    queued: tuple[str, ...] = ()  # messages waiting, in order (each the id of the turn it will start)
    dropping: str | None = None  # a turn stopped by a rollback, not ended yet


@dataclass(frozen=True)
class Start:
    """Start the message's turn on the session's history as it is."""

    message_id: str


@dataclass(frozen=True)
class Refuse:
    """Refuse (``ControlRejected(code)``); nothing changed."""

    code: Literal["busy", "started", "unknown_message"]
    message: str


@dataclass(frozen=True)
class Enqueue:
    """The message waits; ``position`` 0 is the next to start."""

    message_id: str
    position: int


@dataclass(frozen=True)
class Steer:
    """Send the message into the running turn as input, now (``SendInput(when="now")``)."""

    turn_id: str
    message_id: str


@dataclass(frozen=True)
class Stop:
    """Stop the running turn (a rollback); its end is dropped, not appended."""

    turn_id: str


@dataclass(frozen=True)
class Append:
    """Append what the ended turn added to the session's history."""

    turn_id: str


@dataclass(frozen=True)
class Drop:
    """The turn rolled back has ended: forget it, append nothing."""

    turn_id: str


@dataclass(frozen=True)
class Withdrawn:
    """The waiting message was withdrawn: it will never start."""

    message_id: str


Decision = Start | Refuse | Enqueue | Steer | Stop | Append | Drop | Withdrawn


def on_message(state: SessionState, message_id: str, policy: Policy) -> tuple[SessionState, list[Decision]]:
    """A new message, with its policy."""
    running = state.running
    if running is None:
        return replace(state, running=message_id), [Start(message_id)]
    if policy == "reject":
        return state, [Refuse("busy", f"the session is busy: turn {running} is running (on_busy='reject')")]
    if policy == "enqueue":
        return replace(state, queued=(*state.queued, message_id)), [Enqueue(message_id, len(state.queued))]
    if policy == "interrupt":
        return state, [Steer(running, message_id)]
    return replace(state, running=message_id, dropping=running), [Stop(running), Start(message_id)]


def on_end(state: SessionState, turn_id: str) -> tuple[SessionState, list[Decision]]:
    """A turn of the session has ended (terminally); idempotent: a second end changes nothing."""
    if turn_id == state.dropping:
        return replace(state, dropping=None), [Drop(turn_id)]
    if turn_id != state.running:
        return state, []
    if state.queued:
        following, rest = state.queued[0], state.queued[1:]
        return replace(state, running=following, queued=rest), [Append(turn_id), Start(following)]
    return replace(state, running=None), [Append(turn_id)]


def on_withdraw(state: SessionState, message_id: str) -> tuple[SessionState, list[Decision]]:
    """Withdraw a waiting message."""
    if message_id in state.queued:
        return replace(state, queued=tuple(m for m in state.queued if m != message_id)), [Withdrawn(message_id)]
    if message_id in (state.running, state.dropping):
        return state, [Refuse("started", f"message {message_id} has already started its turn: stop it instead")]
    return state, [Refuse("unknown_message", f"no message {message_id} waits on this session")]
