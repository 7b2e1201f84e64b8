"""Event batches to subscribers, clocked by the acknowledgements of the transport.

Thespian's TCP transport has one message in flight per target, each waiting for its ACK.
Sending one message per event therefore queues behind the ACKs at any real rate, and a
fixed flush window either delays every event or breaks at scale. An ``Outbox`` instead
sends a subscriber one ``EventBatch`` and keeps collecting until that batch is
acknowledged; then everything collected leaves in the next batch. A quiet subscriber gets
each event at once; a busy one gets fewer, larger batches, never more than one waiting.

- ``Finish``, ``ToolApprovalRequest`` and ``Error`` are urgent: what is collected leaves at
  once, even while a batch is in flight (the transport queues it behind);
- a start's answer to this node's Runtime travels in its outbox, ahead of the turn's first
  events (``answers``): it leaves with them, or once the batch in flight is acknowledged;
- a batch whose ACK was lost is resent by Thespian and acknowledged by the receiver's
  transport without being delivered twice (``wire.frames``); a batch the transport could
  not deliver at all (the subscriber's process is gone, or unreachable past Thespian's
  retries) calls ``lost(outbox)``: the host stops sending to that subscriber, for every
  turn, and forgets the outbox; a later subscription from the same address gets a new one;
- the next batch is sent from the actor's own handler, never from inside the transport's
  completion callback (Thespian may leave a send made there queued until something else
  is sent): the acknowledgement only calls ``ready(outbox)`` or ``lost(outbox)``, which
  wake the actor;
- ``encode_event`` never leaves a gap: an event that cannot be encoded leaves as an
  ``Error`` with its ``seq`` (a ``Finish`` without its history), so no subscriber waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from messages import CodecError, Error, Finish, TurnEvent, encode

from ..logs import logger
from ..wire.protocol import EventBatch

__all__ = ["URGENT_KINDS", "Outbox", "Outboxes", "encode_event"]

URGENT_KINDS = frozenset({"finish", "tool_approval_request", "error"})

Send = Callable[[Any, Any, Callable[[bool], None]], None]
Ready = Callable[["Outbox"], None]
Lost = Callable[["Outbox"], None]


log = logger("greenroom.host")


class Outbox:
    """The events waiting for one subscriber."""

    __slots__ = ("_lost", "_ready", "_send", "address", "dead", "in_flight", "key", "pending", "urgent", "wanted")

    def __init__(self, address: Any, send: Send, ready: Ready, lost: Lost) -> None:
        self.address = address
        self.key = str(address)
        self._send = send  # send(address, message, done(ok)) on the actor thread
        self._ready = ready  # from the ACK callback: flush me from the actor's next handler
        self._lost = lost  # from the ACK callback: my subscriber cannot be reached
        self.pending: list[bytes] = []
        self.in_flight = 0
        self.urgent = False
        self.dead = False
        self.wanted = True  # some turn still sends to it; once not, it is forgotten when idle

    def add(self, payload: bytes, kind: str) -> None:
        """Collect one encoded event; ``flush_if_ready`` decides when it leaves."""
        if self.dead:
            return
        self.pending.append(payload)
        if kind in URGENT_KINDS:
            self.urgent = True

    def flush_if_ready(self) -> None:
        """Send what is collected if nothing is in flight, or if something is urgent."""
        if self.pending and (self.in_flight == 0 or self.urgent):
            self._flush()

    def _flush(self) -> None:
        batch, self.pending, self.urgent = EventBatch(self.pending), [], False
        self.in_flight += 1
        self._send(self.address, batch, self._acknowledged)

    def _acknowledged(self, ok: bool) -> None:
        self.in_flight -= 1
        if not ok:
            if not self.dead:
                self.dead = True
                self.pending = []
                self._lost(self)
            return
        if self.in_flight == 0 and (self.pending or not self.wanted):
            self._ready(self)

    @property
    def idle(self) -> bool:
        return not self.pending and self.in_flight == 0


class Outboxes:
    """The outboxes of one host, one per subscriber address, kept while a turn sends to it.

    Turns ``hold`` a subscriber while they send to it and ``release`` it after; an outbox
    nobody holds is forgotten once everything it sent was acknowledged. ``wake(item)`` is
    the host's thread-safe hand-off: the transport's callbacks only queue there (``("outbox",
    outbox)`` to flush or forget it, ``("lost", outbox)`` when its subscriber is gone) and the
    host's next handler calls ``acknowledged`` or drops the subscriber, then ``forget``.
    """

    def __init__(self, send: Send, wake: Callable[[Any], None]) -> None:
        self._send = send
        self._wake = wake
        self._by_key: dict[str, Outbox] = {}
        self._refs: dict[str, int] = {}  # subscriber -> how many turns here send to it
        self._dirty: list[Outbox] = []

    def deliver(self, key: str, to: Any, payload: bytes, kind: str) -> None:
        outbox = self._by_key.get(key)
        if outbox is None:
            ready = lambda o: self._wake(("outbox", o))
            lost = lambda o: self._wake(("lost", o))
            outbox = self._by_key[key] = Outbox(to, self._send, ready, lost)
            outbox.wanted = key in self._refs
        outbox.add(payload, kind)
        self._dirty.append(outbox)

    def flush(self) -> None:
        """Send what each outbox touched since the last call may send (end of a handler)."""
        for outbox in self._dirty:
            outbox.flush_if_ready()
        self._dirty.clear()

    def reachable(self, key: str) -> bool:
        """False while ``key``'s outbox is dead (its subscriber is about to be dropped)."""
        outbox = self._by_key.get(key)
        return outbox is None or not outbox.dead

    def hold(self, key: str) -> None:
        self._refs[key] = self._refs.get(key, 0) + 1
        outbox = self._by_key.get(key)
        if outbox is not None:
            outbox.wanted = True

    def release(self, key: str) -> None:
        left = self._refs.get(key, 0) - 1
        if left > 0:
            self._refs[key] = left
            return
        self._refs.pop(key, None)
        self.unless_held(key)

    def unless_held(self, key: str) -> None:
        """Forget ``key``'s outbox once it is idle, unless a turn holds it."""
        outbox = self._by_key.get(key)
        if outbox is not None and key not in self._refs:
            outbox.wanted = False
            if outbox.idle:
                del self._by_key[key]

    def acknowledged(self, outbox: Outbox) -> None:
        if not outbox.wanted and outbox.idle:
            self.forget(outbox)
        else:
            self._dirty.append(outbox)

    def forget(self, outbox: Outbox) -> None:
        if self._by_key.get(outbox.key) is outbox:
            del self._by_key[outbox.key]
        if outbox.dead:
            self._refs.pop(outbox.key, None)

    @property
    def all_idle(self) -> bool:
        return all(o.idle or o.dead for o in self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)


def encode_event(event: TurnEvent) -> bytes:
    """The event's bytes. One that cannot be encoded is replaced, with its ``seq``, by an
    ``Error`` (or, for a ``Finish``, by the same ``Finish`` without its history), so that
    no subscriber waits for a gap that never fills."""
    try:
        return encode(event)
    except CodecError as exc:
        log().error("turn %s: event %d (%s) cannot be encoded: %s", event.turn_id, event.seq, event.kind, exc)
    if isinstance(event, Finish):
        return encode(event.model_copy(update={"messages": [], "pending_approvals": list(event.pending_approvals)}))
    lost = Error(
        turn_id=event.turn_id,
        seq=event.seq,
        parent_turn_id=event.parent_turn_id,
        root_turn_id=event.root_turn_id,
        error_type="event_lost",
        message=f"a {event.kind} event could not be encoded and was dropped",
    )
    return encode(lost)
