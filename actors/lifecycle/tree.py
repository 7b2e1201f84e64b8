"""The process tree a Runtime owns: what it inherits, its actor system, its lifeline, its end.

``start()`` first puts in place what every process of the tree must inherit: the transport
(frames signed, sockets bound to ``host``), the convention timers, the SSL context, and,
with a store, the store's lock (one runtime per store; the lock is held until the last
process of the tree is gone) after opening the store once to fail now, naming the file, if
it is not one (no connection crosses the fork). Then it opens the lifeline and starts
Thespian's admin inside ``Lifeline.forking()``, so the admin and everything forked below it
(actors, tool processes, their children) belong to the tree. ``end()`` cuts the lifeline,
waits (bounded) until every process the tree had is gone, SIGKILLs by PID whatever is left,
then frees the store's lock; it never waits on a message.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from thespian.actors import ActorSystem

from ..logs import log_defs, logger
from ..providers.client import ssl_context
from ..store import open_store
from ..store.base import is_url
from ..store.files import lock_store
from ..wire import transport
from ..wire.thespian_compat import tune_convention
from ..wire.transport import TransportConfig
from .lifeline import Lifeline
from .processes import descendants, end_processes, session_processes, wait_gone

__all__ = ["ProcessTree"]


log = logger("greenroom.runtime")


class ProcessTree:
    """One actor system and every process below it."""

    def __init__(self) -> None:
        self.lifeline: Lifeline | None = None
        self.asys: ActorSystem | None = None
        self.sid: int | None = None  # the admin's session, learnt from an actor (see Welcome)
        self.lock_fd: int | None = None

    def start(
        self,
        capabilities: dict[str, Any],
        *,
        host: str,
        key: bytes | None,
        transport_config: TransportConfig | None,
        store: str | None,
    ) -> ActorSystem:
        """Start the admin (a daemon in a session of its own) as a member of the tree."""
        transport.install(host, key, transport_config)
        tune_convention()
        ssl_context()  # built once here, inherited by every host
        if store is not None:
            if not is_url(store):  # one runtime per SQLite store; a PostgreSQL one is shared by nodes
                self.lock_fd = lock_store(store)
            open_store(store).close()  # fail here, naming the file or URL, if it is not a store
        self.lifeline = Lifeline()
        with self.lifeline.forking():
            self.asys = ActorSystem("multiprocTCPBase", capabilities, logDefs=log_defs(), transientUnique=True)
        return self.asys

    def processes(self) -> list[int]:
        """Every live process of the tree: the admin's session and all their descendants."""
        if self.sid is None:
            return []
        found: set[int] = set()
        for pid in session_processes(self.sid):
            found.add(pid)
            found.update(descendants(pid))
        return sorted(found)

    def end(self, deadline: float) -> None:
        """Cut the lifeline and make sure every process of the tree is gone by ``deadline``
        (looked for again after each wait: a process forked while the tree was ending, such
        as a spare tool process, is in the next look)."""
        tree = self.processes()
        if self.lifeline is not None:
            self.lifeline.cut_now()
        for _ in range(3):
            left = wait_gone(tree, max(0.2, deadline - time.monotonic() - 0.5))
            if left:
                log().warning("%d process(es) of the runtime outlived its lifeline; killing them", len(left))
                end_processes(left, timeout=0.5)
            tree = self.processes()
            if not tree:
                break
        if self.asys is not None:
            with contextlib.suppress(Exception):
                self.asys._systemBase.transport.close()
        if self.sid is not None:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(self.sid, os.WNOHANG)  # the admin's first fork is the owner's child
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # every process that inherited it is gone now
            self.lock_fd = None
