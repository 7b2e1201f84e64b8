"""Where a Runtime's messages for its turns go: the TurnHost of each turn's slot.

A turn lives on the host of its slot (``names.slot_of``), so a start, a command or a
subscription goes straight there without asking anyone.

- Order: Thespian does not order messages, so a command for a turn whose ``StartTurn`` has
  not been acknowledged yet is held here and sent once it is (the host then has the turn);
  it can never overtake the start, however slow the network is.
- A message the transport could not deliver, after its own retries, fails its waiter: a
  command's future raises ``HostUnreachable``, a starting turn's stream ends ``host_lost``,
  and so do the commands held for it. A resend after a lost acknowledgement is not a
  failure: the receiver acknowledges it again and delivers it once (``wire.frames``).
- Flow control: each stream's window travels in ``StartTurn``/``Subscribe``, and what its
  readers read goes back to the host as ``Consumed``.
- When a host dies the directory starts a replacement and says so (``HostReplaced``): the
  turns recovered there (with a store) are followed on it from the last event seen; the
  others end here with ``Error`` + ``Finish(error)``, never a hang.
"""

from __future__ import annotations

import concurrent.futures
import threading
import uuid
from typing import Any

from messages import Consumed, ControlReply, StartTurn, Subscribe, Unsubscribe, unaddressed

from ..cluster.names import slot_of
from ..errors import ConfigurationError, HostUnreachable
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

    def __init__(self, endpoint: Endpoint, inbound: Inbound, addresses: list[Any], window: int | None = None) -> None:
        self._endpoint = endpoint
        self._inbound = inbound
        self._addresses = list(addresses)
        self.window = window
        self._lock = threading.Lock()
        self._starting: dict[str, list[tuple[Any, concurrent.futures.Future[ControlReply]]]] = {}

    def of(self, turn_id: str) -> Any:
        return self._addresses[slot_of(turn_id, len(self._addresses))]

    def open(self, turn_id: str, since: int, fresh: bool) -> TurnStream:
        """A stream for ``turn_id`` whose readers' progress goes back to its host."""
        consumed = lambda seq: self._endpoint.send(self.of(turn_id), Consumed(turn_id=turn_id, seq=seq))
        resend = lambda seq: self._endpoint.send(  # no request id: the host answers with the events
            self.of(turn_id), Subscribe(turn_id=turn_id, since=seq, window=self.window)
        )
        return self._inbound.open_stream(turn_id, since, fresh, self.window, consumed, resend)

    def start(self, start: StartTurn) -> TurnStream:
        """Send ``StartTurn``; the turn's stream, which follows its events from 0."""
        tid = start.turn_id
        stream = self.open(tid, 0, fresh=True)
        with self._lock:
            self._starting[tid] = []

        def lost() -> None:
            stream.lost("its host cannot be reached")
            for command, future in self._started(tid):
                _unreachable(command, future, self._inbound)

        def sent() -> None:
            for command, future in self._started(tid):
                self._send(command, future)

        message = start if start.window == self.window else start.model_copy(update={"window": self.window})
        self._endpoint.send(self.of(tid), message, lost, sent)
        return stream

    def _started(self, turn_id: str) -> list[tuple[Any, concurrent.futures.Future[ControlReply]]]:
        with self._lock:
            return self._starting.pop(turn_id, [])

    def command(self, command: Any) -> concurrent.futures.Future[ControlReply]:
        """Send a command to its turn's host (after its ``StartTurn``, if that is still on its
        way); the future gets the turn's ``ControlReply``. A future cancelled by its waiter
        is forgotten."""
        if command.request_id is None:
            command = command.model_copy(update={"request_id": uuid.uuid4().hex})
        rid = command.request_id
        future = self._inbound.expect(rid)
        future.add_done_callback(lambda f: self._inbound.forget(rid) if f.cancelled() else None)
        with self._lock:
            held = self._starting.get(command.turn_id)
            if held is not None:
                held.append((command, future))
                return future
        self._send(command, future)
        return future

    def _send(self, command: Any, future: concurrent.futures.Future[ControlReply]) -> None:
        self._endpoint.send(self.of(command.turn_id), command, lambda: _unreachable(command, future, self._inbound))

    def subscribe(self, turn_id: str, since: int) -> tuple[TurnStream, concurrent.futures.Future[ControlReply]]:
        """Follow a turn started elsewhere from ``since``; the future gets the host's answer."""
        stream = self.open(turn_id, since, fresh=False)
        return stream, self.command(Subscribe(turn_id=turn_id, since=since, window=self.window))

    def unsubscribe(self, turn_id: str) -> None:
        """Tell the turn's host to send this runtime nothing more of it."""
        self._endpoint.send(self.of(turn_id), Unsubscribe(turn_id=turn_id))

    def replaced(self, msg: HostReplaced) -> None:
        """A host died: follow its recovered turns on the new one; end the others here."""
        self._addresses[msg.slot] = msg.address
        for turn_id, stream in self._inbound.open_streams():
            if slot_of(turn_id, len(self._addresses)) != msg.slot or stream.finished:
                continue
            if turn_id in msg.recovered:
                resubscribe = Subscribe(turn_id=turn_id, since=stream.next_seq, window=self.window)
                self._endpoint.send(msg.address, resubscribe)
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


def _unreachable(command: Any, future: concurrent.futures.Future[ControlReply], inbound: Inbound | None = None) -> None:
    if inbound is not None:
        inbound.forget(command.request_id)
    if not future.done():
        future.set_exception(HostUnreachable(f"{command.kind}: the host of turn {command.turn_id} cannot be reached"))
