"""Where a Runtime's messages for turns go: the host each turn was placed on, or its directory.

A new turn is placed on a host of the cluster's table (``NodesChanged``, from the
directory) by rendezvous hashing over the hosts whose store is the Runtime's (none, or the
same one) on nodes with the capabilities the turn ``requires`` (``placement``: no
message, no load report, and a host that leaves moves only its own turns). The turn's
stream remembers its host (``TurnStream.host``); a command for a turn this Runtime neither
started nor follows goes where the turn would have been placed, and a host that does not
run it finds it (``cluster.routes``, ``host.registry``).

- Order: Thespian does not order messages, so a command for a turn whose ``StartTurn`` has
  not been acknowledged yet is held here and sent once it is (the host then has the turn);
  it can never overtake the start, however slow the network is. The same holds while a
  moved turn is being followed to its new host. A command that says how long its waiter
  waits (``answer_within``: ``waiting``) leaves with what is left of that wait, so that a
  host that does not know the turn answers before the waiter gives up.
- A message the transport could not deliver, after its own retries, fails its waiter: a
  command's future raises ``HostUnreachable``, a starting turn's stream ends ``host_lost``,
  and so do the commands held for it. A resend after a lost acknowledgement is not a
  failure: the receiver acknowledges it again and delivers it once (``wire.frames``).
- Flow control: each stream's window travels in ``StartTurn``/``Subscribe``, and what its
  readers read goes back to the host as ``Consumed``.
- A host that dies on this node is replaced (``HostReplaced``): the turns recovered there
  (with a store) are followed on it from the last event seen, and their commands sent to
  the dead host and not acknowledged are sent again there at once. A host that leaves the table
  (its node was lost) or says a turn moved (``Error(turn_moved)``): a durable turn is
  followed to the host that took it over (``follow``); the others end here with
  ``Error`` + ``Finish(error)``, never a hang.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from messages import Consumed, ControlReply, StartTurn, Subscribe, Unsubscribe, unaddressed

from ..cluster.membership import matches
from ..errors import ConfigurationError, HostUnreachable
from ..placement import rendezvous
from ..wire.protocol import HostReplaced, NodeRecord, NodesChanged, Shutdown
from .endpoint import Endpoint
from .follow import Lost
from .receiving import Inbound
from .stream import TurnStream

__all__ = ["Hosts", "addressed", "waiting"]

Held = list[tuple[Any, concurrent.futures.Future[ControlReply]]]


def addressed(command: Any) -> None:
    """Raise ``ConfigurationError`` unless ``command`` names its turn."""
    refused = unaddressed(command)
    if refused is not None:
        raise ConfigurationError(f"{refused.message} to be sent through the Runtime")


def waiting(message: Any, timeout: float | None) -> Any:
    """``message`` (a command, a ``Subscribe``) saying that its sender waits ``timeout``
    seconds for the answer (``answer_within``), unless it already says less."""
    if timeout is None or timeout <= 0 or "answer_within" not in getattr(type(message), "model_fields", {}):
        return message
    within = message.answer_within
    if within is not None and within <= timeout:
        return message
    return message.model_copy(update={"answer_within": timeout})


class Hosts:
    """The cluster's hosts as this Runtime places turns on them. Any thread may send
    through it; the table changes on the pump thread, one assignment at a time."""

    def __init__(
        self,
        endpoint: Endpoint,
        inbound: Inbound,
        directory: Any,
        local: NodeRecord,
        window: int | None = None,
        follow: Callable[[str, TurnStream, str | None, int | None], None] | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._inbound = inbound
        self._directory = directory
        self.store_id = local.store_id
        self._nodes: list[NodeRecord] = [local]
        self._local = local.node
        self.window = window
        self._follow = follow  # None: no store, a moved turn cannot be followed
        self._lock = threading.Lock()
        self._table_changed = threading.Condition()
        self._held: dict[str, Held] = {}  # turn id -> commands waiting for its start, or its new host
        # request id -> a command sent to a host and not yet acknowledged, and where it went:
        # sent again at once if that host is replaced (``replaced``), not when the transport gives up
        self._in_flight: dict[str, tuple[Any, concurrent.futures.Future[ControlReply], Any]] = {}
        self._answer_by: dict[str, float] = {}  # request id -> when its waiter stops waiting (monotonic)

    # -- where -----------------------------------------------------------------------------

    def placeable(self, requires: dict[str, Any]) -> dict[str, Any]:
        """The hosts a new turn with ``requires`` may go to: id to address."""
        return {
            host_id: address
            for node in self._nodes
            if node.store_id == self.store_id and not node.draining and matches(node.capabilities, requires)
            for host_id, address in node.host_ids()
        }

    def place(self, turn_id: str, requires: dict[str, Any]) -> Any:
        """The host a new turn goes to; ``ConfigurationError`` if none can take it."""
        hosts = self.placeable(requires)
        chosen = rendezvous(turn_id, hosts)
        if chosen is None:
            raise ConfigurationError(f"no host can run this turn: no node on this store has {requires}")
        return hosts[chosen]

    def wait_for(self, node: str, timeout: float) -> bool:
        """Wait until the table has ``node`` (its hosts can be placed on); False on timeout."""
        with self._table_changed:
            return self._table_changed.wait_for(lambda: any(n.node == node for n in self._nodes), timeout)

    def host_id(self, address: Any) -> str | None:
        """The id (``node/slot``) of the host at ``address``, if it is in the table."""
        for node in self._nodes:
            for host_id, at in node.host_ids():
                if at == address:
                    return host_id
        return None

    def _at(self, stream: TurnStream, address: Any) -> None:
        stream.host, stream.host_id, stream.moving = address, self.host_id(address), None

    def of(self, turn_id: str) -> Any:
        """Where to send a message for ``turn_id``: its host if this Runtime knows it, else
        the host it would have been placed on, else the directory."""
        stream = self._inbound.stream(turn_id)
        host = stream.host if stream is not None else None
        if host is None:
            try:
                host = self.place(turn_id, {})
            except ConfigurationError:
                host = self._directory
        return host

    # -- sending ----------------------------------------------------------------------------

    def open(self, turn_id: str, since: int, fresh: bool) -> TurnStream:
        """A stream for ``turn_id`` whose readers' progress goes back to its host."""
        consumed = lambda seq: self._endpoint.send(self.of(turn_id), Consumed(turn_id=turn_id, seq=seq))
        resend = lambda seq, unread_from: self._endpoint.send(  # no request id: the host answers with the events
            self.of(turn_id), Subscribe(turn_id=turn_id, since=seq, window=self.window, unread_from=unread_from)
        )
        return self._inbound.open_stream(turn_id, since, fresh, self.window, consumed, resend)

    def start(self, start: StartTurn) -> TurnStream:
        """Place the turn and send ``StartTurn``; the turn's stream, which follows its events from 0."""
        tid = start.turn_id
        host = self.place(tid, start.requires)
        stream = self.open(tid, 0, fresh=True)
        self._at(stream, host)
        with self._lock:
            self._held[tid] = []

        def lost() -> None:
            stream.lost("its host cannot be reached")
            self._inbound.unanswered(f"start:{tid}")  # its admission never comes (nor does a run() wait for it)
            for command, future in self._release(tid):
                _unreachable(command, future, self._inbound)

        def sent() -> None:
            for command, future in self._release(tid):
                self._send(command, future)

        message = start if start.window == self.window else start.model_copy(update={"window": self.window})
        self._endpoint.send(host, message, lost, sent)
        return stream

    def _release(self, turn_id: str) -> Held:
        with self._lock:
            return self._held.pop(turn_id, [])

    def command(self, command: Any) -> concurrent.futures.Future[ControlReply]:
        """Send a command to its turn's host (after its ``StartTurn``, or once the turn is
        found on its new host, if either is under way); the future gets the turn's
        ``ControlReply``. A future cancelled by its waiter is forgotten."""
        if command.request_id is None:
            command = command.model_copy(update={"request_id": uuid.uuid4().hex})
        rid = command.request_id
        future = self._inbound.expect(rid)
        future.add_done_callback(lambda f: self._inbound.forget(rid) if f.cancelled() else None)
        if getattr(command, "answer_within", None) is not None:
            self._answer_by[rid] = time.monotonic() + command.answer_within
            future.add_done_callback(lambda f: self._answer_by.pop(rid, None))
        with self._lock:
            held = self._held.get(command.turn_id)
            if held is not None:
                held.append((command, future))
                return future
        self._send(command, future)
        return future

    def _send(self, command: Any, future: concurrent.futures.Future[ControlReply]) -> None:
        tid, rid = command.turn_id, command.request_id
        answer_by = self._answer_by.get(rid)
        if answer_by is not None:  # it may have waited here (for its turn's start, its new host)
            command = command.model_copy(update={"answer_within": max(answer_by - time.monotonic(), 0.001)})
        target = self.of(tid)
        with self._lock:
            self._in_flight[rid] = (command, future, target)

        def sent() -> None:
            with self._lock:
                self._in_flight.pop(rid, None)

        def lost() -> None:  # a durable turn's host is gone: the command waits for where it went
            with self._lock:
                if self._in_flight.pop(rid, None) is None:
                    return  # already sent again, to the host that replaced that one
            stream = self._inbound.stream(tid)
            if self.store_id is None or stream is None or stream.finished:
                return _unreachable(command, future, self._inbound)
            with self._lock:
                # the transport gives up long after the turn may have been found elsewhere
                # (``replaced``, ``found``): then the command goes there, not to a hold nobody releases
                moved_on = stream.host is not None and stream.host != target
                if not moved_on:
                    self._held.setdefault(tid, []).append((command, future))
            if moved_on:
                return self._send(command, future)
            if self._follow is not None:
                self.moved(tid, stream, "its host cannot be reached")
            # else (a file store: one node) its host is replaced in its slot, and ``replaced`` sends it

        self._endpoint.send(target, command, lost, sent)

    def subscribe(
        self, turn_id: str, since: int, timeout: float | None = None
    ) -> tuple[TurnStream, concurrent.futures.Future[ControlReply]]:
        """Follow a turn started elsewhere from ``since``; the future gets the host's answer
        (and the stream its host: whoever answered), within ``timeout`` s if it says one."""
        stream = self.open(turn_id, since, fresh=False)
        return stream, self.command(waiting(Subscribe(turn_id=turn_id, since=since, window=self.window), timeout))

    def _again(self, turn_id: str, stream: TurnStream) -> Subscribe:
        """A ``Subscribe`` for what ``stream`` has not received, its window counted from where
        its readers are (what it holds unread stays counted)."""
        return Subscribe(turn_id=turn_id, since=stream.next_seq, window=self.window, unread_from=stream.unread_from)

    def unsubscribe(self, turn_id: str) -> None:
        """Tell the turn's host to send this runtime nothing more of it."""
        self._endpoint.send(self.of(turn_id), Unsubscribe(turn_id=turn_id))

    # -- a moved turn ---------------------------------------------------------------------

    def moved(
        self, turn_id: str, stream: TurnStream, detail: str, lost_owner: str | None = None, epoch: int | None = None
    ) -> None:
        """The turn's host (``lost_owner``) is gone or let go of it (at ``epoch``, if it said):
        follow it to the host that takes it over (a durable turn), holding its commands
        meanwhile; else it ends here."""
        if stream.finished or (stream.host is None and turn_id in self._held):
            return  # ended, or already being followed
        lost_owner = lost_owner or self.host_id(stream.host)
        if self._follow is None:
            stream.lost(detail)
            self._inbound.ended(turn_id, stream)
            return
        with self._lock:
            self._held.setdefault(turn_id, [])
        stream.host, stream.moving = None, detail
        self._follow(turn_id, stream, lost_owner, epoch)

    def found(self, turn_id: str, stream: TurnStream, host: Any) -> None:
        """A followed turn is on ``host`` now (a ``follow.Lost``: it could not be found; it ends here)."""
        if isinstance(host, Lost):
            stream.lost(host.detail, host.error_type)
            self._inbound.ended(turn_id, stream)
            for command, future in self._release(turn_id):
                _unreachable(command, future, self._inbound)
            return
        self._at(stream, host)
        self._endpoint.send(host, self._again(turn_id, stream))
        for command, future in self._release(turn_id):
            self._send(command, future)

    def nodes_changed(self, msg: NodesChanged) -> None:
        """The cluster's table changed: turns on hosts that left it move (or end)."""
        before = [(h, a) for n in self._nodes for h, a in n.host_ids()]  # addresses are not hashable
        local = [n for n in self._nodes if n.node == self._local]
        self._nodes = msg.nodes if any(n.node == self._local for n in msg.nodes) else [*local, *msg.nodes]
        with self._table_changed:
            self._table_changed.notify_all()
        now = [a for n in self._nodes for _, a in n.host_ids()]
        for turn_id, stream in self._inbound.open_streams():
            lost = next((h for h, a in before if a == stream.host), None) if stream.host not in now else None
            if lost is not None:
                self.moved(turn_id, stream, "its node left the cluster; the turn kept no store", lost)

    def replaced(self, msg: HostReplaced) -> None:
        """A host of this node died: follow its recovered turns on the new one; end the others here."""
        old = next((a for n in self._nodes if n.node == self._local for h, a in n.host_ids() if h == msg.host_id), None)
        self._nodes = [_with_host(n, msg.slot, msg.address) if n.node == self._local else n for n in self._nodes]
        for turn_id, stream in self._inbound.open_streams():
            if stream.finished or old is None or stream.host != old:
                continue
            if turn_id in msg.recovered:
                self._at(stream, msg.address)
                self._endpoint.send(msg.address, self._again(turn_id, stream))
                for command, future in self._release(turn_id) + self._unsent(turn_id, old):
                    self._send(command, future)
            else:
                stream.lost("the process that ran this turn died; it had no store to recover from")
                self._inbound.ended(turn_id, stream)
                for command, future in self._release(turn_id):
                    _unreachable(command, future, self._inbound)

    def _unsent(self, turn_id: str, to: Any) -> Held:
        """The commands for ``turn_id`` sent to ``to`` and not acknowledged: taken back."""
        with self._lock:
            mine = [r for r, (c, _, t) in self._in_flight.items() if c.turn_id == turn_id and t == to]
            return [self._in_flight.pop(r)[:2] for r in mine]

    def shut_down(self, shutdown: Shutdown, timeout: float) -> None:
        """Send ``shutdown`` to every host of this node, behind the turns' own messages, and
        wait (at most ``timeout`` seconds) until each has said ``ShutdownDone``."""
        done = []
        local = next(n for n in self._nodes if n.node == self._local)
        for slot, address in enumerate(local.hosts):
            done.append(self._inbound.expect(f"ShutdownDone:{slot}"))
            self._endpoint.send(address, shutdown)
        concurrent.futures.wait(done, max(0.0, timeout))


def _with_host(node: NodeRecord, slot: int, address: Any) -> NodeRecord:
    hosts = list(node.hosts)
    if slot < len(hosts):
        hosts[slot] = address
    return NodeRecord(node.node, node.capabilities, node.pool, tuple(hosts), node.store_id)


def _unreachable(command: Any, future: concurrent.futures.Future[ControlReply], inbound: Inbound | None = None) -> None:
    if inbound is not None:
        inbound.forget(command.request_id)
    if not future.done():
        future.set_exception(HostUnreachable(f"{command.kind}: the host of turn {command.turn_id} cannot be reached"))
