"""TurnHost: one OS process that hosts many TurnActors and the LLMActor that serves them.

The directory starts one TurnHost per core (``Runtime(hosts=...)``); a turn lives on the
host of its slot (``names.slot_of(turn_id)``), so the Runtime, a supervisor or the command
line reach it without asking anyone. Inside, each TurnActor is an actor of its own (a FIFO
mailbox, its ``TurnRules`` and state; see ``kernel``); the host routes each Thespian
message to the right mailbox, runs the mailboxes, then sends what they produced.

Guarantees:

- a command that arrives before its turn (Thespian does not order messages, not even from
  one sender) is held (``held``) and applied right after the turn starts, before its first
  step; one still unclaimed after ``HOLD`` seconds is answered ``unknown_turn``. Every command gets
  an answer: a refusal always, a success when it carried a ``request_id``;
- a ``Subscribe`` or a command for a turn that has ended is answered for it (a stop or a
  cancel "no effect", anything else ``turn_finished``); an unknown ``Subscribe`` is refused
  at once;
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
from collections import OrderedDict
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ThespianWatch
from thespian.system.transport import TransmitIntent

from messages import (
    Consumed,
    ControlReply,
    ReportProgress,
    StartTurn,
    StopTurn,
    Subscribe,
    ToolAlive,
    TurnCommand,
    Unsubscribe,
    reply_for,
    unaddressed,
)

from ..errors import StoreError
from ..handoff import Handoff
from ..logs import logger, quiet_third_party
from ..mailbox import Kernel
from ..mcp.session import close_all as close_mcp_sessions, log_stderr, open_count as open_mcp_sessions, route_stderr
from ..store.sqlite import SQLiteStore
from ..telemetry.metrics import METRICS, armed
from ..telemetry.spans import RECORDER
from ..turn.decisions import SetTimer, TimerFired
from ..wire.dispatch import Dispatcher
from ..wire.protocol import (
    HostConfig,
    HostReady,
    PoolFound,
    PoolsChanged,
    Recover,
    Recovered,
    Relay,
    Shutdown,
    ShutdownDone,
    SpanBatch,
    WorkerExited,
    WorkerResult,
    WorkersLeased,
)
from .held import HOLD, HeldCommands
from .llm_actor import LLMActor
from .outbox import Outbox, Outboxes
from .stored import is_stored, recoverable, replay
from .timers import Timers
from .tool_runner import ToolRunner
from .turn_actor import RECOVER, STORED_COMMANDS, TurnActor

__all__ = ["TurnHost"]

_REMEMBER_ENDED = 10_000


log = logger("greenroom.host")


class TurnHost(Dispatcher):
    """Hosts the TurnActors of one slot; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        quiet_third_party()
        self.kernel = Kernel()
        self.handoff = Handoff()
        self.llm = LLMActor(self.kernel, self.handoff.put)
        self.tools = ToolRunner(self)
        self.turns: dict[str, TurnActor] = {}
        self.ended: OrderedDict[str, str] = OrderedDict()
        self.held = HeldCommands()
        self.outboxes = Outboxes(self._send_tracked, self.handoff.put)
        self.hold_outbox, self.release_outbox = self.outboxes.hold, self.outboxes.release  # by subscriber key
        self.store: SQLiteStore | None = None
        self.slot = -1
        self.pool: Any = None
        self.directory: Any = None
        self.inline_async_tools = False
        self.timers_on: set[str] = set()
        self.timers = Timers(lambda delay: self.wakeupAfter(timedelta(seconds=delay), payload=("timers",)))
        self.shutting_down: Any = None
        self.owner: Any = None  # the Runtime's endpoint: where finished spans go
        route_stderr(lambda where, line: self.put(("mcp_stderr", where, line)))  # logged on this thread

    # -- dispatch -------------------------------------------------------------------------

    def receiveMessage(self, message: Any, sender: Any) -> Any:
        with self.handoff:  # what threads hand over meanwhile is drained below, with no wake-up
            if isinstance(message, Relay):  # forwarded by a directory: answer the original sender
                message, sender = message.message, message.reply_to
            super().receiveMessage(message, sender)  # to receiveMsg_<Class>
            self.receiveMsg_WatchMessage(None, None)  # what the threads handed over meanwhile
            self.kernel.run()
            spans = RECORDER.take() if RECORDER.finished else None
            if spans and self.owner is not None:  # to the Runtime's process, which exports them
                self.send(self.owner, SpanBatch(spans))
            metrics = METRICS.take(self.slot) if METRICS.dirty else None
            if metrics is not None and self.owner is not None:  # the same, for metrics (when armed)
                self.send(self.owner, metrics)
            self.outboxes.flush()
            if self.shutting_down is not None:
                self._maybe_shut()
        return ThespianWatch([self.handoff.fd])

    def receiveUnrecognizedMessage(self, message: Any, sender: Any) -> None:
        log().debug("TurnHost ignored %s", type(message).__name__)

    def receiveMsg_HostConfig(self, msg: HostConfig, sender: Any) -> None:
        self.slot, self.pool, self.directory = msg.slot, msg.pool, msg.directory
        self.owner = msg.owner
        METRICS.dirty = armed()  # a replacement host reports its (empty) state at once
        self.inline_async_tools = msg.inline_async_tools
        if msg.store_path is not None:
            self.store = SQLiteStore(msg.store_path)
            self._every("store", 0.5)
        self.tools._top_up()
        self.send(sender, HostReady(msg.slot))

    # -- turns ----------------------------------------------------------------------------

    def receiveMsg_StartTurn(self, msg: StartTurn, sender: Any) -> None:
        tid = msg.turn_id
        if tid in self.turns or tid in self.ended or is_stored(self.store, tid):
            self.reply(sender, reply_for(msg, False, "invalid", f"turn id {tid} is already in use"))
            return
        turn = TurnActor.starting(self, msg)
        self.turns[tid] = turn
        turn.tell(msg, sender)
        for command, who in self.held.claim(tid):
            turn.tell(command, who)
        if self.shutting_down is not None:  # a straggler: it ends as the others did
            turn.tell(StopTurn(turn_id=tid, reason="the runtime is closing", cause="shutdown"), None)

    def receiveMsg_Subscribe(self, msg: Subscribe, sender: Any) -> None:
        turn = self.turns.get(msg.turn_id)
        if turn is not None:
            turn.tell(msg, sender)
        elif is_stored(self.store, msg.turn_id):
            assert self.store is not None
            failed = replay(self.store, msg.turn_id, msg.since, sender, self.deliver)
            self.outboxes.unless_held(str(sender))  # forgotten once these are acknowledged
            if failed is not None:
                self.reply(sender, reply_for(msg, False, "invalid", failed))
            elif msg.request_id is not None:
                self.reply(sender, reply_for(msg, True, None, "the turn has ended; its events follow from the store"))
        elif msg.turn_id in self.ended:
            self.reply(sender, reply_for(msg, False, "turn_finished", f"turn {msg.turn_id} has ended"))
        else:
            self.reply(sender, reply_for(msg, False, "unknown_turn", f"no turn {msg.turn_id}"))

    def _to_turn(self, msg: Consumed | Unsubscribe | ReportProgress, sender: Any) -> None:
        """To the turn's own mailbox, if it is here (else it is moot)."""
        turn = self.turns.get(msg.turn_id)
        if turn is not None:
            turn.tell(msg, sender)

    receiveMsg_Consumed = receiveMsg_Unsubscribe = receiveMsg_ReportProgress = _to_turn

    def receiveMsg_TurnCommand(self, msg: TurnCommand, sender: Any) -> None:
        refused = unaddressed(msg)
        if refused is not None:
            self.reply(sender, refused)
            return
        tid = str(msg.turn_id)
        turn = self.turns.get(tid)
        if turn is not None:
            turn.tell(msg, sender)
        elif tid in self.ended or is_stored(self.store, tid):
            self._answer_for_ended(msg, sender, self.ended.get(tid, "see the store"))
        else:
            self.held.hold(tid, msg, sender)
            self._every("hold", HOLD / 2)

    def _answer_for_ended(self, msg: Any, sender: Any, reason: str) -> None:
        if msg.kind in ("stop_turn", "cancel_turn"):
            if msg.request_id is not None:
                self.reply(sender, reply_for(msg, True, None, "the turn has already ended"))
        else:
            self.reply(sender, reply_for(msg, False, "turn_finished", f"turn {msg.turn_id} has ended ({reason})"))

    def receiveMsg_Recover(self, msg: Recover, sender: Any) -> None:
        turn_ids = [t for t in msg.turn_ids if t not in self.turns]
        found, errors = recoverable(self.store, turn_ids) if self.store is not None else ([], {})
        for state, commands in found:
            turn = self.turns[state.turn_id] = TurnActor.recovering(self, state)
            for command in commands:
                turn.tell(command, None)
            turn.tell(RECOVER, None)
        self.send(sender, Recovered(self.slot, [state.turn_id for state, _ in found], errors))

    def turn_ended(self, turn: TurnActor) -> None:
        self.timers.add(turn.state.options.linger, ("linger", turn.turn_id))

    def _evict(self, turn_id: str) -> None:
        """Forget a turn that ended ``linger`` s ago, once every reader has caught up (or was
        dropped, ``TurnActor.let_go``)."""
        turn = self.turns.get(turn_id)
        if turn is None:
            return
        wait = turn.let_go()
        if wait is not None:
            self.timers.add(wait, ("linger", turn_id))
            return
        del self.turns[turn_id]
        self.ended[turn_id] = turn.state.finish_reason or "error"
        while len(self.ended) > _REMEMBER_ENDED:
            self.ended.popitem(last=False)

    # -- timers ---------------------------------------------------------------------------

    def set_timer(self, turn: TurnActor, timer: SetTimer) -> None:
        self.timers.add(timer.delay, ("turn", turn.turn_id, TimerFired(timer.name, timer.token)))

    def _every(self, name: str, seconds: float) -> None:
        if name not in self.timers_on:
            self.timers_on.add(name)
            self.wakeupAfter(timedelta(seconds=seconds), payload=(name,))

    def receiveMsg_WakeupMessage(self, msg: Any, sender: Any) -> None:
        for what, *args in self.timers.due() if msg.payload == ("timers",) else [msg.payload]:
            if what == "turn" and (turn := self.turns.get(args[0])) is not None:
                turn.tell(args[1], None)
            elif what == "linger":
                self._evict(args[0])
        what = msg.payload[0]
        if what == "liveness":
            self.tools.check_liveness()
        elif what == "hold":
            self.timers_on.discard("hold")
            self._expire_held()
        elif what == "store":
            self.timers_on.discard("store")
            self._poll_store()
        elif what == "shutdown":
            self._shut()

    def _expire_held(self) -> None:
        for tid, command, who in self.held.expired():
            self.reply(who, reply_for(command, False, "unknown_turn", f"no turn {tid}"))
        if self.held:
            self._every("hold", HOLD / 2)

    def _poll_store(self) -> None:
        """Commands the command line wrote to the store reach a turn whatever it waits on."""
        assert self.store is not None
        try:
            waiting = self.store.turns_with_commands()
        except StoreError:
            waiting = []
        for tid in waiting:
            turn = self.turns.get(tid)
            if turn is not None:
                turn.tell(STORED_COMMANDS, None)
        self._every("store", 0.5)

    # -- tools ----------------------------------------------------------------------------

    def receiveMsg_WorkerResult(self, msg: WorkerResult, sender: Any) -> None:
        self.tools.on_result(msg, sender)

    def receiveMsg_WorkersLeased(self, msg: WorkersLeased, sender: Any) -> None:
        self.tools.on_leased(msg)

    def receiveMsg_WorkerExited(self, msg: WorkerExited, sender: Any) -> None:
        self.tools.on_worker_exited(msg.worker)

    def receiveMsg_PoolFound(self, msg: PoolFound, sender: Any) -> None:
        self.tools.on_pool_found(msg)

    def receiveMsg_PoolsChanged(self, msg: PoolsChanged, sender: Any) -> None:
        self.tools.pools.clear()

    def receiveMsg_ToolAlive(self, msg: ToolAlive, sender: Any) -> None:
        self.tools.on_alive(msg.turn_id, msg.call_id, msg.node)

    def progress(self, turn: TurnActor, call_id: str, data: Any) -> None:
        """Progress of an inline tool: the same path as a tool process's ``ReportProgress``."""
        turn.tell(ReportProgress(turn_id=turn.turn_id, call_id=call_id, seq=0, data=data), None)

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
            elif item[0] == "mcp_stderr":
                log_stderr(item[1], item[2])
        if llm:
            self.llm.on_outputs(llm)

    def put(self, item: Any) -> None:  # thread-safe: queue ``item`` for the actor thread, wake it
        self.handoff.put(item)

    # -- events and replies ---------------------------------------------------------------

    def deliver(self, key: str, to: Any, payload: bytes, kind: str) -> None:
        """Queue one encoded event for the subscriber ``to`` (``key`` is ``str(to)``)."""
        self.outboxes.deliver(key, to, payload, kind)

    def _drop_subscriber(self, outbox: Outbox) -> None:
        log().warning("subscriber %s cannot be reached; the turns here stop sending to it", outbox.key)
        for turn in self.turns.values():
            turn._unsubscribe(outbox.key)
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

    def reply(self, to: Any, reply: ControlReply) -> None:
        if to is not None:
            self.send(to, reply)

    # -- the end --------------------------------------------------------------------------

    def receiveMsg_Shutdown(self, msg: Shutdown, sender: Any) -> None:
        """Stop every live turn (without a store) or leave it to recovery (with one)."""
        self.shutting_down = sender
        self.tools.stop_all("the runtime is closing")
        close_mcp_sessions(lambda: self.put(("mcp_closed",)))  # wakes _maybe_shut once they are
        self.llm.close()
        if not msg.keep_turns:
            for turn in list(self.turns.values()):
                if not turn.ended:
                    turn.tell(StopTurn(turn_id=turn.turn_id, reason="the runtime is closing", cause="shutdown"), None)
        for turn in self.turns.values() if msg.keep_turns else ():
            if turn.trace is not None:
                turn.trace.suspend()  # left to the store: a recovered turn gets a new span
        self.wakeupAfter(timedelta(seconds=1.0), payload=("shutdown",))

    def _maybe_shut(self) -> None:
        if open_mcp_sessions() == 0 and self.outboxes.all_idle:
            self._shut()

    def _shut(self) -> None:
        if self.shutting_down is not None:
            self.send(self.shutting_down, ShutdownDone(self.slot))
            self.shutting_down = None

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        self.llm.close()
        self.tools.stop_all("the host is exiting")
        close_mcp_sessions()

    def receiveMsg_PoisonMessage(self, msg: Any, sender: Any) -> None:
        log().warning("TurnHost %d: a message could not be delivered: %s", self.slot, type(msg.poisonMessage).__name__)

    def receiveMsg_ChildActorExited(self, msg: Any, sender: Any) -> None: ...

    def __repr__(self) -> str:
        return f"<TurnHost {self.slot} pid={os.getpid()}>"
