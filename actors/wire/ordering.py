"""Messages from one process to another leave in the order they were sent (``in_order``).

``transport.install()`` wraps Thespian's ``TCPTransport`` with it, beside the rest of the
hardening; it touches only the choice of when a queued message may connect.
"""

from __future__ import annotations

import itertools
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

    Here a message connects only when no other to its target is in flight, and none sent
    before it waits for a retry, or for the connection now free. One that waits for a
    connection while none is free (and none is in flight) does not hold the later ones:
    Thespian gives it the next connection that frees, and nothing might free one."""
    from thespian.system.transport import SendStatus
    from thespian.system.transport.TCPTransport import opsKey

    order = itertools.count()

    def next_xmit_1(self: Any, intent: Any) -> Any:
        key = opsKey(intent.targetAddr)
        pending = self.__dict__.setdefault("greenroom_pending", {}).setdefault(key, {})
        seq = pending.setdefault(id(intent), (next(order), intent))[0]
        free = key in getattr(self, "_openSockets", {})
        for earlier, other in pending.values():
            if other is intent:
                continue
            if other.expired():  # Thespian ends it at its next step: it holds nothing back
                continue
            awaiting = getattr(other, "_awaitingTXSlot", False)
            retrying = getattr(other, "_retryTime", None) is not None and not awaiting
            if hasattr(other, "socket") or (earlier < seq and (retrying or (free and awaiting))):
                intent.awaitingTXSlot()  # Thespian steps it again once a connection is free
                return True
        return connect(self, intent)

    def finish_intent(self: Any, intent: Any, status: Any = SendStatus.Sent) -> Any:
        pending = getattr(self, "greenroom_pending", {})
        key = opsKey(intent.targetAddr)
        if (mine := pending.get(key)) is not None:
            mine.pop(id(intent), None)
            if not mine:
                del pending[key]
        return finish(self, intent, status)

    return next_xmit_1, finish_intent
