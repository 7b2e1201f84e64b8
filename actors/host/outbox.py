"""Event batches to subscribers, clocked by the acknowledgements of the transport.

Thespian's TCP transport has one message in flight per target, each waiting for its ACK.
Sending one message per event therefore queues behind the ACKs at any real rate, and a
fixed flush window either delays every event or breaks at scale. An ``Outbox`` instead
sends a subscriber one ``EventBatch`` and keeps collecting until that batch is
acknowledged; then everything collected leaves in the next batch. A quiet subscriber gets
each event at once; a busy one gets fewer, larger batches, never more than one waiting.

- ``Finish``, ``ToolApprovalRequest`` and ``Error`` are urgent: what is collected leaves at
  once, even while a batch is in flight (the transport queues it behind);
- a subscriber whose transmit fails as a dead target is dropped, with what it had pending;
- the next batch is sent from the actor's own handler, never from inside the transport's
  completion callback (Thespian may leave a send made there queued until something else
  is sent): the acknowledgement only calls ``ready(outbox)``, which wakes the actor;
- ``encode_event`` never leaves a gap: an event that cannot be encoded leaves as an
  ``Error`` with its ``seq`` (a ``Finish`` without its history), so no subscriber waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from messages import CodecError, Error, Finish, TurnEvent, encode

from ..logs import logger
from ..wire.protocol import EventBatch

__all__ = ["URGENT_KINDS", "Outbox", "encode_event"]

URGENT_KINDS = frozenset({"finish", "tool_approval_request", "error"})

Send = Callable[[Any, Any, Callable[[bool], None]], None]
Ready = Callable[["Outbox"], None]


log = logger("greenroom.host")


class Outbox:
    """The events waiting for one subscriber."""

    __slots__ = ("_ready", "_send", "address", "dead", "in_flight", "pending", "urgent")

    def __init__(self, address: Any, send: Send, ready: Ready) -> None:
        self.address = address
        self._send = send  # send(address, message, done(ok)) on the actor thread
        self._ready = ready  # from the ACK callback: flush me from the actor's next handler
        self.pending: list[bytes] = []
        self.in_flight = 0
        self.urgent = False
        self.dead = False

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
                log().info("subscriber %s cannot be reached; its events are dropped", self.address)
            self.dead = True
            self.pending = []
            return
        if self.in_flight == 0 and self.pending:
            self._ready(self)

    @property
    def idle(self) -> bool:
        return not self.pending and self.in_flight == 0


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
