"""What the turn's rules decide, and the inputs that are not public messages.

Decisions are plain data; the TurnActor carries them out in order (after writing the
snapshot and new events to the store, when there is one). Inputs here come from the turn's
own actor (its step, its timers) or from its host (a lost call, a lost stream, a failed
store write); public messages (commands, stream messages, tool results) are the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from messages import ControlReply, InterruptTool, RunTool, StreamChat, TurnEvent
from messages.control import StopCause

__all__ = [
    "Abort",
    "Decision",
    "Done",
    "Emit",
    "Interrupt",
    "Persist",
    "Reply",
    "ScheduleStep",
    "SetTimer",
    "Spawn",
    "StoreFailed",
    "Stream",
    "StreamLost",
    "TakeStep",
    "TimerFired",
    "ToolLost",
]


# -- decisions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Emit:
    """Send ``event`` to every subscriber and append it to the turn's log."""

    event: TurnEvent


@dataclass(frozen=True)
class Stream:
    """Ask the LLMActor to stream ``request``."""

    request: StreamChat


@dataclass(frozen=True)
class Abort:
    """Abort stream ``stream_id`` now, for the turn's stop reason."""

    stream_id: str
    reason: str
    cause: StopCause = "user"


@dataclass(frozen=True)
class Spawn:
    """Run ``run.call``: a ToolActor takes it, in a tool process or inline."""

    run: RunTool


@dataclass(frozen=True)
class Interrupt:
    """Tell the ToolActor of ``message.call_id`` to stop or cancel."""

    message: InterruptTool


@dataclass(frozen=True)
class ScheduleStep:
    """Send the TurnActor a ``TakeStep``, queued behind what is already in its mailbox."""


@dataclass(frozen=True)
class SetTimer:
    """Deliver ``TimerFired(name, token)`` after ``delay`` seconds."""

    name: str
    delay: float
    token: int


@dataclass(frozen=True)
class Persist:
    """Write a snapshot of the state; ``transition`` names why."""

    transition: str


@dataclass(frozen=True)
class Reply:
    """Answer the sender of the command being handled."""

    reply: ControlReply


@dataclass(frozen=True)
class Done:
    """The turn has ended; the actor may wind down."""


Decision = Emit | Stream | Abort | Spawn | Interrupt | ScheduleStep | SetTimer | Persist | Reply | Done


# -- inputs that are not public messages ----------------------------------------------------


@dataclass(frozen=True)
class TakeStep:
    """The self-sent step: the loop starts a stream, or ends at a boundary, only here."""

    turn_id: str


@dataclass(frozen=True)
class TimerFired:
    """A timer set by ``SetTimer`` expired."""

    name: str
    token: int


@dataclass(frozen=True)
class ToolLost:
    """The call's process exited, could not be placed, or its node fell silent, before it
    answered; ``message`` says which, for the model."""

    call_id: str
    message: str


@dataclass(frozen=True)
class StreamLost:
    """The stream ``stream_id`` is gone without an end (its LLMActor went away)."""

    stream_id: str
    detail: str


@dataclass(frozen=True)
class StoreFailed:
    """The turn's write-ahead to the store failed; the turn cannot go on durably."""

    detail: str
