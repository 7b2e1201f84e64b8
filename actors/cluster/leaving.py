"""A node that drains: its directory's side (a base of ``DirectoryActor``).

On ``Drain`` (from ``greenroom node``, on SIGTERM) the directory registers its node again,
marked ``draining``: no Runtime or directory places a new turn on its hosts from then on
(``Membership.hosts``, ``Routing.placeable``); it tells each of its hosts, which hand their
durable turns on and let the others finish (``host.draining``), and answers ``Drained``
once every host has. A second ``Drain`` (the bound) goes to the hosts again; it is answered
the same way. A node with no host is drained at once.
"""

from __future__ import annotations

from typing import Any

from ..logs import logger
from ..wire.draining import Drain, Drained

__all__ = ["NodeDraining"]

log = logger("greenroom.directory")


class NodeDraining:
    """The drain of a node's directory; see the module docstring."""

    draining = False  # its node leaves placement: its record says so
    drain_asker: Any = None
    drain_waiting: set[int] = set()

    def receiveMsg_Drain(self, msg: Drain, sender: Any) -> None:
        directory: Any = self
        if not self.draining:
            log().warning("node %s drains within %g s", getattr(directory.config, "node", "?"), msg.within)
            self.draining = True
            directory._register_local()  # out of placement, for the Runtime and every directory
        self.drain_asker, self.drain_waiting = sender, set(range(len(directory.hosts)))
        for host in directory.hosts:
            directory.send(host, msg)
        self._maybe_drained()

    def receiveMsg_Drained(self, msg: Drained, sender: Any) -> None:
        self.drain_waiting = self.drain_waiting - {msg.slot}
        self._maybe_drained()

    def _maybe_drained(self) -> None:
        if self.drain_asker is not None and not self.drain_waiting:
            directory: Any = self
            directory.send(self.drain_asker, Drained())
            self.drain_asker = None
