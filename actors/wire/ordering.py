"""Messages from one process to another leave in the order they were sent (``in_order``).

``transport.install()`` wraps Thespian's ``TCPTransport`` with it, beside the rest of the
hardening; it touches only the choice of when a queued message may connect.
"""

from __future__ import annotations

from typing import Any

__all__ = ["in_order"]


def in_order(connect: Any, finish: Any) -> tuple[Any, Any]:
    """Messages to one target leave one at a time, in the order they were sent.

    Thespian sends to a target on the connection it keeps for it, and a message waits while
    another is on its way (sent, its ACK not in). But a connection the target opened to send
    to this transport becomes the one kept for it as soon as a message has come in on it,
    while a send may be on its way on the other: two messages in flight at once, which
    arrive in either order. And a message sent again (its connection shut by the other end)
    waits behind those sent after it. Both were seen: a leader's 2,000 starts onto a
    member arrived with 9-12 inversions a run (``tests/test_fleet_admission.py``).

    Here a message connects only when no other to its target is in flight and none that
    reached the transport before it is still to be sent, whether it waits for a retry or
    for a connection. Thespian steps a waiting message again only once a connection to its
    target is free, so whenever the first one waits with nothing in flight (the one ahead
    of it ended without freeing a connection: failed, expired, its retries spent) it is
    stepped at the transport's next pass instead. A message that expired holds nothing
    back (Thespian ends it at its next step); one Thespian ended without ``_finishIntent``
    (its target found dead) is forgotten there and then."""
    from thespian.system.timing import ExpirationTimer
    from thespian.system.transport import SendStatus
    from thespian.system.transport.TCPTransport import opsKey

    def pending(transport: Any, intent: Any) -> dict[int, Any]:
        queues = transport.__dict__.setdefault("greenroom_pending", {})
        return queues.setdefault(opsKey(intent.targetAddr), {})  # in the order they came

    def step_soon(intent: Any) -> None:
        if getattr(intent, "_awaitingTXSlot", False):  # not one in a retry's backoff
            del intent._awaitingTXSlot
            intent._retryTime = ExpirationTimer(0)

    def first_to_send(queue: dict[int, Any], intent: Any | None) -> tuple[Any, bool]:
        """The earliest live message still to be sent before ``intent`` (before none:
        the earliest of all), and whether any is in flight."""
        first, before = None, intent is not None
        for other in list(queue.values()):
            if other is intent:
                before = False
            elif other.result is not None:  # ended by Thespian where no wrapper sees it
                del queue[id(other)]
            elif other.expired():  # Thespian ends it at its next step
                continue
            elif hasattr(other, "socket"):
                return None, True
            elif first is None and (before or intent is None):
                first = other
        return first, False

    def next_xmit_1(self: Any, intent: Any) -> Any:
        queue = pending(self, intent)
        queue.setdefault(id(intent), intent)
        first, flying = first_to_send(queue, intent)
        if flying or first is not None:
            intent.awaitingTXSlot()
            if first is not None:
                step_soon(first)
            return True
        vars(intent).pop("_awaitingTXSlot", None)  # its turn: whatever it waited for is over
        vars(intent).pop("_retryTime", None)
        try:
            return connect(self, intent)
        except BaseException:
            queue.pop(id(intent), None)  # Thespian drops an intent whose step raised
            raise

    def finish_intent(self: Any, intent: Any, status: Any = SendStatus.Sent) -> Any:
        queue = pending(self, intent)
        queue.pop(id(intent), None)
        done = finish(self, intent, status)
        if status == SendStatus.DeadTarget:  # those waiting for the target ended with it
            for gone, _ in self._finished_intents:
                queue.pop(id(gone), None)
        first, flying = first_to_send(queue, None)
        if first is not None and not flying:
            step_soon(first)
        if not queue:
            del self.greenroom_pending[opsKey(intent.targetAddr)]
        return done

    return next_xmit_1, finish_intent
