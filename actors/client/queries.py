"""What a Runtime answers about its cluster and its store, without touching a turn.

A base of ``Runtime``: the nodes of its deployment (its own first) as its directory sees
them, the joins and leaves it has seen, and the turns and events of its store (opened in
this process, after the tree was forked, on first use).
"""

from __future__ import annotations

import time
from typing import Any

from messages import MembershipChanged, NodeInfo, TurnEvent

from ..errors import ConfigurationError, TurnTimeout
from ..store import TurnStore, open_store
from ..store.base import TurnSummary
from .receiving import Inbound
from .routing import Hosts
from .session import Session

__all__ = ["Queries"]


class Queries:
    """Answers about the cluster and the store; see the module docstring."""

    store_path: str | None
    _session: Session | None
    _inbound: Inbound
    _store: TurnStore | None

    def _running(self) -> Hosts:
        raise NotImplementedError

    # -- nodes ----------------------------------------------------------------------------

    def nodes(self, timeout: float = 10.0) -> list[NodeInfo]:
        """The nodes of this runtime's deployment, as its directory sees them: its own node
        first (``leader=True``: it runs hosts and a pool as the members do), then each member
        that joined, each with its capabilities and its number of TurnHosts."""
        self._running()
        assert self._session is not None
        return self._inbound.nodes(self._session.endpoint.send, self._session.directory, timeout)

    def wait_for_node(self, capabilities: dict[str, Any], timeout: float = 30.0) -> str:
        """Wait until a node advertising ``capabilities`` has joined and its hosts and pool are
        in this runtime's table (a turn or a call may be placed there); return its name."""
        deadline = time.monotonic() + timeout
        name = self._inbound.wait_for_node(capabilities, timeout)
        if not self._running().wait_for(name, max(0.0, deadline - time.monotonic())):
            raise TurnTimeout(f"node {name} joined, but its hosts were not in the table within {timeout:g} s")
        return name

    def placeable(self, requires: dict[str, Any] | None = None) -> list[str]:
        """The ids (``node/slot``) of the hosts a new turn that ``requires`` these capabilities
        may be placed on: those on this runtime's store, as its table has them now."""
        return sorted(self._running().placeable(requires or {}))

    @property
    def membership(self) -> list[MembershipChanged]:
        """Every join and leave seen so far, in order."""
        return list(self._inbound.membership)

    # -- the store ------------------------------------------------------------------------

    def turns(self) -> list[TurnSummary]:
        """Every turn of the store, newest first (needs ``store=``)."""
        return self._need_store().log.summaries()

    def updates(self, turn_id: str, since: int = 0) -> list[TurnEvent]:
        """The stored events of a turn from ``seq`` ``since`` on (needs ``store=``)."""
        return self._need_store().log.events(turn_id, since)

    def _need_store(self) -> TurnStore:
        if self.store_path is None:
            raise ConfigurationError("this Runtime has no store: pass store= to Runtime()")
        if self._store is None:
            self._store = open_store(self.store_path)  # opened after the forks, in this process only
        return self._store
