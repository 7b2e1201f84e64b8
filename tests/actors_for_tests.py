"""Plain Thespian actors for tests: a supervisor that starts a turn through the directory,
gets the turn's events as messages and sends commands when told to; hosts that put a tool
process or a tool pool in an order of events a test needs."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ActorTypeDispatcher

from actors import DIRECTORY_NAME, DirectoryActor
from actors import Supervisor as SupervisorBase
from actors.tools.pool import ToolPool
from actors.wire.protocol import LeaseWorkers, PoolConfig, WorkerExited, WorkerResult, WorkersLeased
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
        from actors.tools.worker import ToolWorker

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


# -- a tool process killed while its pool forks ---------------------------------------------------


@dataclass(frozen=True)
class LeaseWhileKilling:
    """To a ``ForkRacePool``: lend one process more than are idle (so that the pool forks one),
    and SIGKILL ``pid`` in the middle of that fork."""

    pid: int


class ForkRacePool(ToolPool):
    """A real ToolPool in which a tool process that started children dies while the pool
    forks: what the kernel then does (the dead process's children become the pool's, the
    pool is their subreaper) happens between the pool's two looks at its children."""

    kill_in_fork: int | None = None

    def receiveMsg_LeaseWhileKilling(self, msg: LeaseWhileKilling, sender: Any) -> None:
        self.kill_in_fork = msg.pid
        self.receiveMsg_LeaseWorkers(LeaseWorkers(len(self.idle) + 1), sender)

    def createActor(self, *args: Any, **kwargs: Any) -> Any:
        pid, self.kill_in_fork = self.kill_in_fork, None
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # gone (its children are ours), not collected
        return super().createActor(*args, **kwargs)


@dataclass(frozen=True)
class RaceFork:
    """Lease a process from a ``ForkRacePool``, run ``naive`` there (a call that starts children
    of every kind), and once it reports, have that process killed while the pool forks; then
    run ``quick`` in every process lent after that. Answered with the exits reported, the
    answers of those calls, and the pids the naive call reported."""

    config: PoolConfig
    naive: Any
    quick: Any


class RaceHost(ActorTypeDispatcher):
    """Plays a TurnHost of a ``ForkRacePool``."""

    def receiveMsg_RaceFork(self, msg: RaceFork, sender: Any) -> None:
        self.asker, self.race = sender, msg
        self.killed: int | None = None
        self.children: list[int] = []
        self.lent = 0
        self.exited: list[str] = []
        self.answers: list[str] = []
        self.pool = self.createActor(ForkRacePool)
        self.send(self.pool, msg.config)
        self.send(self.pool, LeaseWorkers(1))

    def receiveMsg_WorkersLeased(self, msg: WorkersLeased, sender: Any) -> None:
        if self.killed is None:
            if msg.workers:
                self.send(msg.workers[0], self.race.naive)
            else:  # the lease overtook the pool's config
                self.send(self.pool, LeaseWorkers(1))
            return
        self.lent = len(msg.workers)
        for worker in msg.workers:
            self.send(worker, self.race.quick)

    def receiveMsg_ReportProgress(self, msg: Any, sender: Any) -> None:
        if self.killed is None:
            self.killed, self.children = msg.data["worker"], msg.data["pids"]
            self.send(self.pool, LeaseWhileKilling(self.killed))

    def receiveMsg_WorkerExited(self, msg: WorkerExited, sender: Any) -> None:
        self.exited.append(str(msg.worker))
        self._answer()

    def receiveMsg_WorkerResult(self, msg: WorkerResult, sender: Any) -> None:
        self.answers.append(msg.result.content)
        self._answer()

    def _answer(self) -> None:
        if self.exited and self.lent and len(self.answers) == self.lent:
            self.send(self.asker, (len(self.exited), self.answers, self.children))


# -- a tool process killed while its pool handles another's exit ---------------------------------


@dataclass(frozen=True)
class KillBoth:
    """To an ``ExitRacePool``: SIGKILL ``first``, and ``second`` once the pool handles the
    exit of ``first``."""

    first: int
    second: int


class ExitRacePool(ToolPool):
    """A real ToolPool in which a tool process dies while the pool handles another one's
    exit: Thespian, once that handler returns, collects every child it then finds dead and
    reports only the one whose exit it was handling."""

    kill_on_exit: int | None = None

    def receiveMsg_KillBoth(self, msg: KillBoth, sender: Any) -> None:
        self.kill_on_exit = msg.second
        os.kill(msg.first, signal.SIGKILL)

    def receiveMsg_ChildActorExited(self, msg: Any, sender: Any) -> None:
        pid, self.kill_on_exit = self.kill_on_exit, None
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # gone, not collected
        super().receiveMsg_ChildActorExited(msg, sender)


@dataclass(frozen=True)
class RaceExits:
    """Lease two processes from an ``ExitRacePool`` and run one of ``calls`` (each reports
    its process, then blocks) in each; once both report, have the pool kill one, and the
    other while it handles that exit. Answered with how many exits the pool reported, once
    both are or ``within`` seconds after the kills."""

    config: PoolConfig
    calls: tuple[Any, Any]
    within: float = 10.0


class ExitRaceHost(ActorTypeDispatcher):
    """Plays a TurnHost of an ``ExitRacePool``."""

    def receiveMsg_RaceExits(self, msg: RaceExits, sender: Any) -> None:
        self.asker, self.race = sender, msg
        self.pids: list[int] = []
        self.sent = 0
        self.exited: list[str] = []
        self.answered = False
        self.pool = self.createActor(ExitRacePool)
        self.send(self.pool, msg.config)
        self.send(self.pool, LeaseWorkers(2))

    def receiveMsg_WorkersLeased(self, msg: WorkersLeased, sender: Any) -> None:
        if not msg.workers:  # the lease overtook the pool's config
            self.send(self.pool, LeaseWorkers(2))
        for worker, run in zip(msg.workers, self.race.calls[self.sent :]):
            self.send(worker, run)
            self.sent += 1

    def receiveMsg_ReportProgress(self, msg: Any, sender: Any) -> None:
        self.pids.append(msg.data["worker"])
        if len(self.pids) == 2:
            self.send(self.pool, KillBoth(*self.pids))
            self.wakeupAfter(timedelta(seconds=self.race.within))

    def receiveMsg_WorkerExited(self, msg: WorkerExited, sender: Any) -> None:
        self.exited.append(str(msg.worker))
        if len(self.exited) == 2:
            self._answer()

    def receiveMsg_WakeupMessage(self, msg: Any, sender: Any) -> None:
        self._answer()

    def _answer(self) -> None:
        if not self.answered:
            self.answered = True
            self.send(self.asker, len(self.exited))


# -- two sends queued for one target ------------------------------------------------------------


@dataclass(frozen=True)
class SendAll:
    """Send ``messages`` to ``to`` back to back, all from one handler; answered with their count."""

    to: Any
    messages: list[Any]


class BackToBack(ActorTypeDispatcher):
    def receiveMsg_SendAll(self, msg: SendAll, sender: Any) -> None:
        for message in msg.messages:
            self.send(msg.to, message)
        self.send(sender, len(msg.messages))
