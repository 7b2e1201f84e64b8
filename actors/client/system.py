"""The Runtime's ``ActorSystem`` as its users share it, with its listening socket serviced.

``Runtime.actor_system`` is the ``ActorSystem`` the Runtime started (its admin, its
``createActor``/``ask``/``tell``); users reach their own actors through it (a supervisor).
Its external endpoint listens on a socket of its own that Thespian only reads while a call
runs, so between calls, connections to it would pile up in its backlog. ``SharedSystem``
runs each user call under a lock, and the pump thread (``endpoint``) reads that socket
whenever no call runs (``service``): connections are accepted and held to the transport's
limits, and what arrives outside a call (nothing should) is dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from thespian.actors import ActorSystem

from ..logs import logger

__all__ = ["SharedSystem"]


log = logger("greenroom.runtime")


class SharedSystem:
    """An ``ActorSystem`` whose calls run one at a time, and whose socket is read between them."""

    def __init__(self, asys: ActorSystem) -> None:
        self._asys = asys
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._asys, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call

    def service(self) -> None:
        """Read the system's own socket once, unless a user call is reading it (pump thread)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            envelope = self._asys._systemBase._run_transport(0.0005)  # one pass: 0 would make none
        except Exception:  # noqa: BLE001 - a failing read must not end the pump
            log().debug("servicing the actor system's socket failed", exc_info=True)
            return
        finally:
            self._lock.release()
        if envelope is not None and hasattr(envelope, "message"):
            log().debug("dropped %s that reached the actor system outside a call", type(envelope.message).__name__)


Service = Callable[[], None]
