"""TurnHost: one OS process that hosts many TurnActors and the LLMActor that serves them.

Each node's directory starts its TurnHosts (``Runtime(hosts=...)``, ``greenroom node
--hosts``); a host's id is ``node/slot``, the same after a restart. A turn lives on the host
it was placed on (``placement``). Inside, each TurnActor is an actor of its own (a FIFO
mailbox, its ``TurnRules`` and state; see ``mailbox.Kernel``); the host routes each Thespian
message to the right mailbox, runs the mailboxes, then sends what they produced.

Guarantees:

- every message that names a turn gets to the turn or an answer (``registry``): held while
  the turn is on its way, forwarded when it is on another host. Every command gets an
  answer: a refusal always, a success when it carried a ``request_id``;
- with a store, the host holds a lease in it and takes over orphaned turns (``durable``);
  it never calls the store on its actor thread (``journal``), so a stop, a timer or another
  turn never waits for a store that is slow or away, and the fence comes on time: when its
  lease is not confirmed ``FENCE_AFTER`` seconds after the last renewal began, every turn's
  work stops here (``TurnActor.suspend``), and the turns are claimed back (or found taken
  over) once the store answers again;
- events leave in ACK-clocked batches per subscriber (``outbox``), so a turn costs a few
  messages whatever its number of deltas;
- the host forks no tool process: they come from its node's ``ToolPool``; the only
  processes it starts are stdio MCP servers, each through a guard that ends it with the
  host (``lifecycle.processes.dies_with_parent``);
- one dispatch style: Thespian's ``receiveMsg_<Class>`` (``ActorTypeDispatcher``); every
  turn command arrives in ``receiveMsg_TurnCommand``, and each TurnActor hands it to its
  rules (``turn.rules``).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ThespianWatch
from thespian.system.transport import TransmitIntent

from messages import (
    Consumed,
    ReportProgress,
    RunTool,
    StartTurn,
    StopTurn,
    Subscribe,
    ToolAlive,
    TurnCommand,
    Unsubscribe,
)

from ..handoff import Handoff
from ..logs import logger, quiet_third_party
from ..mailbox import Kernel
from ..mcp.session import close_all as close_mcp_sessions
from ..mcp.session import log_stderr, route_stderr
from ..mcp.session import open_count as open_mcp_sessions
from ..providers.client import STREAMS
from ..store import TurnStore, open_store
from ..telemetry.metrics import METRICS, armed
from ..telemetry.spans import RECORDER
from ..tools import standby
from ..turn.decisions import SetTimer, TimerFired
from ..wire.dispatch import Dispatcher
from ..wire.protocol import (
    Found,
    HostConfig,
    HostReady,
    Locate,
    NodesChanged,
    PoolFound,
    Recover,
    Relay,
    Shutdown,
    ShutdownDone,
    SpanBatch,
    WorkerExited,
    WorkerResult,
    WorkersLeased,
)
from .admission import Limits
from .answers import HostAnswers
from .draining import HostDraining
from .durable import Durable
from .journal import Journal
from .keeper import StoreKeeper
from .llm_actor import LLMActor
from .outbox import Outbox, Outboxes
from .registry import TurnRegistry
from .timers import Timers
from .tool_runner import ToolRunner
from .turn_actor import Suspension, TurnActor

__all__ = ["TurnHost"]


log = logger("greenroom.host")


class TurnHost(Dispatcher, HostDraining, HostAnswers):
    """Hosts many TurnActors, as host ``node/slot``; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        quiet_third_party()
        self.kernel = Kernel()
        self.handoff = Handoff()
        STREAMS.drive(standby.later, lambda: self.handoff.put(("streams",)))  # this thread runs it, up to 8 streams
        self.llm = LLMActor(self.kernel, self.handoff.put)
        self.tools = ToolRunner(self)
        self.registry = TurnRegistry(self)
        self.outboxes = Outboxes(self._send_tracked, self.handoff.put)
        self.durable: Durable | None = None
        self.keeper: StoreKeeper | None = None  # with a store: what the host does with it over time
        self.node = ""
        self.hold_outbox, self.release_outbox = self.outboxes.hold, self.outboxes.release  # by subscriber key
        self.slot = -1
        self.pool: Any = None
        self.directory: Any = None
        self.inline_async_tools = False
        self.timers_on: set[str] = set()
        self.timers = Timers(lambda delay: self.wakeupAfter(timedelta(seconds=delay), payload=("timers",)))
        self.shutting_down: Any = None
        self.ending_turns = False  # shutting down without a store: ShutdownDone waits for every turn's end
        self.owner: Any = None  # the Runtime's endpoint: where finished spans go
        route_stderr(lambda where, line: self.put(("mcp_stderr", where, line)))  # logged on this thread

    # -- dispatch -------------------------------------------------------------------------

    def receiveMessage(self, message: Any, sender: Any) -> Any:
        with self.handoff:  # what threads hand over meanwhile is drained below, with no wake-up
            if isinstance(message, Relay):  # forwarded by a directory: answer the original sender
                message, sender = message.message, message.reply_to
            super().receiveMessage(message, sender)  # to receiveMsg_<Class>
            for _ in range(4):  # the stream loop, when this thread runs it: 4 x BUDGET passes at most
                STREAMS.run_ready()
                self.receiveMsg_WatchMessage(None, None)  # what the threads handed over meanwhile
                self.kernel.run()
                if not STREAMS.ready():  # a stream the turns started: its request leaves now
                    break
            spans = RECORDER.take() if RECORDER.finished else None
            if spans and self.owner is not None:  # to the Runtime's process, which exports them
                self.send(self.owner, SpanBatch(spans))
            metrics = METRICS.take(self.slot) if METRICS.dirty else None
            if metrics is not None and self.owner is not None:  # the same, for metrics (when armed)
                self.send(self.owner, metrics)
            self.outboxes.flush()
            if self.shutting_down is not None:
                self._maybe_shut()
        streams = STREAMS.fileno()
        return ThespianWatch([self.handoff.fd] if streams is None else [self.handoff.fd, streams])

    def receiveUnrecognizedMessage(self, message: Any, sender: Any) -> None:
        log().debug("TurnHost ignored %s", type(message).__name__)

    def receiveMsg_HostConfig(self, msg: HostConfig, sender: Any) -> None:
        self.slot, self.pool, self.directory = msg.slot, msg.pool, msg.directory
        self.owner = msg.owner
        METRICS.dirty = armed()  # a replacement host reports its (empty) state at once
        self.inline_async_tools = msg.inline_async_tools
        self.node = msg.node
        self.registry.held.hold_for = msg.hold
        self.registry.limit(Limits(msg.max_running, msg.max_queued))
        self.tools.keep_one()  # so that its first call waits for nothing
        if msg.store is None:
            self.send(sender, HostReady(msg.slot))
            return
        store = open_store(msg.store, quick=True)

        def leased() -> None:  # later, on this thread: ready once the store has its lease
            assert self.durable is not None
            self.send(sender, HostReady(msg.slot, self.durable.identity))

        caps = msg.capabilities
        self.durable = Durable(store, self.host_id, msg.node, self.myAddress, self.handoff.put, leased, caps)
        self.keeper = StoreKeeper(self, self.durable)

    # -- turns (``registry``) ---------------------------------------------------------------

    def receiveMsg_StartTurn(self, msg: StartTurn, sender: Any) -> None:
        self.tools.expect(msg.tools)
        self.registry.start(msg, sender)

    def receiveMsg_Subscribe(self, msg: Subscribe, sender: Any) -> None:
        self.registry.subscribe(msg, sender)

    def receiveMsg_TurnCommand(self, msg: TurnCommand, sender: Any) -> None:
        self.registry.command(msg, sender)

    def _to_turn(self, msg: Consumed | Unsubscribe | ReportProgress, sender: Any) -> None:
        self.registry.to_turn(msg, sender)

    receiveMsg_Consumed = receiveMsg_Unsubscribe = receiveMsg_ReportProgress = _to_turn

    def receiveMsg_Locate(self, msg: Locate, sender: Any) -> None:
        self.registry.locate(msg, sender)

    def receiveMsg_Found(self, msg: Found, sender: Any) -> None:
        self.registry.found(msg)

    def receiveMsg_Recover(self, msg: Recover, sender: Any) -> None:
        self.registry.recover(msg, sender)

    @property
    def turns(self) -> dict[str, TurnActor]:
        return self.registry.turns

    @property
    def store(self) -> TurnStore | None:
        return self.durable.store if self.durable is not None else None

    @property
    def journal(self) -> Journal | None:
        return self.durable.journal if self.durable is not None else None

    @property
    def host_id(self) -> str:
        return f"{self.node}/{self.slot}"

    def forget(self, turn: TurnActor) -> None:
        self.registry.forget(turn)

    def suspended(self, turn: TurnActor, kind: Suspension, why: str) -> None:
        self.registry.suspended_here(turn, kind, why)

    def redeliver(self, message: Any, sender: Any) -> None:
        self.registry.redeliver(message, sender)

    def turn_ended(self, turn: TurnActor) -> None:
        self.registry.turn_ended(turn)

    def parked(self, turn: TurnActor, parked: bool) -> None:
        self.registry.park(turn, parked)

    # -- timers ---------------------------------------------------------------------------

    def set_timer(self, turn: TurnActor, timer: SetTimer) -> None:
        self.timers.add(timer.delay, ("turn", turn.turn_id, TimerFired(timer.name, timer.token)))

    def every(self, name: str, seconds: float) -> None:
        """Wake this host with ``(name,)`` in ``seconds``, unless such a wakeup is due."""
        if name not in self.timers_on:
            self.timers_on.add(name)
            self.wakeupAfter(timedelta(seconds=seconds), payload=(name,))

    def receiveMsg_WakeupMessage(self, msg: Any, sender: Any) -> None:
        for what, *args in self.timers.due() if msg.payload == ("timers",) else [msg.payload]:
            if what == "turn" and (turn := self.turns.get(args[0])) is not None:
                turn.tell(args[1], None)
            elif what == "linger":
                self.registry.evict(args[0])
            elif what == "fence" and self.keeper is not None:
                self.keeper.fence()
            elif what == "hold_due":  # a held command's sender stops waiting soon
                self.registry.expire_held()
        what = msg.payload[0]
        if what == "liveness":
            self.tools.check_liveness()
        elif what == "trim":
            self.tools.trim()
        elif what == "hold":
            self.timers_on.discard("hold")
            self.registry.expire_held()
        elif what == "store":
            self.timers_on.discard("store")
            assert self.keeper is not None
            self.keeper.tick()
        elif what == "shutdown":
            self._shut()

    # -- tools ----------------------------------------------------------------------------

    def receiveMsg_WorkerResult(self, msg: WorkerResult, sender: Any) -> None:
        self.tools.on_result(msg, sender)

    def receiveMsg_WorkersLeased(self, msg: WorkersLeased, sender: Any) -> None:
        self.tools.on_leased(msg)

    def receiveMsg_WorkerExited(self, msg: WorkerExited, sender: Any) -> None:
        self.tools.on_worker_exited(msg.worker)

    def receiveMsg_PoolFound(self, msg: PoolFound, sender: Any) -> None:
        self.tools.on_pool_found(msg)

    def receiveMsg_NodesChanged(self, msg: NodesChanged, sender: Any) -> None:
        self.tools.pools.clear()  # found again as calls need them
        if self.owner is None:
            self.owner = msg.owner  # a member's host: the leader's Runtime exports its spans

    def receiveMsg_ToolAlive(self, msg: ToolAlive, sender: Any) -> None:
        self.tools.on_alive(msg.turn_id, msg.call_id, msg.node)

    def progress(self, turn: TurnActor, run: RunTool, data: Any) -> None:
        """Progress of an inline tool: the same path as a tool process's ``ReportProgress``."""
        report = ReportProgress(turn_id=turn.turn_id, call_id=run.call.id, seq=0, data=data, attempt=run.attempt,
                                epoch=run.epoch)  # fmt: skip
        turn.tell(report, None)

    def receiveMsg_WatchMessage(self, msg: Any, sender: Any) -> None:
        llm: list[Any] = []
        for item in self.handoff.drain():
            if item[0] == "llm":
                llm.append((item[1], item[2]))
            elif item[0] == "tool":
                self.tools.on_inline(item[1], item[2], item[3])
            elif item[0] == "outbox":
                self.outboxes.acknowledged(item[1])
            elif item[0] == "lost":
                self._drop_subscriber(item[1])
            elif item[0] == "journal":  # a store call's answer: (done, value, error)
                item[1](item[2], item[3])
            elif item[0] == "lease" and self.keeper is not None:
                self.keeper.renewed(item[1])
            elif item[0] == "inbox" and self.keeper is not None:  # the store's notifications are up or down
                self.keeper.notifications(item[1])
            elif item[0] == "command":  # the store says a command waits (its notifications)
                self.registry.stored_commands(item[1])
            elif item[0] == "mcp_stderr":
                log_stderr(item[1], item[2])
            # ("streams",): the stream loop's thread gave the loop back; run_ready takes it
        if llm:
            self.llm.on_outputs(llm)

    def put(self, item: Any) -> None:  # thread-safe: queue ``item`` for the actor thread, wake it
        self.handoff.put(item)

    # -- events (replies: ``answers``) ---------------------------------------------------

    def deliver(self, key: str, to: Any, payload: bytes, kind: str) -> None:
        """Queue one encoded event for the subscriber ``to`` (``key`` is ``str(to)``)."""
        self.outboxes.deliver(key, to, payload, kind)

    def _drop_subscriber(self, outbox: Outbox) -> None:
        log().warning("subscriber %s cannot be reached; the turns here stop sending to it", outbox.key)
        for turn in self.turns.values():
            turn.readers.remove(outbox.key)
        self.outboxes.forget(outbox)

    def _send_tracked(self, to: Any, message: Any, done: Any) -> None:
        def finished(ok: bool) -> None:  # in Thespian's ACK callback: send nothing from here
            done(ok)
            if self.shutting_down is not None:
                self.handoff.put(("shutdown_check",))  # the next handler sends ShutdownDone if due

        intent = TransmitIntent(
            to, message, onSuccess=lambda r, i: finished(True), onError=lambda r, i: finished(False)
        )
        self._myRef._send_intent(intent)

    # -- the end --------------------------------------------------------------------------

    def receiveMsg_Shutdown(self, msg: Shutdown, sender: Any) -> None:
        """Stop every live turn (without a store) or leave it to recovery (with one)."""
        self.shutting_down, self.ending_turns = sender, not msg.keep_turns
        self.registry.start_queued()  # each with a stop behind its start: a queued turn does not outlive a close
        if msg.keep_turns and self.durable is not None:
            for turn in list(self.turns.values()):  # left to the store, for the next runtime on it
                if not turn.ended:
                    if turn.trace is not None:
                        turn.trace.suspend()  # a recovered turn gets a new span
                    turn.suspend("the runtime is closing", "closing")
            self.durable.leave()  # a shared store's other hosts take the turns over at once
        self.tools.stop_all("the runtime is closing", end_waiting=not msg.keep_turns)
        close_mcp_sessions(lambda: self.put(("mcp_closed",)))  # wakes _maybe_shut once they are
        self.llm.close()
        if not msg.keep_turns:
            for turn in list(self.turns.values()):
                if not turn.ended:
                    turn.tell(StopTurn(turn_id=turn.turn_id, reason="the runtime is closing", cause="shutdown"), None)
        # a stopped turn ends once its calls have: within their stop_grace (``tools.worker``)
        graces = [t.state.options.stop_grace for t in self.turns.values() if not t.ended and not msg.keep_turns]
        self.wakeupAfter(timedelta(seconds=1.0 + max(graces, default=0.0)), payload=("shutdown",))

    def _maybe_shut(self) -> None:
        ending = self.ending_turns and any(not t.ended for t in self.turns.values())
        if open_mcp_sessions() == 0 and self.outboxes.all_idle and not ending:
            self._shut()

    def _shut(self) -> None:
        if self.shutting_down is not None:
            self.send(self.shutting_down, ShutdownDone(self.slot))
            self.shutting_down = None

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        self.llm.close()
        self.tools.stop_all("the host is exiting")
        close_mcp_sessions()
        if self.durable is not None:
            self.durable.close()  # with a shared store, its turns are for the other hosts at once

    def receiveMsg_PoisonMessage(self, msg: Any, sender: Any) -> None:
        log().warning("TurnHost %d: a message could not be delivered: %s", self.slot, type(msg.poisonMessage).__name__)

    def receiveMsg_ChildActorExited(self, msg: Any, sender: Any) -> None: ...

    def __repr__(self) -> str:
        return f"<TurnHost {self.slot} pid={os.getpid()}>"
