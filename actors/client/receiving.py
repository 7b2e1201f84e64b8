"""What a Runtime's pump receives, and who waits for it: turn streams, replies, members.

The pump thread hands every message to ``Inbound.on_message``: events go to their turn's
``TurnStream`` (in any order; the stream orders them), a ``ControlReply`` to the future of
the command that asked for it (a refusal nobody awaits goes to the turn's stream; a start's
answer may come in an ``EventBatch``, ahead of its turn's first events), node changes to
``membership``, a host's finished spans to ``on_spans`` and its metrics to ``on_metrics``.
Callers in any thread open streams and futures here and wait on them; ``close()`` makes
every waiter raise ``RuntimeClosedError``.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from messages import ControlReply, Error, ListNodes, MembershipChanged, NodeInfo, NodeList, TurnEvent

from ..errors import ControlRejected, RuntimeClosedError, TurnTimeout
from ..telemetry.metrics import MetricBatch
from ..wire.protocol import EventBatch, HostReplaced, NodesChanged, ShutdownDone, SpanBatch
from .records import Record, batch_records
from .stream import TurnStream, Waiter, wake_all

__all__ = ["Inbound"]

GAP_CHECK = 0.05  # seconds between two looks for events lost in transit


class Inbound:
    """Streams and futures keyed by turn id and request id; thread-safe."""

    def __init__(
        self,
        closed: Callable[[], bool],
        on_host_replaced: Callable[[HostReplaced | NodesChanged], None],
        on_spans: Callable[[list[Any]], None] = lambda spans: None,
        on_forgotten: Callable[[str], None] = lambda turn_id: None,
        on_metrics: Callable[[MetricBatch], None] = lambda batch: None,
    ) -> None:
        self._closed = closed
        self._on_host_replaced = on_host_replaced
        # the directory's table changes (``NodesChanged``, ``HostReplaced``) that came before the
        # Runtime's table existed: the leader's directory sends one as it is configured, and one
        # for each member that registers while its hosts start; applied in order (``table_ready``)
        self._table_lock = threading.Lock()
        self._early: list[HostReplaced | NodesChanged] | None = []
        self._on_spans = on_spans
        self._on_forgotten = on_forgotten
        self._on_metrics = on_metrics
        self._lock = threading.RLock()
        # streams live as long as something reads them (a handle): one nobody holds any more is
        # forgotten here, and its host told to stop sending (``on_forgotten``)
        self.streams: weakref.WeakValueDictionary[str, TurnStream] = weakref.WeakValueDictionary()
        self.on_open: list[Callable[[TurnStream], None]] = []  # told of every stream opened (the console)
        self._futures: dict[str, concurrent.futures.Future[Any]] = {}
        self.membership: deque[MembershipChanged] = deque(maxlen=1000)  # the latest joins and leaves
        self._members: dict[str, dict[str, Any]] = {}
        self._members_cond = threading.Condition()
        self._next_gap_check = 0.0
        # a host says a turn moved (``Error(turn_moved)``): the Runtime follows it
        # a host let go of a turn: (turn id, stream, why, the owner that let go, its epoch)
        self.on_moved: Callable[[str, TurnStream, str, str | None, int | None], None] = lambda *moved: None

    # -- what callers wait on -------------------------------------------------------------

    def expect(self, key: str) -> concurrent.futures.Future[Any]:
        """A future for the reply filed under ``key`` (a request id, or a reply class name)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._futures[key] = future
        return future

    def expect_start(self, turn_id: str) -> concurrent.futures.Future[Any]:
        """The future for the answer to ``turn_id``'s start; ``ControlRejected`` while another
        start of that id still waits for its own (it would take that one's place)."""
        with self._lock:
            if f"start:{turn_id}" in self._futures:
                raise ControlRejected("invalid", f"turn id {turn_id} is already in use by a turn being started")
            return self.expect(f"start:{turn_id}")

    def ask(self, send: Callable[..., None], to: Any, message: Any, expect: type, timeout: float) -> Any:
        """Send ``message`` with ``send`` (the endpoint's) and wait, at most ``timeout``
        seconds, for the first reply of class ``expect``."""
        future = self.expect(expect.__name__)
        undelivered = RuntimeError(f"{type(message).__name__} was not delivered")
        send(to, message, lambda: future.set_exception(undelivered))
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            self.forget(expect.__name__)
            raise RuntimeError(
                f"the actor system did not answer {type(message).__name__} within {timeout:g} s"
            ) from None

    def forget(self, key: str) -> concurrent.futures.Future[Any] | None:
        with self._lock:
            return self._futures.pop(key, None)

    def unanswered(self, key: str) -> None:
        """Nobody waits for the reply filed under ``key`` any more: its future, if still
        there, is cancelled (a turn's start whose answer was lost with its connection, and
        whose turn has ended since or cannot be reached: its callbacks, ``starting.Room``'s
        among them, learn that it never comes)."""
        future = self.forget(key)
        if future is not None:
            future.cancel()

    def open_stream(
        self,
        turn_id: str,
        since: int,
        fresh: bool,
        window: int | None = None,
        consumed: Callable[[int], None] = lambda seq: None,
        resend: Callable[[int, int], None] = lambda seq, unread_from: None,
    ) -> TurnStream:
        """A new stream for ``turn_id``; with ``fresh``, refused if one is still open."""
        with self._lock:
            if fresh and turn_id in self.streams:
                raise ControlRejected("invalid", f"turn id {turn_id} is already in use by a running turn")
            stream = TurnStream(turn_id, since, self._closed, window, consumed, resend)
            self.streams[turn_id] = stream
            weakref.finalize(stream, self._forgotten, turn_id, stream.ended)
            for watcher in self.on_open:
                watcher(stream)
            return stream

    def _forgotten(self, turn_id: str, ended: threading.Event) -> None:
        """A stream nobody holds was collected: unless its turn had ended, its host may stop."""
        if not ended.is_set() and not self._closed():
            self._on_forgotten(turn_id)

    def open_streams(self) -> list[tuple[str, TurnStream]]:
        """The streams open now, by turn id (a copy)."""
        with self._lock:
            return list(self.streams.items())

    def stream(self, turn_id: str) -> TurnStream | None:
        with self._lock:
            return self.streams.get(turn_id)

    def ended(self, turn_id: str, stream: TurnStream) -> None:
        """``stream``'s turn has ended (or is lost to this caller): stop following it, and
        stop waiting for its start's answer if that never came (``unanswered``)."""
        self.drop(turn_id, stream)
        self.unanswered(f"start:{turn_id}")

    def drop(self, turn_id: str, stream: TurnStream | None = None) -> None:
        """Stop following ``turn_id`` (only if its stream is still ``stream``, when given)."""
        with self._lock:
            if stream is None or self.streams.get(turn_id) is stream:
                self.streams.pop(turn_id, None)

    def close(self) -> None:
        """Every reader and every caller still waiting raises ``RuntimeClosedError``."""
        with self._lock:
            streams, futures = list(self.streams.values()), list(self._futures.values())
        for stream in streams:
            stream.wake()
        for future in futures:
            if not future.done():
                future.set_exception(RuntimeClosedError("the Runtime has shut down"))

    # -- what the pump delivers -----------------------------------------------------------

    def on_message(self, msg: Any, sender: Any) -> None:
        if isinstance(msg, EventBatch):
            events, replies = batch_records(msg)
            for reply in replies:  # a start's answer, ahead of its turn's first events
                self._reply(reply, sender)
            self._events(events)
        elif isinstance(msg, TurnEvent):
            self._events([(msg.turn_id, msg.seq, msg.kind, msg)])
        elif isinstance(msg, ControlReply):
            self._reply(msg, sender)
        elif isinstance(msg, NodeList):
            self._resolve(msg.request_id or "", msg)
        elif isinstance(msg, MembershipChanged):
            self._member(msg)
        elif isinstance(msg, (HostReplaced, NodesChanged)):
            with self._table_lock:
                if self._early is not None:
                    self._early.append(msg)
                else:
                    self._on_host_replaced(msg)
        elif isinstance(msg, ShutdownDone):
            self._resolve(f"ShutdownDone:{msg.slot}", msg)
        elif isinstance(msg, SpanBatch):
            self._on_spans(msg.spans)
        elif isinstance(msg, MetricBatch):
            self._on_metrics(msg)
        else:
            self._resolve(type(msg).__name__, msg)

    def _reply(self, msg: ControlReply, sender: Any) -> None:
        if msg.ok and msg.command == "subscribe" and (stream := self.stream(msg.turn_id)) is not None:
            stream.host = stream.host or sender  # a turn attached to: its host answered (its id
            # is learned when the Runtime looks it up: ``TurnHandle.host``)
        future = self.forget(msg.request_id) if msg.request_id else None
        if future is not None:
            future.set_result(msg)
        elif not msg.ok and (stream := self.stream(msg.turn_id)) is not None:
            stream.refuse(msg)

    def table_ready(self) -> None:
        """The Runtime's table exists: the changes that came before it are applied, in order,
        and those after it as they come (a member that registered while the leader's hosts
        started would otherwise be missing from the table until its record changed)."""
        with self._table_lock:
            early, self._early = self._early or [], None
            for msg in early:
                self._on_host_replaced(msg)

    def _resolve(self, key: str, msg: Any) -> None:
        future = self.forget(key)
        if future is not None and not future.done():
            future.set_result(msg)

    def _events(self, events: Iterable[tuple[str, int, str, Record]]) -> None:
        """Deliver in order (each event as its record: ``records``); each stream's readers are
        woken once, after its last event here, and the asyncio readers of all of them with one
        callback per event loop."""
        touched: dict[str, TurnStream] = {}
        for turn_id, seq, kind, event in events:
            stream = self.stream(turn_id)
            if stream is None:
                continue
            if seq < 0:  # not one of the turn's own events: about this reader (always a model)
                if isinstance(event, Error) and event.error_type == "reader_dropped":
                    stream.drop(event.message)
                    self.drop(turn_id, stream)
                elif isinstance(event, Error) and event.error_type == "turn_moved":
                    self.on_moved(turn_id, stream, event.message, event.detail, event.epoch)
                continue
            touched[turn_id] = stream
            if stream.deliver_record(seq, kind, event, wake=False):
                self.ended(turn_id, stream)
        later: list[Waiter] = []
        for stream in touched.values():
            stream.wake(later)
        wake_all(later)

    def on_idle(self, now: float | None = None) -> None:
        """Ask again for events late in transit, replace those lost once their turn's next
        ``Finish`` is here (looked at every ``GAP_CHECK`` seconds at most: a gap waits
        ``stream.GAP_WAIT`` anyway); a turn that ends so is let go as any other (``ended``).
        ``now`` is ``time.monotonic()`` unless given (a test's clock)."""
        now = time.monotonic() if now is None else now
        if now < self._next_gap_check:
            return
        self._next_gap_check = now + GAP_CHECK
        for turn_id, stream in self.open_streams():
            if stream.fill_gaps(now):
                self.ended(turn_id, stream)

    # -- members --------------------------------------------------------------------------

    def _member(self, msg: MembershipChanged) -> None:
        with self._members_cond:
            self.membership.append(msg)
            if msg.joined:
                self._members[msg.node] = msg.capabilities
            else:
                self._members.pop(msg.node, None)
            self._members_cond.notify_all()

    def nodes(self, send: Callable[..., None], directory: Any, timeout: float) -> list[NodeInfo]:
        """The nodes the directory lists (asked with ``send``, the endpoint's)."""
        request = ListNodes(request_id=uuid.uuid4().hex)
        future = self.expect(request.request_id or "")
        send(directory, request)
        try:
            return list(future.result(timeout).nodes)
        except concurrent.futures.TimeoutError:
            self.forget(request.request_id or "")
            raise TurnTimeout(f"the directory did not list its nodes within {timeout:g} s") from None

    def wait_for_node(self, capabilities: dict[str, Any], timeout: float) -> str:
        """The name of a joined node advertising ``capabilities``, waiting up to ``timeout``."""

        def found() -> str | None:
            for node, caps in self._members.items():
                if all(caps.get(k) == v for k, v in capabilities.items()):
                    return node
            return None

        with self._members_cond:
            self._members_cond.wait_for(lambda: found() is not None, timeout)
            node = found()
        if node is None:
            raise TurnTimeout(f"no node with {capabilities} joined within {timeout:g} s")
        return node
