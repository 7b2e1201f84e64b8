"""A send queued behind another to the same target (Thespian's wait for a slot) is not
stranded when the connection the two share breaks just after the first one's ACK: the target
acknowledges the first frame with the start of a frame of its own behind the ACK, then
closes, and the second message must reach it on a new connection within 5 s (a send left
waiting for a slot nobody holds would wait its whole delivery time, 30 s by default). The
target is a raw TCP peer on 127.0.0.1, the sender an actor of a real runtime. This holds of
Thespian's own transport; it guards it under greenroom's patches of the transport pass."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from thespian.actors import ActorAddress
from thespian.system.transport.IPBase import TCPv4ActorAddress

from actors import Runtime

from .actors_for_tests import BackToBack, SendAll
from .wire import ACK

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def read_frame(conn: socket.socket) -> bytes:
    """One ``<length>>body`` frame, whole."""
    data = b""
    while b">" not in data:
        data += conn.recv(65536) or _closed()
    head, _, body = data.partition(b">")
    while len(body) < int(head):
        body += conn.recv(65536) or _closed()
    return body


def _closed() -> bytes:
    raise ConnectionError("the sender closed the connection mid-frame")


class Peer:
    """Acknowledges the first frame with the start of a frame of its own in the same segment,
    then closes that connection; then answers every frame on a new connection with an ACK,
    noting when each whole frame came."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.port = self.listener.getsockname()[1]
        self.closed_at = 0.0
        self.later: list[float] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
            with conn:
                conn.settimeout(10)
                read_frame(conn)
                conn.sendall(ACK + b"4096>" + b"the start of a fra")
                self.closed_at = time.monotonic()
            conn, _ = self.listener.accept()
            with conn:
                conn.settimeout(10)
                read_frame(conn)
                self.later.append(time.monotonic())
                conn.sendall(ACK)
        except BaseException as exc:  # the test reads it
            self.error = exc

    def close(self) -> None:
        self.listener.close()
        self.thread.join(10)


@pytest.fixture
def peer() -> Iterator[Peer]:
    p = Peer()
    yield p
    p.close()


def test_a_send_waiting_for_a_slot_goes_ahead_when_the_connection_ahead_of_it_closes_mid_frame(
    runtime: Runtime, peer: Peer
) -> None:
    asys = runtime.actor_system
    to = ActorAddress(TCPv4ActorAddress("127.0.0.1", peer.port, external=True))
    assert asys.ask(asys.createActor(BackToBack), SendAll(to, ["first", "second"]), 10) == 2
    peer.thread.join(25)  # the peer's own waits are bounded: 10 s each
    assert not peer.thread.is_alive(), "the peer still waits"
    assert peer.error is None, f"the peer failed: {peer.error!r} (a timeout: the second message never came)"
    assert peer.later, "the second message never came"
    waited = peer.later[0] - peer.closed_at
    assert waited < 5.0, f"the second message waited {waited:.1f} s for a slot nobody held"
