"""A Runtime's process tree and the one connection it keeps to it: started once, ended once.

``Session.open`` starts the tree (``lifecycle.tree``), creates the directory, starts the pump
(``endpoint``) and configures the hosts and the tool pool, recovering the store's turns;
``close`` ends all of it within its deadline, whatever the tree is doing: the hosts are
told to shut down behind their turns' own messages (waited for, bounded), the pump stops,
and the tree is ended by PID (``ProcessTree.end``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from thespian.actors import ActorSystem

from ..cluster.directory import DirectoryActor
from ..cluster.names import DIRECTORY_NAME, LEADER_CAPABILITY
from ..lifecycle.tree import ProcessTree
from ..store.files import remove_runtime_file, write_runtime_file
from ..wire import transport
from ..wire.protocol import Configure, Configured, Hello, NodeRecord, Shutdown, Welcome
from ..wire.transport import TransportConfig
from .endpoint import Endpoint
from .receiving import Inbound
from .routing import Hosts
from .system import SharedSystem

__all__ = ["Session"]

SHUTDOWN_WAIT = 3.5  # seconds the hosts get to end their turns: a stopped call's stop_grace (2 s), and a margin


class Session:
    """The tree of one Runtime and its connection to it."""

    def __init__(self, tree: ProcessTree, asys: ActorSystem, inbound: Inbound, start_timeout: float) -> None:
        self.tree = tree
        self.inbound = inbound
        self.system = SharedSystem(asys)
        self.directory: Any = asys.createActor(DirectoryActor, globalName=DIRECTORY_NAME)
        self.endpoint = Endpoint(asys, inbound.on_message, inbound.on_idle, service=self.system.service)
        self.endpoint.start()
        self.hosts: Hosts | None = None
        self._start_timeout = start_timeout
        try:
            tree.sid = self.ask(Hello(), Welcome).sid
        except BaseException:
            self.endpoint.stop(timeout=1.0)
            raise

    @classmethod
    def open(
        cls,
        configure: Configure,
        inbound: Inbound,
        *,
        host: str,
        admin_port: int,
        capabilities: dict[str, Any],
        key: bytes | None,
        transport_config: TransportConfig | None,
        event_window: int | None,
        start_timeout: float,
        forking: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
        follow: Callable[[str, Any, str | None, int | None], None] | None = None,
    ) -> tuple[Session, Configured]:
        """Start the tree; the session, and what the directory answered to ``configure``.
        On any failure the caller closes the session it got (or the tree, if none)."""
        tree = ProcessTree()
        caps = {"Admin Port": admin_port, LEADER_CAPABILITY: True, **capabilities}
        try:
            with forking():  # the admin, and every host it forks, inherit whether metrics are armed
                asys = tree.start(caps, host=host, key=key, transport_config=transport_config, store=configure.store)
            session = cls(tree, asys, inbound, start_timeout)
        except BaseException:
            tree.end(time.monotonic() + 1.0)
            raise
        try:
            configured = session.ask(configure, Configured)
            local = NodeRecord(
                configure.node, dict(configure.capabilities), None, tuple(configured.hosts), configured.store_id
            )
            durable = configure.store is not None  # a turn whose host let go of it is followed through the store
            session.hosts = Hosts(
                session.endpoint, inbound, session.directory, local, event_window, follow if durable else None
            )
        except BaseException:
            session.close(time.monotonic() + 1.0, keep_turns=configure.store is not None, store_path=None)
            raise
        if configure.store is not None and tree.lock_fd is not None:  # a SQLite store: the CLI finds us
            info = {"pid": os.getpid(), "host": host, "admin_port": admin_port}
            write_runtime_file(configure.store, {**info, "key": transport.current_key().hex()})
        return session, configured

    def ask(self, message: Any, expect: type) -> Any:
        """Send ``message`` to the directory and wait (bounded) for its reply of type ``expect``."""
        return self.inbound.ask(self.endpoint.send, self.directory, message, expect, self._start_timeout)

    def close(self, deadline: float, *, keep_turns: bool, store_path: str | None) -> None:
        """End the tree by ``deadline`` (see the module docstring); ``keep_turns`` leaves the
        turns to the store; the runtime file of ``store_path`` is removed if this tree holds
        the store's lock."""
        if self.hosts is not None:
            shutdown = Shutdown(keep_turns=keep_turns)
            self.endpoint.send(self.directory, shutdown)
            self.hosts.shut_down(shutdown, min(SHUTDOWN_WAIT, deadline - time.monotonic() - 1.0))
        if store_path is not None and self.tree.lock_fd is not None:  # ours: we hold the lock
            remove_runtime_file(store_path)
        self.inbound.close()  # readers and callers still waiting raise RuntimeClosedError
        self.endpoint.stop(timeout=max(0.1, min(1.0, deadline - time.monotonic())))

    def end_tree(self, deadline: float) -> None:
        self.tree.end(deadline)  # and the store's lock is free once the tree is gone
