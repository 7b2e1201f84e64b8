"""How a TurnHost runs its turns' tool calls: in tool processes lent by a pool, or inline.

- A call of a tool without ``requires`` runs in a process of the host's own node, lent by
  the local ``ToolPool``; the host keeps the processes it was lent and reuses each as soon
  as its previous call has reported (one call at a time per process). When none is free
  the call waits for the one the host asked for (a round trip: the pool keeps spares). A
  host asks for one at its start and at a ``StartTurn`` that may need one while it has none
  free, none asked for and no call waiting (``keep_one``); it keeps one free process, gives
  the others back once free for ``IDLE_KEPT`` s, and the pool retires what is beyond its spares.
- ``@tool(isolate=True)``: a process of its own, retired after the call.
- ``@tool(requires={...})``: a process lent by the pool of a node whose capabilities match,
  found through the directory; the call sends a heartbeat and one silent for
  ``lost_after`` seconds ends as failed (its host was lost). No matching node: the call
  fails at once, saying which capabilities are missing.
- ``@tool(inline=True)`` on an ``async def`` tool (or ``Runtime(inline_async_tools=True)``):
  a task in the host's own event loop thread, no process at all.

A process that exits while it runs a call (crash, kill, the pool's grace) fails that call
with a tool message saying so; the turn goes on.

Whatever order messages arrive in:

- a call waiting for a process (more calls than the pool may fork) can be stopped or
  cancelled while it waits: it never starts, and ends ``interrupted`` at once (a stopped
  turn waits for the end of each of its calls: this is this one's); an interrupt that
  reaches a tool process before the call it is for is kept there (``worker``), and the
  call never starts;
- every process this host was lent is remembered with where it came from (this node's
  pool, a fresh isolated one, or a placed call's node), so a result that comes late, or
  twice, is matched to its call or dropped, and its process goes back where it belongs,
  never into another pool's list.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest

from messages import InterruptTool, RunTool, ToolSpec

from ..tools.tool_actor import ToolActor
from ..turn.decisions import ToolLost
from ..turn.results import interrupted_content
from ..wire.protocol import FindPool, LeaseWorkers, NodeRecord, PoolFound, ReturnWorkers, WorkerResult, WorkersLeased
from .ports import HostedTurn, ToolHost

__all__ = ["ToolRunner"]

Key = tuple[str, str]  # (turn_id, call_id)

IDLE_KEPT = 2.0  # seconds a free local process beyond the host's first is kept for the next calls


@dataclass
class _Busy:
    turn: HostedTurn
    run: RunTool
    worker: Any  # None while waiting for a process; a ToolActor when inline
    where: str = ""  # "local", "isolated", "placed", "inline"
    node: str = ""
    last_heard: float = 0.0


def _requires_key(requires: dict[str, Any]) -> str:
    return json.dumps(requires, sort_keys=True)


class ToolRunner:
    """The tool side of one TurnHost; see the module docstring."""

    def __init__(self, host: ToolHost) -> None:
        self.host = host
        self.idle: list[Any] = []  # local processes lent to this host, free (the newest last)
        self.idle_since: dict[str, float] = {}  # each free local process: when it became free
        self.trimming = False  # a wakeup to give back free processes is due
        self.asked = 0  # local processes asked for, not yet lent
        self.waiting: deque[Key] = deque()  # local calls waiting for a process
        self.calls: dict[Key, _Busy] = {}
        self.by_worker: dict[str, Key] = {}
        self.placed_idle: dict[str, list[Any]] = {}  # requires -> free processes on matching nodes
        self.placed_waiting: dict[str, deque[Key]] = {}
        self.pools: dict[str, NodeRecord | None] = {}  # requires -> pool (None: none matches)
        self.origin: dict[str, str] = {}  # each process lent: "local", "isolated", or its requires key
        self.watching = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- starting calls -------------------------------------------------------------------

    def run(self, turn: HostedTurn, run: RunTool) -> None:
        key = (run.turn_id, run.call.id)
        busy = _Busy(turn, run, None)
        self.calls[key] = busy
        busy.where = self._where(run.spec)
        if busy.where == "inline":
            self._run_inline(key, busy)
        elif busy.where == "placed":
            busy.last_heard = time.monotonic()
            self._place(key, busy)
            self._watch()
        elif busy.where == "isolated":
            self.host.send(self.host.pool, LeaseWorkers(1, isolate=True))
        else:
            if self.idle:
                self._send_run(key, busy, self._take())
            else:
                self.waiting.append(key)
            self._top_up()

    def _where(self, spec: ToolSpec) -> str:
        """Where a call of ``spec`` runs: "inline", "placed", "isolated" or "local"."""
        if spec.is_async and (spec.inline or self.host.inline_async_tools):
            return "inline"
        if spec.requires:
            return "placed"
        return "isolated" if spec.isolate else "local"

    def expect(self, specs: list[ToolSpec]) -> None:
        """A turn that may call ``specs`` starts: if one of them runs in a local process,
        ``keep_one`` (the process is asked for while the turn's first LLM round runs)."""
        if any(self._where(spec) == "local" for spec in specs):
            self.keep_one()

    def keep_one(self) -> None:
        """Ask the pool for a process if this host has none free, has asked for none and has
        no call waiting: the one it keeps for its next call (see the module docstring)."""
        if not (self.idle or self.asked or self.waiting):
            self.asked += 1
            self.host.send(self.host.pool, LeaseWorkers(1))

    def _top_up(self) -> None:
        """Ask the pool for a process per waiting call (it keeps the spares forked)."""
        needed = len(self.waiting) - self.asked
        if needed > 0:
            self.asked += needed
            self.host.send(self.host.pool, LeaseWorkers(needed))

    def _send_run(self, key: Key, busy: _Busy, worker: Any) -> None:
        busy.worker = worker
        self.by_worker[str(worker)] = key
        self.host.send(worker, busy.run)

    def on_leased(self, msg: WorkersLeased) -> None:
        origin = "isolated" if msg.isolate else _requires_key(msg.requires) if msg.requires else "local"
        for worker in msg.workers:
            self.origin[str(worker)] = origin
        if msg.isolate:
            for worker in msg.workers:
                key = next((k for k, b in self.calls.items() if b.where == "isolated" and b.worker is None), None)
                if key is None:
                    self.host.send(worker, ActorExitRequest())
                else:
                    self._send_run(key, self.calls[key], worker)
            return
        if msg.requires:
            rk = _requires_key(msg.requires)
            self.placed_idle.setdefault(rk, []).extend(msg.workers)
            self._start_placed(rk)
            return
        self.asked = max(0, self.asked - len(msg.workers))
        for worker in msg.workers:
            self._free(worker)
        while self.waiting and self.idle:
            key = self.waiting.popleft()
            if key in self.calls:
                self._send_run(key, self.calls[key], self._take())
        self._top_up()

    # -- placed calls ---------------------------------------------------------------------

    def _place(self, key: Key, busy: _Busy) -> None:
        rk = _requires_key(busy.run.spec.requires)
        self.placed_waiting.setdefault(rk, deque()).append(key)
        if rk not in self.pools:
            self.pools[rk] = None
            self.host.send(self.host.directory, FindPool(busy.run.spec.requires))
            return
        self._start_placed(rk)

    def on_pool_found(self, msg: PoolFound) -> None:
        rk = _requires_key(msg.requires)
        self.pools[rk] = msg.pool
        if msg.pool is None:
            requires = ", ".join(f"{k}={json.dumps(v)}" for k, v in msg.requires.items())
            for key in self.placed_waiting.pop(rk, deque()):
                busy = self.calls.pop(key, None)
                if busy is not None:
                    message = (
                        f"Tool '{busy.run.spec.name}' cannot run: no node advertises the capabilities it needs"
                        f" ({requires})"
                    )
                    busy.turn.tell(ToolLost(key[1], message))
            self.pools.pop(rk, None)  # ask again next time: a node may join
            return
        self._start_placed(rk)

    def _start_placed(self, rk: str) -> None:
        waiting = self.placed_waiting.get(rk)
        pool = self.pools.get(rk)
        if not waiting or pool is None:
            return
        free = self.placed_idle.setdefault(rk, [])
        while waiting and free:
            key = waiting.popleft()
            busy = self.calls.get(key)
            if busy is not None:
                busy.node, busy.last_heard = pool.node, time.monotonic()
                self._send_run(key, busy, free.pop())
        if waiting:
            self.host.send(pool.pool, LeaseWorkers(len(waiting), json.loads(rk)))

    def on_alive(self, turn_id: str, call_id: str, node: str) -> None:
        busy = self.calls.get((turn_id, call_id))
        if busy is not None:
            busy.node, busy.last_heard = node or busy.node, time.monotonic()

    def _watch(self) -> None:
        if not self.watching:
            self.watching = True
            self.host.wakeupAfter(timedelta(seconds=0.5), payload=("liveness",))

    def check_liveness(self) -> None:
        """End placed calls whose node fell silent; keep watching while any runs."""
        self.watching = False
        now = time.monotonic()
        placed = [(k, b) for k, b in self.calls.items() if b.where == "placed" and b.worker is not None]
        for key, busy in placed:
            options = busy.turn.state.options
            if now - busy.last_heard > options.lost_after:
                self._forget(key)
                where = f"its node {busy.node}" if busy.node else "the node it was placed on"
                message = (
                    f"Tool '{busy.run.spec.name}' failed: {where} stopped answering for"
                    f" {options.lost_after:g} s (host lost)"
                )
                busy.turn.tell(ToolLost(key[1], message))
        if any(b.where == "placed" for b in self.calls.values()):
            self._watch()

    # -- inline async calls ---------------------------------------------------------------

    def _run_inline(self, key: Key, busy: _Busy) -> None:
        call = ToolActor(
            self.host.kernel,
            busy.run,
            lambda kind, payload: self.host.put(("tool", key, kind, payload)),
            loop=self._host_loop(),
        )
        busy.worker = call
        call.start()

    def _host_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="greenroom-inline-tools", daemon=True).start()
            self._loop = loop
        return self._loop

    def on_inline(self, key: Key, kind: str, payload: Any) -> None:
        busy = self.calls.get(key)
        if busy is None:
            return
        if kind == "progress":
            if not busy.worker.stopping:
                self.host.progress(busy.turn, busy.run, payload)
        elif kind == "result":
            del self.calls[key]
            busy.turn.tell(_as_result(busy.run, payload))

    # -- results, interrupts, losses ------------------------------------------------------

    def on_result(self, msg: WorkerResult, worker: Any) -> None:
        """A call's result: to its turn if the call is still known here (a late or repeated
        one is dropped); its process goes back where it came from."""
        name = str(worker)
        key = self.by_worker.pop(name, None)
        busy = self.calls.pop(key, None) if key is not None else None
        if busy is not None:
            busy.turn.tell(msg.result)
        origin = self.origin.get(name)
        if origin is None:
            return  # not a process of ours (any more)
        if msg.retiring or origin == "isolated":
            del self.origin[name]
            if origin == "isolated" and not msg.retiring:
                self.host.send(worker, ActorExitRequest())
            return
        if origin != "local":  # a placed call's process: free for that node's next call
            free = self.placed_idle.setdefault(origin, [])
            if all(str(w) != name for w in free):
                free.append(worker)
            self._start_placed(origin)
            return
        if any(str(w) == name for w in self.idle):
            return  # told twice
        if self.waiting:
            key = self.waiting.popleft()
            self._send_run(key, self.calls[key], worker)
        else:
            self._free(worker)

    def _take(self) -> Any:
        """The free process freed last, taken for a call."""
        worker = self.idle.pop()
        self.idle_since.pop(str(worker), None)
        return worker

    def _free(self, worker: Any) -> None:
        """``worker`` is free: kept for the next call, and given back to the pool if it is
        still free in ``IDLE_KEPT`` seconds while another is (see the module docstring)."""
        self.idle.append(worker)
        self.idle_since[str(worker)] = time.monotonic()
        if len(self.idle) > 1 and not self.trimming:
            self._trim_in(IDLE_KEPT)

    def _trim_in(self, seconds: float) -> None:
        self.trimming = True
        self.host.wakeupAfter(timedelta(seconds=seconds), payload=("trim",))

    def trim(self) -> None:
        """Give back to the pool every free process free for ``IDLE_KEPT`` seconds, but the
        one freed last; look again later while more than one is free."""
        self.trimming = False
        now = time.monotonic()
        back = [w for w in self.idle[:-1] if now - self.idle_since.get(str(w), now) >= IDLE_KEPT]
        if back:
            names = {str(w) for w in back}
            self.idle = [w for w in self.idle if str(w) not in names]
            for name in names:
                self.origin.pop(name, None)
                self.idle_since.pop(name, None)
            self.host.send(self.host.pool, ReturnWorkers(back))
        if len(self.idle) > 1:
            oldest = min(self.idle_since.get(str(w), now) for w in self.idle[:-1])
            self._trim_in(max(0.001, oldest + IDLE_KEPT - now))

    def interrupt(self, msg: InterruptTool, end_waiting: bool = True) -> None:
        key = (msg.turn_id, msg.call_id)
        busy = self.calls.get(key)
        if busy is None:
            return
        if busy.worker is None:  # still waiting for a process: it never starts, and ends now
            self._forget(key)
            if not end_waiting:  # the host's own stop: its turn is left to the store, or lost
                return
            what = "the call was stopped" if msg.mode == "stop" else "the call was cancelled"
            why = interrupted_content(f"{what} before it started", msg.reason)
            busy.turn.tell(_as_result(busy.run, ("interrupted", why)))
            return
        if busy.where == "inline":
            busy.worker.tell(msg)  # in this host's mailboxes, run after this handler
        else:
            self.host.send(busy.worker, msg)

    def on_worker_exited(self, worker: Any) -> None:
        name = str(worker)
        self.origin.pop(name, None)
        self.idle = [w for w in self.idle if str(w) != name]
        self.idle_since.pop(name, None)
        for free in self.placed_idle.values():
            free[:] = [w for w in free if str(w) != name]
        key = self.by_worker.pop(name, None)
        busy = self.calls.pop(key, None) if key is not None else None
        if busy is not None:
            message = f"Tool '{busy.run.spec.name}' failed: its process exited before the call finished"
            busy.turn.tell(ToolLost(key[1], message))  # type: ignore[index]
        self._top_up()

    def _forget(self, key: Key) -> None:
        busy = self.calls.pop(key, None)
        if busy is None:
            return
        if busy.worker is not None and busy.where != "inline":
            self.by_worker.pop(str(busy.worker), None)
        for queue in [self.waiting, *self.placed_waiting.values()]:
            if key in queue:
                queue.remove(key)

    def stop_all(self, reason: str, end_waiting: bool = False) -> None:
        """Stop every call of this host (the runtime is closing); a call waiting for a
        process never starts, and ends at once if ``end_waiting`` (its turn is stopped too)."""
        for (turn_id, call_id), busy in list(self.calls.items()):
            stop = InterruptTool(turn_id=turn_id, call_id=call_id, mode="stop", reason=reason)
            self.interrupt(stop, end_waiting)


def _as_result(run: RunTool, outcome: tuple[str, str]) -> Any:
    from messages import ToolResult

    return ToolResult(
        turn_id=run.turn_id, call_id=run.call.id, outcome=outcome[0], content=outcome[1],  # type: ignore[arg-type]
        attempt=run.attempt, epoch=run.epoch,
    )  # fmt: skip
