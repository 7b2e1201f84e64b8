"""A plain Thespian actor that plays a supervisor in tests: it starts a turn through the
directory, gets the turn's events as messages, and sends commands when told to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from thespian.actors import ActorExitRequest, ActorTypeDispatcher

from actors import DIRECTORY_NAME, DirectoryActor
from actors import Supervisor as SupervisorBase
from messages import ControlReply, Finish, StartTurn, ToolApprovalRequest, TurnEvent


@dataclass(frozen=True)
class Begin:
    """Start ``start``; when the first approval request arrives, send ``burst`` back to back."""

    start: StartTurn
    burst: list[Any] = field(default_factory=list)
    replies: int = 0  # how many ControlReply to wait for before reporting


@dataclass(frozen=True)
class Report:
    """Ask for everything seen, answered once the turn has ended (or at once if it has)."""


@dataclass(frozen=True)
class Seen:
    events: list[TurnEvent]
    replies: list[ControlReply]


class Supervisor(SupervisorBase):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[TurnEvent] = []
        self.replies: list[ControlReply] = []
        self.burst: list[Any] = []
        self.waiting: list[Any] = []
        self.directory: Any = None
        self.expect_replies = 0

    def receiveMsg_Begin(self, msg: Begin, sender: Any) -> None:
        self.directory = self.createActor(DirectoryActor, globalName=DIRECTORY_NAME)
        self.burst = list(msg.burst)
        self.expect_replies = msg.replies
        self.send(self.directory, msg.start)

    def receiveMsg_TurnEvent(self, event: TurnEvent, sender: Any) -> None:
        self.events.append(event)
        if isinstance(event, ToolApprovalRequest) and self.burst:
            burst, self.burst = self.burst, []
            for command in burst:  # back to back, in one handler
                self.send(self.directory, command)
        self._answer()

    def receiveMsg_ControlReply(self, reply: ControlReply, sender: Any) -> None:
        self.replies.append(reply)
        self._answer()

    def receiveMsg_Report(self, msg: Report, sender: Any) -> None:
        self.waiting.append(sender)
        self._answer()

    def _answer(self) -> None:
        ended = any(isinstance(e, Finish) and e.terminal for e in self.events)
        if not ended or len(self.replies) < self.expect_replies:
            return
        for who in self.waiting:
            self.send(who, Seen(sorted(self.events, key=lambda e: e.seq), list(self.replies)))
        self.waiting = []


@dataclass(frozen=True)
class CallFirst:
    """Make a tool process and send it ``run`` before its ``init``: the order a host's call
    and the pool's init may arrive in. Answered with the ``ToolAlive`` and the result."""

    run: Any
    init: Any


class OvertakingHost(ActorTypeDispatcher):
    """Plays a TurnHost whose call overtakes the pool's WorkerInit."""

    def receiveMsg_CallFirst(self, msg: CallFirst, sender: Any) -> None:
        from actors.tool_worker import ToolWorker

        self.asker, self.seen = sender, []
        worker = self.createActor(ToolWorker)
        self.send(worker, msg.run)
        self.send(worker, msg.init)

    def receiveMsg_ToolAlive(self, msg: Any, sender: Any) -> None:
        self.seen.append(msg)

    def receiveMsg_WorkerResult(self, msg: Any, sender: Any) -> None:
        self.send(self.asker, [*self.seen, msg.result])
        self.send(sender, ActorExitRequest())

    def receiveMsg_WorkerReady(self, msg: Any, sender: Any) -> None:
        pass
