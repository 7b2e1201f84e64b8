"""Where a Runtime's messages for its turns go: the TurnHost of each turn's slot.

A turn lives on the host of its slot (``names.slot_of``), so a start, a command or a
subscription goes straight there without asking anyone. A message that cannot be delivered
fails its waiter at once: a command's future raises ``TurnTimeout``, a starting turn's
stream ends ``host_lost``. When a host dies the directory starts a replacement and says so
(``HostReplaced``): the turns recovered there (with a store) are followed on it from the
last event seen; the others end here with ``Error`` + ``Finish(error)``, never a hang.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from typing import Any

from messages import ControlReply, StartTurn, Subscribe, unaddressed

from ..cluster.names import slot_of
from ..errors import ConfigurationError, TurnTimeout
from ..wire.protocol import HostReplaced, Shutdown
from .endpoint import Endpoint
from .receiving import Inbound
from .stream import TurnStream

__all__ = ["Hosts", "addressed"]


def addressed(command: Any) -> None:
    """Raise ``ConfigurationError`` unless ``command`` names its turn."""
    refused = unaddressed(command)
    if refused is not None:
        raise ConfigurationError(f"{refused.message} to be sent through the Runtime")


class Hosts:
    """The addresses of a Runtime's TurnHosts, by slot. Any thread may send through it; only
    the pump thread changes an address (``replaced``), one list item at a time."""

    def __init__(self, endpoint: Endpoint, inbound: Inbound, addresses: list[Any]) -> None:
        self._endpoint = endpoint
        self._inbound = inbound
        self._addresses = list(addresses)

    def of(self, turn_id: str) -> Any:
        return self._addresses[slot_of(turn_id, len(self._addresses))]

    def start(self, start: StartTurn) -> TurnStream:
        """Send ``StartTurn``; the turn's stream, which follows its events from 0."""
        stream = self._inbound.open_stream(start.turn_id, 0, fresh=True)
        lost = lambda: stream.lost("its host cannot be reached")
        self._endpoint.send(self.of(start.turn_id), start, lost)
        return stream

    def command(self, command: Any) -> concurrent.futures.Future[ControlReply]:
        """Send a command to its turn's host; the future gets the turn's ``ControlReply``."""
        if command.request_id is None:
            command = command.model_copy(update={"request_id": uuid.uuid4().hex})
        future = self._inbound.expect(command.request_id)

        def undeliverable() -> None:
            if self._inbound.forget(command.request_id) is not None and not future.done():
                future.set_exception(TurnTimeout(f"{command.kind}: the turn's host cannot be reached"))

        self._endpoint.send(self.of(command.turn_id), command, undeliverable)
        return future

    def replaced(self, msg: HostReplaced) -> None:
        """A host died: follow its recovered turns on the new one; end the others here."""
        self._addresses[msg.slot] = msg.address
        for turn_id, stream in self._inbound.open_streams():
            if slot_of(turn_id, len(self._addresses)) != msg.slot or stream.finished:
                continue
            if turn_id in msg.recovered:
                self._endpoint.send(msg.address, Subscribe(turn_id=turn_id, since=stream.next_seq))
            else:
                detail = "the process that ran this turn died; it had no store to recover from"
                stream.lost(detail)
                self._inbound.drop(turn_id, stream)

    def shut_down(self, shutdown: Shutdown, timeout: float) -> None:
        """Send ``shutdown`` to every host, behind the turns' own messages, and wait (at most
        ``timeout`` seconds) until each has said ``ShutdownDone``."""
        done = []
        for slot, address in enumerate(self._addresses):
            done.append(self._inbound.expect(f"ShutdownDone:{slot}"))
            self._endpoint.send(address, shutdown)
        concurrent.futures.wait(done, max(0.0, timeout))
