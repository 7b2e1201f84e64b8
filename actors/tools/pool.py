"""ToolPool: one per node; forks tool processes ahead of need and lends them to TurnHosts.

A TurnHost has threads (its streams), so it must not fork; the pool has none and does all
the forking of its node, off every turn's path.

- ``LeaseWorkers(n)`` is answered with up to ``n`` processes at once: idle ones first, then
  freshly forked ones while the node has fewer than ``max_processes``; what it cannot give
  yet is owed, and paid in the order asked as processes come back or exit (the calls wait,
  stoppable, in their host). The pool then forks again, a moment later, to keep ``spares``
  idle processes ready, within the same cap;
- a lent process stays the host's until the host returns it (``ReturnWorkers``) or the
  process exits; one returned while ``spares`` are idle already is retired (counted within
  ``max_processes`` until it has exited), so that what a burst forked does not stay; when a
  process exits (retired after its calls, stopped past its grace, crashed, killed) the
  host that had it gets ``WorkerExited`` and the pool forks a replacement if it needs one;
- when a host dies (``HostGone``), the processes it had are retired: a call of a dead turn
  has nobody to report to;
- the pool is a subreaper: what a tool process started and left behind when it died (it
  was killed, it crashed) is re-parented to the pool, which ends it at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ChildActorExited

from ..lifecycle.processes import alive, become_subreaper, children, descendants, signal_all
from ..logs import logger
from ..wire.dispatch import Dispatcher
from ..wire.protocol import (
    HostGone,
    LeaseWorkers,
    PoolConfig,
    ReturnWorkers,
    Shutdown,
    WorkerExited,
    WorkerInit,
    WorkerReady,
    WorkersLeased,
)
from ..wire.thespian_compat import child_pid
from .worker import ToolWorker

__all__ = ["DEFAULT_MAX_TOOL_PROCESSES", "DEFAULT_TOOL_PROCESSES", "ToolPool"]

DEFAULT_TOOL_PROCESSES = 1  # idle tool processes a node's pool keeps, besides each host's one
DEFAULT_MAX_TOOL_PROCESSES = 16  # tool processes a node runs at most


log = logger("greenroom.pool")


class ToolPool(Dispatcher):
    """The tool processes of one node; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config: PoolConfig | None = None
        self.idle: list[Any] = []
        self.retiring: list[Any] = []  # idle processes told to exit, not yet exited
        self.leased: list[tuple[Any, Any]] = []  # (worker, host); addresses are not hashable
        self.replenish_scheduled = False
        self.quiet = False
        self.worker_pids: set[int] = set()
        self.owed: list[tuple[Any, int, LeaseWorkers]] = []  # (host, how many, its request), oldest first
        become_subreaper()

    def receiveMsg_WorkerReady(self, msg: WorkerReady, sender: Any) -> None:
        self.worker_pids.add(msg.pid)

    def receiveMsg_PoolConfig(self, msg: PoolConfig, sender: Any) -> None:
        self.config = msg
        self._pay()  # leases asked before the config came (the network may reorder them)
        self._replenish()

    def _fork(self) -> Any:
        assert self.config is not None
        worker = self.createActor(ToolWorker)
        pid = child_pid(self, worker)  # known at once, so that it is never taken for an orphan
        if pid is not None:
            self.worker_pids.add(pid)
        self.send(worker, WorkerInit(self.config.directory, self.config.recycle_after, self.config.node))
        return worker

    def receiveMsg_LeaseWorkers(self, msg: LeaseWorkers, sender: Any) -> None:
        self.owed.append((sender, msg.count, msg))
        self._pay()
        self._schedule_replenish()

    def _processes(self) -> int:
        return len(self.idle) + len(self.leased) + len(self.retiring)

    def _pay(self) -> None:
        """Lend what is owed, oldest request first, within ``max_processes``."""
        while self.owed and self.config is not None and not self.quiet:
            host, count, request = self.owed[0]
            given: list[Any] = []
            while len(given) < count and self.idle:
                given.append(self.idle.pop(0))
            while len(given) < count and self._processes() + len(given) < self.config.max_processes:
                given.append(self._fork())
            if given:
                self.leased.extend((w, host) for w in given)
                self.send(host, WorkersLeased(given, self.config.node, request.requires, request.isolate))
            if len(given) < count:
                self.owed[0] = (host, count - len(given), request)
                return
            self.owed.pop(0)

    def receiveMsg_ReturnWorkers(self, msg: ReturnWorkers, sender: Any) -> None:
        for worker in msg.workers:
            pair = self._lessee(worker)
            if pair is not None:
                self.leased.remove(pair)
                self.idle.append(worker)
        self._pay()
        while self.config is not None and len(self.idle) > self.config.spares:
            worker = self.idle.pop()  # the newest back: the fresh forks stay
            self.retiring.append(worker)  # counted until it has exited (``max_processes``)
            self.send(worker, ActorExitRequest())

    def receiveMsg_ChildActorExited(self, msg: ChildActorExited, sender: Any) -> None:
        worker = msg.childAddress
        self._end_orphans()
        if worker in self.retiring:
            self.retiring.remove(worker)
        if worker in self.idle:
            self.idle.remove(worker)
        pair = self._lessee(worker)
        if pair is not None:
            self.leased.remove(pair)
            self.send(pair[1], WorkerExited(worker))
        self._pay()
        self._schedule_replenish()

    def receiveMsg_HostGone(self, msg: HostGone, sender: Any) -> None:
        self.owed = [o for o in self.owed if o[0] != msg.host]
        for pair in [p for p in self.leased if p[1] == msg.host]:
            self.leased.remove(pair)
            self.send(pair[0], ActorExitRequest())

    def receiveMsg_Shutdown(self, msg: Shutdown, sender: Any) -> None:
        self.quiet = True

    def _end_orphans(self) -> None:
        """Kill what dead tool processes left behind (now this process's children)."""
        self.worker_pids = {pid for pid in self.worker_pids if alive(pid)}
        orphans = [pid for pid in children(os.getpid()) if pid not in self.worker_pids and alive(pid)]
        for pid in orphans:
            signal_all([*descendants(pid), pid], signal.SIGKILL)
        for pid in orphans:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)

    def _lessee(self, worker: Any) -> tuple[Any, Any] | None:
        for pair in self.leased:
            if pair[0] == worker:
                return pair
        return None

    def _schedule_replenish(self) -> None:
        """Fork a moment later: a fork blocks this actor, and its answers should go first."""
        if not self.replenish_scheduled and not self.quiet:
            self.replenish_scheduled = True
            self.wakeupAfter(timedelta(milliseconds=1), payload="replenish")

    def receiveMsg_WakeupMessage(self, msg: Any, sender: Any) -> None:
        if msg.payload == "replenish":
            self.replenish_scheduled = False
            self._replenish()

    def _replenish(self) -> None:
        if self.quiet or self.config is None or self.owed:
            return
        while len(self.idle) < self.config.spares and self._processes() < self.config.max_processes:
            self.idle.append(self._fork())

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        self.quiet = True

    def receiveUnrecognizedMessage(self, msg: Any, sender: Any) -> None:
        log().debug("ToolPool ignored %r", type(msg).__name__)
