"""The owner's one connection to its actor system: a thread that sends and receives.

Thespian's external API blocks the calling thread (a ``tell`` waits for its ACK, up to 60 s
on a dead target) and is not meant to be shared by threads. The ``Endpoint`` gives the
Runtime one Thespian endpoint owned by one thread, the pump: other threads (and asyncio
loops) only queue messages and wake it through a pipe the transport watches, so no caller
ever blocks on Thespian, and a send to a dead actor fails fast through its callback.

Guarantees: messages queued by one thread leave in the order they were queued; every
received message is handed to ``on_message(message, sender)`` on the pump thread, in the
order the transport delivers them; ``on_idle()`` runs at least every ``tick`` seconds.

At most ``PER_TARGET`` messages per target are in Thespian's hands at once; the rest wait
here, in order, and go as those complete. Thespian keeps one queue for every target and
walks all of it on every send (quadratic in a burst: a thousand ``StartTurn`` at once), goes
into a receive-nothing mode past 950 queued and fails sends past 1,050; with this bound its
queue stays short whatever the caller does.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from thespian.actors import ActorSystem, WatchMessage
from thespian.system.transport import ReceiveEnvelope, TransmitIntent

from ..logs import logger

__all__ = ["Endpoint"]

SERVICE_EVERY = 0.25  # seconds between two reads of the actor system's own socket
PER_TARGET = 4  # messages handed to Thespian per target at once (see the module docstring)


log = logger("greenroom.runtime")


OnFailed = Callable[[], None]
OnSent = Callable[[], None]
Outgoing = tuple[Any, Any, "OnFailed | None", "OnSent | None"]


class Endpoint:
    """One Thespian endpoint and the pump thread that owns it."""

    def __init__(
        self,
        asys: ActorSystem,
        on_message: Callable[[Any, Any], None],
        on_idle: Callable[[], None] = lambda: None,
        tick: float = 0.25,
        service: Callable[[], None] = lambda: None,
    ) -> None:
        self._ctx = asys._systemBase.external_clone()
        self._on_message = on_message
        self._on_idle = on_idle
        self._service = service  # reads another socket of this process (``system.SharedSystem``)
        self._next_service = 0.0
        self._tick = timedelta(seconds=tick)
        self._out: queue.SimpleQueue[Outgoing] = queue.SimpleQueue()
        self._waiting: dict[str, deque[Outgoing]] = {}  # by str(target): what waits for PER_TARGET
        self._busy: dict[str, int] = {}  # by str(target): how many are in Thespian's hands
        self._freed: list[str] = []  # targets one of whose sends completed (pump thread only)
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._ctx.transport.set_watch([self._r])
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="greenroom-pump", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def on_pump_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def send(self, to: Any, message: Any, on_failed: OnFailed | None = None, on_sent: OnSent | None = None) -> None:
        """Queue ``message`` for ``to`` (thread-safe, never blocks); on the pump thread,
        ``on_sent`` runs once the receiver acknowledged it, ``on_failed`` if the transport
        could not deliver it (after its own retries)."""
        self._out.put((to, message, on_failed, on_sent))
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._w, b"\0")
        except (BlockingIOError, OSError):
            pass  # full of wake-ups already, or closed: the pump wakes or has ended

    def stop(self, timeout: float = 1.0) -> None:
        """End the pump thread (bounded) and release the endpoint."""
        self._stopping = True
        self._wake()
        if self._thread.is_alive() and not self.on_pump_thread:
            self._thread.join(timeout)
        if not self._thread.is_alive():
            try:
                self._ctx.exit_context()
            except Exception:
                log().debug("closing the endpoint failed", exc_info=True)
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _loop(self) -> None:
        while not self._stopping:
            self._send_queued()
            try:
                envelope = self._ctx._run_transport(self._tick)
            except Exception:
                if self._stopping:
                    return
                log().exception("the event pump failed to receive")
                continue
            if isinstance(envelope, ReceiveEnvelope):
                message = envelope.message
                if isinstance(message, WatchMessage):
                    self._drain_wakeups()
                else:
                    try:
                        self._on_message(message, envelope.sender)
                    except Exception:
                        log().exception("handling %s failed", type(message).__name__)
            try:
                self._on_idle()
                now = time.monotonic()
                if now >= self._next_service:
                    self._next_service = now + SERVICE_EVERY
                    self._service()
            except Exception:
                log().exception("the event pump's idle work failed")

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self._r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _send_queued(self) -> None:
        """Hand Thespian what may go now: first what waited for a target that has room again,
        then what callers queued, each behind what already waits for its target."""
        freed, self._freed = self._freed, []
        for key in freed:
            waiting = self._waiting.get(key)
            while waiting and self._busy.get(key, 0) < PER_TARGET:
                self._transmit(key, waiting.popleft())
            if waiting is not None and not waiting:
                del self._waiting[key]
        while True:
            try:
                item = self._out.get_nowait()
            except queue.Empty:
                return
            key = str(item[0])
            if key in self._waiting or self._busy.get(key, 0) >= PER_TARGET:
                self._waiting.setdefault(key, deque()).append(item)
            else:
                self._transmit(key, item)

    def _transmit(self, key: str, item: Outgoing) -> None:
        to, message, on_failed, on_sent = item
        once = [True]

        def completed() -> None:  # on the pump thread, inside the transport: schedule nothing here
            if not once:
                return
            once.clear()
            left = self._busy[key] - 1
            if left:
                self._busy[key] = left
            else:
                del self._busy[key]
            if key in self._waiting:
                self._freed.append(key)
                self._wake()  # the transport returns, and the loop sends what waits

        def failed(result: Any, intent: Any) -> None:
            completed()
            log().debug("could not deliver %s: %s", type(intent.message).__name__, result)
            if on_failed is not None:
                on_failed()

        def sent(result: Any, intent: Any) -> None:
            completed()
            if on_sent is not None:
                on_sent()

        self._busy[key] = self._busy.get(key, 0) + 1
        try:
            intent = TransmitIntent(to, message, onSuccess=sent, onError=failed)
            self._ctx.transport.scheduleTransmit(None, intent)
        except Exception:
            log().exception("could not send %s", type(message).__name__)
            completed()
            if on_failed is not None:
                on_failed()
