"""A base for supervisor actors: plain Thespian actors that start and steer turns.

A turn sends its subscribers ``EventBatch`` messages (several events each, see
``wire.protocol.EventBatch``). ``Supervisor.receiveMsg_EventBatch`` hands every event of a batch
to ``receiveMessage`` in turn, so ``receiveMsg_TextDelta``, ``receiveMsg_Finish`` or a
catch-all ``receiveMsg_TurnEvent`` see one event at a time. Events arrive in ``seq`` order
within a batch; Thespian does not order batches, so order across them by ``seq``.

Commands are plain messages sent to the directory (``self.createActor(DirectoryActor,
globalName=DIRECTORY_NAME)``) or to any node's directory: ``StartTurn``, ``StopTurn``,
``CancelTurn``, ``ToolApprovalResponse``, ``RespondToApprovals``, ``StopTool``.
"""

from __future__ import annotations

from typing import Any

from thespian.actors import ActorTypeDispatcher

from .wire.protocol import EventBatch

__all__ = ["Supervisor"]


class Supervisor(ActorTypeDispatcher):
    """An ``ActorTypeDispatcher`` that unpacks event batches into single events."""

    def receiveMsg_EventBatch(self, batch: EventBatch, sender: Any) -> None:
        for event in batch.events:
            self.receiveMessage(event, sender)
