"""ToolWorker: a pooled tool process that runs one call at a time, each in its own ToolActor.

A ``ToolPool`` forks workers ahead of need and lends them to TurnHosts; a host sends a
worker ``RunTool`` and gets exactly one ``WorkerResult`` back per call, after which the
worker is free for the host's next call. Each call gets a fresh ``ToolActor`` (its context
and registrations end with it).

Every process a call starts is the call's to end, however it was started: the worker is a
subreaper, so a tool's double-forked daemon is re-parented to it and stays in reach.

- when a call ends, whatever it left running below the worker gets SIGTERM, then SIGKILL
  after ``stop_grace``;
- on stop: the ``on_stop`` callbacks start at once (each on its own thread; the tool sees
  its flag once they are over, at most ``stop_grace / 2`` later: ``ToolActor``), every
  process below the worker gets SIGTERM at once and SIGKILL after ``stop_grace``; the
  call's ``WorkerResult`` leaves once the tool has returned and the callbacks are over. A
  call still running at ``stop_grace`` (a blocking tool that ignores its flag) ends with its
  process: the worker sends the call's result itself (``interrupted``, saying so), then
  exits, and the pool replaces it;
- after ``recycle_after`` calls the worker retires (says so with its last result);
- a call placed on another node sends ``ToolAlive`` every ``heartbeat`` seconds.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ThespianWatch
from thespian.system.transport import TransmitIntent

from messages import (
    CancelTurn,
    Finish,
    InterruptTool,
    ReportProgress,
    RunTool,
    StopTurn,
    ToolAlive,
    ToolApprovalRequest,
    ToolResult,
    Usage,
)

from ..handoff import Handoff
from ..lifecycle.processes import become_subreaper, descendants, reap_children, signal_all
from ..logs import logger, quiet_third_party
from ..mailbox import Kernel
from ..turn.results import error_result, interrupted_content
from ..wire.dispatch import Dispatcher
from ..wire.protocol import EventBatch, WorkerInit, WorkerReady, WorkerResult
from .tool_actor import ToolActor

__all__ = ["ToolWorker"]

TOMBSTONE_TTL = 300.0  # seconds an interrupt waits for the call it overtook
TOMBSTONES = 256


log = logger("greenroom.tools")


class ToolWorker(Dispatcher):
    """One pooled tool process; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        quiet_third_party()
        become_subreaper()
        self._handoff = Handoff()
        self._kernel = Kernel()  # the mailbox of the call's ToolActor
        self._directory: Any = None
        self._recycle_after = 0
        self._node = ""
        self._calls = 0
        self._call: ToolActor | None = None
        self._host: Any = None
        self._progress_seq = 0
        self._children: dict[str, Any] = {}  # child turn id -> ChildTurn (sub-agents)
        self._spent: dict[str, tuple[Usage, float]] = {}  # child turn id -> its use (with its own sub-agents')
        self._exiting = False
        self._retiring = False  # its last result is on its way: it exits once that is acknowledged
        self._generation = 0  # which call a timer belongs to
        self._grace = 0.0  # the stop grace of the call being stopped
        self._initialized = False
        self._early: list[tuple[Any, Any]] = []  # (message, sender) that overtook WorkerInit
        self._tombstones: dict[tuple[str, str, int], tuple[str, str, float]] = {}  # interrupts ahead of their call

    def receiveMessage(self, message: Any, sender: Any) -> Any:
        super().receiveMessage(message, sender)
        return ThespianWatch([self._handoff.fd])

    def receiveMsg_WorkerInit(self, msg: WorkerInit, sender: Any) -> None:
        self._directory, self._recycle_after, self._node = msg.directory, msg.recycle_after, msg.node
        self._initialized = True
        self.send(sender, WorkerReady(os.getpid()))
        early, self._early = self._early, []
        for message, from_ in early:  # a host's call can overtake the pool's WorkerInit
            self.receiveMessage(message, from_)

    def _before_init(self, message: Any, sender: Any) -> bool:
        """Hold ``message`` if WorkerInit has not arrived yet (Thespian orders messages per
        sender at best, and the call comes from the host, the init from the pool)."""
        if self._initialized:
            return False
        self._early.append((message, sender))
        return True

    def receiveMsg_RunTool(self, run: RunTool, sender: Any) -> None:
        if self._before_init(run, sender):
            return
        interrupted = self._tombstones.pop((run.turn_id, run.call.id, run.attempt), None)
        if interrupted is not None:  # its interrupt overtook it: it never starts
            what = "the call was stopped" if interrupted[0] == "stop" else "the call was cancelled"
            content = interrupted_content(f"{what} before it started", interrupted[1])
            self.send(sender, WorkerResult(_result(run, "interrupted", content)))
            return
        if self._call is not None or self._exiting or self._retiring:
            busy = f"busy with call {self._call.call_id}" if self._call is not None else ""
            reason = "exiting" if self._exiting or self._retiring else busy
            content = error_result(f"Tool '{run.spec.name}' could not start: its tool process was {reason}")
            self.send(sender, WorkerResult(_result(run, "failed", content), retiring=True))
            return
        if run.provider is not None and run.provider.api_key_env:
            os.environ.pop(run.provider.api_key_env, None)  # the key is the LLM's, never a tool's
        self._calls += 1
        self._generation += 1
        self._host, self._progress_seq, self._children, self._spent = sender, 0, {}, {}
        generation = self._generation
        self._call = ToolActor(self._kernel, run, lambda kind, payload: self._handoff.put((generation, kind, payload)))
        if run.heartbeat is not None:
            self._alive()
        self._call.start()

    def receiveMsg_WatchMessage(self, msg: Any, sender: Any) -> None:
        for generation, kind, payload in self._handoff.drain():
            if kind == "retire":  # its last result was acknowledged
                self._retire()
                continue
            call = self._call
            if call is None or generation != self._generation:
                continue
            if kind == "progress":
                self._progress(call, payload)
            elif kind == "child":
                self._start_child(call, payload)
            elif kind == "result":
                self._finish(call, payload)

    def _finish(self, call: ToolActor, outcome: tuple[str, str], retire: bool = False) -> None:
        call.finished = True
        self._call = None
        retiring = retire or (self._recycle_after > 0 and self._calls >= self._recycle_after)
        result = WorkerResult(_result(call.run, outcome[0], outcome[1], *self._spending()), retiring=retiring)
        if retiring:
            self._send_then_retire(result)
        else:
            self.send(self._host, result)
        left = descendants(os.getpid())
        if left:  # what the call left running is the call's: end it
            signal_all(left, signal.SIGTERM)
            self.wakeupAfter(timedelta(seconds=call.run.stop_grace), payload=("sweep", left))

    def _send_then_retire(self, result: WorkerResult) -> None:
        """Send the last result, and exit once it was acknowledged (or could not be delivered):
        so its host has it before the pool can say this process exited (two senders, no order)."""

        def sent(*_: Any) -> None:  # in Thespian's ACK callback: send nothing from here
            self._handoff.put((self._generation, "retire", None))

        self._retiring = True
        self._myRef._send_intent(TransmitIntent(self._host, result, onSuccess=sent, onError=sent))

    def _progress(
        self, call: ToolActor, data: Any, approval: dict[str, Any] | None = None, spent: bool = False
    ) -> None:
        """A progress report; ``spent``: with what the call's sub-agents have used, in all (sent
        even for a stopped call, alone: its turn counts it against its budgets)."""
        if call.stopping and not spent:
            return
        usage, cost = self._spending() if spent else (None, None)
        if call.stopping:
            data = approval = None
        run = call.run
        report = ReportProgress(
            turn_id=run.turn_id, call_id=run.call.id, seq=self._progress_seq, data=data, approval=approval,
            attempt=run.attempt, epoch=run.epoch, usage=usage, cost=cost,
        )  # fmt: skip
        self.send(self._host, report)
        self._progress_seq += 1

    def _spending(self) -> tuple[Usage | None, float | None]:
        """What the call's sub-agents have used, in all (None when it started none)."""
        if not self._spent:
            return None, None
        usage, cost = Usage(), 0.0
        for u, c in self._spent.values():
            usage, cost = usage + u, cost + c
        return usage, cost

    def receiveMsg_InterruptTool(self, msg: InterruptTool, sender: Any) -> None:
        if self._before_init(msg, sender):
            return
        call = self._call
        if call is None or msg.call_id != call.call_id or msg.turn_id != call.run.turn_id:
            self._tombstone(msg)
            return
        call.tell(msg)
        self._kernel.run()
        self._steer_children(msg.mode, msg.reason)
        if msg.mode == "stop":
            signal_all(descendants(os.getpid()), signal.SIGTERM)
            self._grace = min(call.run.stop_grace, msg.grace if msg.grace is not None else call.run.stop_grace)
            self.wakeupAfter(timedelta(seconds=self._grace), payload=("grace", self._generation))

    def _tombstone(self, msg: InterruptTool) -> None:
        """Keep an interrupt for a call this process has not been given yet (Thespian does not
        order the host's messages): if its ``RunTool`` comes, the call never starts. Kept
        ``TOMBSTONE_TTL`` seconds, at most ``TOMBSTONES`` of them."""
        now = time.monotonic()
        for key in [k for k, v in self._tombstones.items() if now - v[2] > TOMBSTONE_TTL]:
            del self._tombstones[key]
        while len(self._tombstones) >= TOMBSTONES:
            del self._tombstones[next(iter(self._tombstones))]
        self._tombstones[(msg.turn_id, msg.call_id, msg.attempt or 1)] = (msg.mode, msg.reason, now)

    def receiveMsg_WakeupMessage(self, msg: Any, sender: Any) -> None:
        what, arg = msg.payload
        if what == "sweep":
            signal_all(arg, signal.SIGKILL)
            reap_children()
        elif what == "grace" and arg == self._generation:
            signal_all(descendants(os.getpid()), signal.SIGKILL)
            reap_children()
            self.receiveMsg_WatchMessage(None, None)  # a result the call reported meanwhile goes first
            call = self._call
            if call is not None:  # the call ignored its stop: it ends with this process
                log().warning("tool call %s did not stop within its grace; its process exits", call.call_id)
                grace = f"its stop grace ({self._grace:g} s)"
                outcome = call.abandon(f"the tool did not return within {grace} and its process was ended")
                if outcome is None:  # its own result came just now
                    self.receiveMsg_WatchMessage(None, None)
                else:
                    self._finish(call, outcome, retire=True)  # and this process exits
        elif what == "heartbeat" and arg == self._generation:
            self._alive()

    def _alive(self) -> None:
        call = self._call  # a stopped call beats too, until it has ended: its host waits for its end
        if call is None or self._exiting or call.run.heartbeat is None:
            return
        self.send(self._host, ToolAlive(turn_id=call.run.turn_id, call_id=call.call_id, node=self._node))
        self.wakeupAfter(timedelta(seconds=call.run.heartbeat), payload=("heartbeat", self._generation))

    def _retire(self) -> None:
        if not self._exiting:
            self._exiting = True
            self.send(self.myAddress, ActorExitRequest())

    # -- sub-agents: child turns started by the tool ---------------------------------------

    def _start_child(self, call: ToolActor, child: Any) -> None:
        self._children[child.start.turn_id] = child
        self.send(self._directory, child.start)
        if call.ctx is not None and call.ctx.cancellation.requested:
            self._steer_children(call.ctx.cancellation.mode or "stop", call.ctx.cancellation.reason)

    def receiveMsg_EventBatch(self, batch: EventBatch, sender: Any) -> None:
        call = self._call
        for event in batch.events:
            child = self._children.get(event.turn_id)
            if child is None or call is None:
                continue
            if isinstance(event, ToolApprovalRequest):  # the parent's caller decides it, by the child's id
                fields = ("turn_id", "call_id", "name", "arguments", "description", "approvers")
                self._progress(call, None, event.model_dump(mode="json", include=set(fields)))
                continue
            spent = isinstance(event, Finish)
            if isinstance(event, Finish):  # the child's use so far: its own and its sub-agents'
                self._spent[event.turn_id] = (event.usage + event.subagent_usage, event.cost or 0.0)
            self._progress(
                call,
                {"child_turn_id": event.turn_id, "event": event.model_dump(mode="json", exclude={"messages"})},
                spent=spent,
            )
            if isinstance(event, Finish) and event.terminal:
                del self._children[event.turn_id]
                child.resolve(event)

    def _steer_children(self, mode: str, reason: str) -> None:
        """A stop or cancel of this call reaches the child turns it started."""
        for turn_id in self._children:
            if mode == "stop":
                stop = StopTurn(turn_id=turn_id, reason=f"parent call stopped: {reason}", cause="parent")
                self.send(self._directory, stop)
            else:
                cancel = CancelTurn(turn_id=turn_id, reason=f"parent call cancelled: {reason}", cause="parent")
                self.send(self._directory, cancel)

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        if self._call is not None:
            self._call.interrupt("stop", "the tool process is exiting")
            self._steer_children("stop", "the tool process is exiting")
        signal_all(descendants(os.getpid()), signal.SIGKILL)

    def receiveUnrecognizedMessage(self, msg: Any, sender: Any) -> None:
        log().debug("ToolWorker ignored %r", type(msg).__name__)


def _result(
    run: RunTool, outcome: str, content: str, usage: Usage | None = None, cost: float | None = None
) -> ToolResult:
    """The call's one result, naming the run it reports (its attempt, its turn's epoch), with
    what its sub-agents used, in all."""
    return ToolResult(
        turn_id=run.turn_id, call_id=run.call.id, outcome=outcome, content=content,  # type: ignore[arg-type]
        attempt=run.attempt, epoch=run.epoch, usage=usage, cost=cost,
    )  # fmt: skip
