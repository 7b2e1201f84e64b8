"""How a ``TurnHost`` answers the sender of a command (a base of it).

- A command queued in the store (its sender a ``StoredSender``) is answered there, off the
  actor thread.
- A start's ``running`` answer to the host's ``owner`` (its node's Runtime; on a member's
  host, the leader's, named by ``NodesChanged``) goes in the outbox of that Runtime's
  events, ahead of them. The host runs a new turn's mailbox in the handler that admitted it,
  so without a store the answer and the turn's ``TurnStarted`` leave as one ``EventBatch``
  at the end of that handler, one message less a turn; with a store the ``TurnStarted``
  waits for its write and the answer leaves alone, as an ``EventBatch``. The Runtime takes
  it out of the batch (``client.records.batch_records``). While a batch to the Runtime is in
  flight the answer waits behind it in the outbox, where a reply sent on its own would have
  gone at once to the transport's queue: a reply sent after it (a refusal of the start's
  first write) may overtake it, and the Runtime takes either order. An outbox whose
  subscriber is being dropped is passed over: the answer is sent on its own. So is a start
  onto a member's host that came before the ``NodesChanged`` naming the leader's Runtime (the
  Runtime may place a turn on a node as soon as its own directory tells it of the node; the
  member's directory tells its hosts one hop later): one message more, once a host.
- Everyone else (a supervisor actor, a tool's sub-agent, another node's Runtime, a
  ``queued`` or refused start) gets a ``ControlReply`` of its own, and batches that hold
  events only.
"""

from __future__ import annotations

from typing import Any

from messages import ControlReply, encode

from .draining import logged_reply
from .durable import StoredSender

__all__ = ["HostAnswers"]


class HostAnswers:
    """The answers of a ``TurnHost``; see the module docstring."""

    def reply(self, to: Any, reply: ControlReply) -> None:
        """Answer a command's sender; one queued in the store is answered there (off this thread)."""
        host: Any = self
        if isinstance(to, StoredSender):
            if host.durable is not None:
                command_id = to.command_id
                host.durable.journal.read(lambda store: store.inbox.answer(command_id, reply), logged_reply(command_id))
        elif to is not None:
            host.send(to, reply)

    def answer_start(self, to: Any, reply: ControlReply) -> None:
        """A start's ``running`` answer: to the host's owner with its turn's first events."""
        host: Any = self
        owner = host.owner  # an address: never equal to a StoredSender
        if owner is not None and owner == to and host.outboxes.reachable(str(to)):
            host.outboxes.deliver(str(to), to, encode(reply), reply.kind)
        else:
            self.reply(to, reply)
