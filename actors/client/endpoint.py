"""The owner's one connection to its actor system: a thread that sends and receives.

Thespian's external API blocks the calling thread (a ``tell`` waits for its ACK, up to 60 s
on a dead target) and is not meant to be shared by threads. The ``Endpoint`` gives the
Runtime one Thespian endpoint owned by one thread, the pump: other threads (and asyncio
loops) only queue messages and wake it through a pipe the transport watches, so no caller
ever blocks on Thespian, and a send to a dead actor fails fast through its callback.

Guarantees: messages queued by one thread leave in the order they were queued; every
received message is handed to ``on_message(message, sender)`` on the pump thread, in the
order the transport delivers them; ``on_idle()`` runs at least every ``tick`` seconds.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from thespian.actors import ActorSystem, WatchMessage
from thespian.system.transport import ReceiveEnvelope, TransmitIntent

from ..logs import logger

__all__ = ["Endpoint"]

SERVICE_EVERY = 0.25  # seconds between two reads of the actor system's own socket


log = logger("greenroom.runtime")


OnFailed = Callable[[], None]
OnSent = Callable[[], None]


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
        self._out: queue.SimpleQueue[tuple[Any, Any, OnFailed | None, OnSent | None]] = queue.SimpleQueue()
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
        while True:
            try:
                to, message, on_failed, on_sent = self._out.get_nowait()
            except queue.Empty:
                return

            def failed(result: Any, intent: Any, on_failed: OnFailed | None = on_failed) -> None:
                log().debug("could not deliver %s: %s", type(intent.message).__name__, result)
                if on_failed is not None:
                    on_failed()

            def sent(result: Any, intent: Any, on_sent: OnSent | None = on_sent) -> None:
                if on_sent is not None:
                    on_sent()

            try:
                intent = TransmitIntent(to, message, onSuccess=sent if on_sent else None, onError=failed)
                self._ctx.transport.scheduleTransmit(None, intent)
            except Exception:
                log().exception("could not send %s", type(message).__name__)
                if on_failed is not None:
                    on_failed()
