"""DirectoryLocator: how a member node learns where the leader's directory is.

Global names do not span a Thespian convention, so ``greenroom node`` creates one of these
with the leader's capability (Thespian places it on the leader) and asks it ``"where"``:
it answers with the leader's directory. It lives as long as the leader's actor system, so
the node asks it again every few seconds and learns at once when a restarted leader's
directory has a new address, and registers its node there again.
"""

from __future__ import annotations

from typing import Any

from thespian.actors import ActorTypeDispatcher

from .directory import DirectoryActor
from .names import DIRECTORY_NAME, LEADER_CAPABILITY

__all__ = ["DirectoryLocator"]


class DirectoryLocator(ActorTypeDispatcher):
    """Created on the leader by a member node; see the module docstring."""

    @staticmethod
    def actorSystemCapabilityCheck(capabilities: dict[str, Any], requirements: dict[str, Any] | None) -> bool:
        return bool(capabilities.get(LEADER_CAPABILITY))

    def receiveMessage(self, msg: Any, sender: Any) -> None:
        if msg == "where":
            self.send(sender, self.createActor(DirectoryActor, globalName=DIRECTORY_NAME))
