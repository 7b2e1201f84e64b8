"""Where the console reads turns from and sends commands to: a store, or a Runtime's streams.

- ``StoreSource``: every turn of a store (live ones are written at each transition, before
  anything is carried out, so the store is as live as the turn), and the queued ones of the
  Runtime given (in no store until they start): the list from
  ``TurnStore.summaries``, with each turn's host and whether a live host holds it
  (``cluster.holders``, read again at most every ``HOSTS_EVERY`` seconds, so a host that
  dies shows within that of its lease running out), each turn's events with the time each
  was written, its snapshot for what waits for a decision. Commands go to the Runtime
  given, else (a SQLite file) to the runtime running on the store, else to the store's
  inbox; a PostgreSQL store's inbox wakes the turn's host, whose reply is waited for
  (``commands``).
- ``RuntimeSource``: a Runtime without a store: the turns started or attached through it
  (it sees each stream as it opens) and their sub-agents (whose events reach the parent's
  stream), with the time each event reached this process and the host each stream comes
  from. It keeps the last ``KEEP`` turns. A turn it has not seen is attached on first
  request.

Both are thread-safe and raise ``UnknownTurn`` for a turn they cannot find.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from messages import ControlReply, Message, RespondToApprovals, TurnState

from ..cluster.holders import Holders, node_of
from ..errors import ControlRejected, SnapshotError, TurnTimeout
from ..store import open_store
from ..store.base import TurnSummary, is_url
from . import model
from .commands import RemoteRuntimes, offline, through_store
from .ports import RuntimeFace, StreamFace
from .timeline import Timed

__all__ = ["HOSTS_EVERY", "KEEP", "RuntimeSource", "Source", "StoreSource", "UnknownTurn"]

KEEP = 1000  # turns a RuntimeSource remembers
HOSTS_EVERY = 1.0  # seconds a StoreSource keeps what it read of the live hosts


class UnknownTurn(LookupError):
    """No such turn here."""


class Source:
    """What the console app needs from where turns are (see the module docstring)."""

    kind = "source"
    timeout = 10.0

    def version(self) -> Any:
        """A value that changes whenever the list changes."""
        raise NotImplementedError

    def rows(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def turn_version(self, turn_id: str) -> Any:
        """A value that changes whenever the turn changes; raises ``UnknownTurn``."""
        raise NotImplementedError

    def events(self, turn_id: str) -> list[Timed]:
        raise NotImplementedError

    def view(self, turn_id: str, events: list[Timed]) -> dict[str, Any]:
        raise NotImplementedError

    def send(self, command: Message) -> ControlReply:
        raise NotImplementedError

    def about(self) -> dict[str, Any]:
        raise NotImplementedError

    def nodes(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Each node with its live hosts and the unfinished turns they hold, and how many such
        turns no live host holds (``rows``: the list, as ``rows()`` gave it)."""
        return {"nodes": [], "unheld": 0}

    def close(self) -> None:
        pass


class StoreSource(Source):
    """Every turn of a store; see the module docstring."""

    kind = "store"

    def __init__(self, path: str, runtime: RuntimeFace | None = None) -> None:
        self.store = open_store(path, create=runtime is not None)
        self.path = self.store.location  # a URL without its password
        self.shared = is_url(path)  # PostgreSQL: commands through its inbox, answered by the turn's host
        self.runtime = runtime
        self.remote = RemoteRuntimes()
        self._lock = threading.Lock()
        self._events: dict[str, list[Timed]] = {}
        self._rows: tuple[Any, list[dict[str, Any]]] = (None, [])
        self._holders: tuple[float, Holders] = (-HOSTS_EVERY, Holders({}))
        self._summaries: tuple[Any, list[Any]] = (None, [])

    def holders(self) -> Holders:
        """The live hosts, read at most every ``HOSTS_EVERY`` seconds."""
        with self._lock:
            at, holders = self._holders
        if time.monotonic() - at >= HOSTS_EVERY:
            holders = Holders.of(self.store, self.path)
            with self._lock:
                self._holders = (time.monotonic(), holders)
        return holders

    def version(self) -> Any:
        return (self.store.log.version(), self.holders().fingerprint(), tuple(self._queued()))

    def _queued(self) -> dict[str, str | None]:
        """The turns of the Runtime given still in their host's queue (the store has nothing
        of them until they start), and their hosts."""
        streams = self.runtime._inbound.open_streams() if self.runtime is not None else []
        return {
            tid: getattr(s, "host_id", None)
            for tid, s in streams
            if getattr(s, "admitted", None) == "queued" and not s.events
        }

    def rows(self) -> list[dict[str, Any]]:
        version = self.version()
        with self._lock:
            if self._rows[0] == version:
                return self._rows[1]
        summaries = self.store.log.summaries()
        stored = {s.turn_id for s in summaries}
        queued = [
            {**TurnSummary(turn_id=tid, status="queued").model_dump(mode="json"), "owner_host": host,
             "owner_node": node_of(host), "held": None, "children": []}
            for tid, host in self._queued().items() if tid not in stored
        ]  # fmt: skip
        holders = self.holders()
        children: dict[str, list[str]] = {}
        for s in reversed(summaries):  # oldest first
            if s.parent_turn_id is not None:
                children.setdefault(s.parent_turn_id, []).append(s.turn_id)
        out = queued + [
            {**s.model_dump(mode="json"), **holders.fields(s), "children": children.get(s.turn_id, [])}
            for s in summaries
        ]
        with self._lock:
            self._rows = (version, out)
            self._summaries = (version, summaries)
        return out

    def nodes(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        with self._lock:
            summaries = self._summaries[1]
        holders = self.holders()
        loads, unheld = holders.loads(summaries)
        nodes = [{"node": n.node, "hosts": n.hosts if holders.shared else None, "turns": n.turns} for n in loads]
        return {"nodes": nodes, "unheld": unheld}  # SQLite keeps no leases: its hosts are not counted

    def turn_version(self, turn_id: str) -> Any:
        version = self.store.log.version(turn_id)
        if version is None:
            raise UnknownTurn(f"no turn {turn_id}")
        return (version, self.holders().fingerprint())

    def events(self, turn_id: str) -> list[Timed]:
        """Every event of the turn (kept here: a turn's log only grows)."""
        with self._lock:
            known = list(self._events.get(turn_id, ()))
        new = self.store.log.timed_events(turn_id, len(known))
        if not known and not new and not self.store.log.exists(turn_id) and turn_id not in self._queued():
            raise UnknownTurn(f"no turn {turn_id}")
        if new:
            with self._lock:
                mine = self._events.setdefault(turn_id, [])
                if len(mine) == len(known):
                    mine.extend(new)
            known.extend(new)
        return known

    def _state(self, turn_id: str) -> TurnState:
        try:
            return self.store.log.load(turn_id)
        except KeyError:
            raise UnknownTurn(f"no turn {turn_id}") from None

    def view(self, turn_id: str, events: list[Timed]) -> dict[str, Any]:
        try:
            state = self._state(turn_id)
        except SnapshotError as exc:
            line = {"turn_id": turn_id, "status": "unreadable", "error": str(exc), "children": []}
            return model.view(turn_id, events, line=line, pending=[], now=time.time())
        rows = {r["turn_id"]: r for r in self.rows()}
        pending = model.pending_from_state(state, events)
        for child in self._descendants(turn_id, rows):
            try:
                child_state = self._state(child)
            except (UnknownTurn, SnapshotError):
                continue
            pending.extend(model.pending_from_state(child_state, self.events(child)))
        line = dict(rows.get(turn_id) or model.row(turn_id, events))
        return model.view(turn_id, events, line=line, pending=pending, state=state, now=time.time())

    @staticmethod
    def _descendants(turn_id: str, rows: dict[str, dict[str, Any]]) -> list[str]:
        out: list[str] = []
        todo = list(rows.get(turn_id, {}).get("children", []))
        while todo:
            child = todo.pop(0)
            if child not in out:
                out.append(child)
                todo.extend(rows.get(child, {}).get("children", []))
        return out

    def send(self, command: Message) -> ControlReply:
        if self.runtime is not None:
            return self.runtime.control(command, self.timeout)
        if self.shared:
            return through_store(self.store, command, self.timeout).reply
        info = self.remote.running(self.path)
        if info is not None:
            return self.remote.send(info, command, self.timeout)
        return offline(self.store, command)

    def about(self) -> dict[str, Any]:
        if self.runtime is not None:
            where = f"the runtime of this process, with the store {self.path}"
        elif self.shared:
            hosts = len(self.holders().live)
            where = f"the store {self.path}, " + (f"{hosts} host(s) live" if hosts else "no host running on it")
        else:
            info = self.remote.running(self.path)
            where = f"the store {self.path}, " + (
                f"its runtime running (pid {info['pid']})" if info is not None else "no runtime running on it"
            )
        return {"source": self.kind, "where": where}

    def close(self) -> None:
        self.store.close()


class RuntimeSource(Source):
    """The turns of a Runtime without a store; see the module docstring."""

    kind = "runtime"

    def __init__(self, runtime: RuntimeFace) -> None:
        self.runtime = runtime
        self._lock = threading.Lock()
        self._streams: OrderedDict[str, StreamFace] = OrderedDict()
        self._decided: dict[tuple[str, str], tuple[str, str | None]] = {}  # (decision, by), by call
        self._offset = time.time() - time.monotonic()
        inbound = runtime._inbound
        inbound.on_open.append(self._opened)
        for _, stream in inbound.open_streams():
            self._opened(stream)

    def _opened(self, stream: StreamFace) -> None:
        with self._lock:
            known = self._streams.get(stream.turn_id)
            if known is None or stream._base <= known._base:  # the fuller one
                self._streams[stream.turn_id] = stream
            while len(self._streams) > KEEP:
                self._streams.popitem(last=False)

    def _timed(self, stream: StreamFace) -> list[Timed]:
        with stream._cond:
            events = list(stream.events)
        out: list[Timed] = []
        for e in events:
            arrived = stream.received_at(e.seq)
            out.append((e, None if arrived is None else arrived + self._offset))
        return out

    def _all(self) -> dict[str, list[Timed]]:
        """Every turn's events: the streams', then the sub-agents' found in them."""
        with self._lock:
            streams = list(self._streams.items())
        out = {tid: self._timed(s) for tid, s in streams}
        todo = list(out.items())
        while todo:
            _, events = todo.pop()
            for child, child_events in model.child_events(events).items():
                if child not in out:
                    out[child] = child_events
                    todo.append((child, child_events))
        return out

    def version(self) -> Any:
        with self._lock:
            streams = list(self._streams.values())
        return (len(streams), sum(s.next_seq for s in streams))

    def rows(self) -> list[dict[str, Any]]:
        turns = self._all()
        children: dict[str, list[str]] = {}
        for tid, events in turns.items():
            parent = events[0][0].parent_turn_id if events else None
            if parent is not None:
                children.setdefault(parent, []).append(tid)
        rows = [self._row(tid, events, children.get(tid, [])) for tid, events in turns.items()]
        rows.sort(key=lambda r: r["created_at"] or 0.0, reverse=True)
        return rows

    def _row(self, turn_id: str, events: list[Timed], children: list[str]) -> dict[str, Any]:
        line = model.row(turn_id, events, children=children, pending=self._pending(events))
        with self._lock:
            stream = self._streams.get(turn_id)
        owner = getattr(stream, "host_id", None)  # a sub-agent's: not known here
        moving = getattr(stream, "moving", None)  # its host let it go: it is being found again
        status = f"{line['status']} (moving: {moving})" if moving and line["status"] != "finished" else line["status"]
        if not events and getattr(stream, "admitted", None) == "queued":  # in its host's queue: no event yet
            status = "queued"
        return {
            **line,
            "status": status,
            "owner": owner,
            "owner_host": owner,
            "owner_node": node_of(owner),
            "held": None,
        }

    def nodes(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        turns: dict[str, int] = {}
        for r in rows:
            if r["status"] != "finished" and r.get("owner_node"):
                turns[r["owner_node"]] = turns.get(r["owner_node"], 0) + 1
        return {"nodes": [{"node": n, "hosts": None, "turns": c} for n, c in sorted(turns.items())], "unheld": 0}

    def _pending(self, events: list[Timed]) -> list[dict[str, Any]]:
        pending = model.pending_from_events(events)
        for p in pending:
            p["decision"], p["decided_by"] = self._decided.get((p["turn_id"], p["call_id"]), (None, None))
        return pending

    def turn_version(self, turn_id: str) -> Any:
        events = self.events(turn_id)
        return (len(events), events[-1][0].seq if events else -1)

    def events(self, turn_id: str) -> list[Timed]:
        with self._lock:
            stream = self._streams.get(turn_id)
        if stream is not None:
            return self._timed(stream)
        found = self._all().get(turn_id)
        if found is not None:
            return found
        try:  # started elsewhere (a supervisor, say): follow it from here on
            self.runtime.attach(turn_id, timeout=self.timeout)
        except (ControlRejected, TurnTimeout) as exc:
            with self._lock:
                self._streams.pop(turn_id, None)  # the stream the refused attach opened
            raise UnknownTurn(
                f"no turn {turn_id}" if getattr(exc, "code", "") == "unknown_turn" else str(exc)
            ) from None
        with self._lock:
            stream = self._streams.get(turn_id)
        if stream is None:
            raise UnknownTurn(f"no turn {turn_id}")
        return self._timed(stream)

    def view(self, turn_id: str, events: list[Timed]) -> dict[str, Any]:
        turns = self._all()
        children = [t for t, evs in turns.items() if evs and evs[0][0].parent_turn_id == turn_id]
        pending = self._pending(events)
        return model.view(turn_id, events, line=self._row(turn_id, events, children), pending=pending, now=time.time())

    def send(self, command: Message) -> ControlReply:
        reply = self.runtime.control(command, self.timeout)
        if reply.ok and isinstance(command, RespondToApprovals):
            with self._lock:
                for r in command.responses:
                    decision = "approved" if r.approved else "denied"
                    self._decided[(command.turn_id, r.call_id)] = (decision, r.by or command.by)
        return reply

    def about(self) -> dict[str, Any]:
        return {
            "source": self.kind,
            "where": "the runtime of this process (no store: the turns started or attached here)",
        }

    def close(self) -> None:
        try:
            self.runtime._inbound.on_open.remove(self._opened)
        except ValueError:
            pass


def source_for(runtime: RuntimeFace | None = None, store: str | None = None) -> Source:
    """The source for a Runtime (its store's, if it has one) or for a store path."""
    if runtime is not None:
        if runtime.store_path is not None:
            return StoreSource(runtime.store_path, runtime)
        return RuntimeSource(runtime)
    if store is None:
        raise ValueError("a console needs a Runtime or a store")
    return StoreSource(store)
