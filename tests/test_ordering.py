"""``ordering.in_order`` on Thespian's own send steps, with only its sockets stood in for.

The cases need a send to fail in one exact way at one exact moment (reset on each attempt
until its deadline, refused while another waits, its target found dead), which a real
connection cannot be made to do in a bounded test; ``tests/test_lossy_network.py`` and
``tests/test_fleet_admission.py`` hold the end-to-end cases on real sockets. Here every
step but the connect is Thespian's ``TCPTransport`` code, and the transport's loop is
driven as Thespian drives it: one pass of its timeouts, after waiting for the earliest
of its intents' delays.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from thespian.actors import ActorAddress
from thespian.system.transport import SendStatus, TransmitIntent
from thespian.system.transport import TCPTransport as tcp

from actors.wire.ordering import in_order

TARGET = ActorAddress(("10.0.0.2", 5000))
_fds = itertools.count(100)


class _Socket:
    def __init__(self) -> None:
        self.fd = next(_fds)

    def fileno(self) -> int:
        return self.fd

    def shutdown(self, *_: Any) -> None:
        pass

    def close(self) -> None:
        pass


def _connect(self: Any, intent: Any) -> bool:
    """Thespian's connect step, its socket stood in for: the intent takes the connection
    kept for its target, or a new one; the test then acknowledges or resets it."""
    key = tcp.opsKey(intent.targetAddr)
    intent.socket = self._openSockets.pop(key).socket if key in self._openSockets else _Socket()
    self.connects.append(intent.message)
    intent.stage = 2
    return True


_next_xmit_1, _finish_intent = in_order(_connect, tcp.TCPTransport._finishIntent)


class _Transport:
    """Thespian's send steps and timeout pass (``TCPTransport``'s own functions)."""

    _next_XMIT_1 = _next_xmit_1
    _finishIntent = _finish_intent
    _next_XMIT_6 = tcp.TCPTransport._next_XMIT_6
    _nextTransmitStep = tcp.TCPTransport._nextTransmitStep
    _nextTransmitStepCheck = tcp.TCPTransport._nextTransmitStepCheck
    _processIntentTimeouts = tcp.TCPTransport._processIntentTimeouts
    _socketFile = staticmethod(tcp.TCPTransport._socketFile)
    _XMITStepSendConnect, _XMITStepRetry = 1, 6
    myAddress = "here"

    def __init__(self) -> None:
        self._transmitIntents: dict[int, Any] = {}
        self._waitingTransmits: list[Any] = []
        self._openSockets: dict[Any, Any] = {}
        self._finished_intents: list[Any] = []
        self.connects: list[str] = []

    def _queue_intent_extra(self, intent: Any) -> bool:
        return False

    def _keep(self, intent: Any) -> None:
        if hasattr(intent, "socket"):
            self._transmitIntents[intent.socket.fileno()] = intent
        else:
            self._waitingTransmits.append(intent)

    def send(self, message: str, deadline: float = 5.0, retry: float = 0.02) -> Any:
        intent = TransmitIntent(
            TARGET, message, maxPeriod=timedelta(seconds=deadline), retryPeriod=timedelta(seconds=retry)
        )
        intent.stage = 1
        if self._nextTransmitStep(intent):
            self._keep(intent)
        return intent

    def _take(self, intent: Any) -> None:
        assert self._transmitIntents.pop(intent.socket.fileno()) is intent, f"{intent.message} not in flight"

    def ack(self, intent: Any) -> None:
        self._take(intent)
        self._finishIntent(intent, SendStatus.Sent)

    def fail(self, intent: Any, status: Any) -> None:
        self._take(intent)
        self._finishIntent(intent, status)

    def reset(self, intent: Any) -> None:
        """Its connection is shut by the other end before the ACK: sent again later."""
        self._take(intent)
        intent.stage = self._XMITStepRetry
        if self._nextTransmitStep(intent):
            self._keep(intent)

    def in_flight(self) -> list[str]:
        return [i.message for i in self._transmitIntents.values()]

    def passes(self, within: float) -> Iterator[None]:
        """The transport's loop: wait for the earliest delay (as its select does), one pass."""
        end = time.monotonic() + within
        while time.monotonic() < end:
            delays = [i.delay().total_seconds() for i in self._waitingTransmits]
            time.sleep(min([0.05, *delays]))
            self._processIntentTimeouts()
            yield
        raise AssertionError(f"nothing as expected within {within} s: {self.connects}")


@pytest.fixture
def transport() -> _Transport:
    return _Transport()


def test_a_connection_the_target_opened_is_not_taken_while_a_message_is_in_flight(transport: _Transport) -> None:
    a = transport.send("A")
    transport._openSockets[tcp.opsKey(TARGET)] = tcp.IdleSocket(_Socket(), TARGET)  # the target sent here
    b = transport.send("B")
    assert (transport.in_flight(), transport.connects) == (["A"], ["A"])
    transport.ack(a)
    for _ in transport.passes(within=2):
        if "B" in transport.connects:
            break
    assert transport.in_flight() == ["B"]
    transport.ack(b)
    assert transport.greenroom_pending == {}  # type: ignore[attr-defined]


def test_a_message_sent_again_goes_before_those_sent_after_it(transport: _Transport) -> None:
    a = transport.send("A", retry=0.05)
    transport.reset(a)
    b = transport.send("B")
    assert transport.connects == ["A"]
    for _ in transport.passes(within=2):
        if transport.connects == ["A", "A"]:
            break
    transport.ack(a)
    for _ in transport.passes(within=2):
        if "B" in transport.connects:
            break
    assert transport.connects == ["A", "A", "B"]
    transport.ack(b)


def test_messages_behind_one_that_expired_while_being_sent_again_are_sent_in_order(transport: _Transport) -> None:
    a = transport.send("A", deadline=0.3, retry=0.05)
    transport.reset(a)
    b = transport.send("B")
    for _ in transport.passes(within=3):
        if "A" in transport.in_flight():
            transport.reset(a)  # every attempt of A is reset, until its deadline
        if "B" in transport.connects:
            break
    assert [(i.message, s) for i, s in transport._finished_intents] == [("A", SendStatus.Failed)]
    c = transport.send("C")  # sent once B is on its way: it waits for B
    assert transport.in_flight() == ["B"]
    transport.ack(b)
    for _ in transport.passes(within=2):
        if "C" in transport.connects:
            break
    transport.ack(c)
    assert [m for m in transport.connects if m != "A"] == ["B", "C"]


def test_a_message_stepped_again_after_a_refusal_then_reset_still_goes_first(transport: _Transport) -> None:
    x = transport.send("X", retry=0.05)
    r = transport.send("R", retry=0.05)
    transport.fail(x, SendStatus.BadPacket)  # Thespian steps those waiting for the target at once
    assert transport.in_flight() == ["R"]
    transport.reset(r)
    c = transport.send("C")
    assert transport.connects == ["X", "R"]
    for _ in transport.passes(within=2):
        if transport.connects[-1] != "R" or len(transport.connects) > 2:
            break
    assert transport.connects == ["X", "R", "R"]
    transport.ack(r)
    for _ in transport.passes(within=2):
        if "C" in transport.connects:
            break
    transport.ack(c)


def test_messages_ended_with_a_dead_target_hold_nothing_back(transport: _Transport) -> None:
    x = transport.send("X")
    transport.send("R")
    transport.fail(x, SendStatus.DeadTarget)
    assert sorted((i.message, s) for i, s in transport._finished_intents) == [
        ("R", SendStatus.DeadTarget),
        ("X", SendStatus.DeadTarget),
    ]
    assert transport.greenroom_pending == {}  # type: ignore[attr-defined]
    transport._openSockets[tcp.opsKey(TARGET)] = tcp.IdleSocket(_Socket(), TARGET)  # back, on its port
    transport.send("D")
    assert transport.in_flight() == ["D"]
