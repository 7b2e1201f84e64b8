"""The fault relay itself, on a toy protocol framed as Thespian frames (``<length>>body``, each
answered by Thespian's ACK frame), over loopback in a namespace created and removed here
(and once between two namespaces linked by a veth pair)."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import socket
import sys
import threading
from collections.abc import Iterator

import pytest

from actors.testing.netns import Namespace, available, interpose, main, relayed
from actors.testing.relay import CUT, DUPLICATE, PASS, RESET, STALL, FaultPolicy, FaultRelay, Frame, Rule, delay
from actors.wire.frames import NOTICE_MAGIC

from .helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.skipif(available() is not None, reason=str(available()))]

ACK = b"%d>" % len(pickle.dumps("ACK")) + pickle.dumps("ACK")
NOTICE = NOTICE_MAGIC + b"\0" * 60  # shaped like the notice a frame for another incarnation gets


def frame(body: bytes) -> bytes:
    return b"%d>" % len(body) + body


def read_frame(sock: socket.socket) -> bytes | None:
    """One frame's body, or None if the connection closed first."""
    head = b""
    while not head.endswith(b">"):
        byte = sock.recv(1)
        if not byte:
            return None
        head += byte
    size, body = int(head[:-1]), b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


class ToyServer:
    """Answers every frame with Thespian's ACK and records (connection number, body) in order;
    answers ``push`` with a frame of its own, ``pushed``, on the same connection, and
    ``stale`` with a notice instead of an ACK."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_server((host, 0))
        self.port = self.sock.getsockname()[1]
        self.got: list[tuple[int, bytes]] = []
        self.cond = threading.Condition()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        n = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            n += 1
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn, n), daemon=True).start()

    def _serve(self, conn: socket.socket, n: int) -> None:
        with contextlib.suppress(OSError):
            while (body := read_frame(conn)) is not None:
                acked = body == pickle.dumps("ACK")
                with self.cond:
                    self.got.append((n, b"<ack>" if acked else body))
                    self.cond.notify_all()
                if body == b"stale":
                    conn.sendall(frame(NOTICE))
                elif not acked:
                    conn.sendall(ACK)
                if body == b"push":  # a frame back to the side that connected, on its connection
                    conn.sendall(frame(b"pushed"))

    def bodies(self) -> list[bytes]:
        with self.cond:
            return [b for _, b in self.got]

    def wait(self, count: int, timeout: float = 10.0) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: len(self.got) >= count, timeout)

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


@contextlib.contextmanager
def toy(policy: FaultPolicy) -> Iterator[tuple[FaultRelay, ToyServer]]:
    with relayed(policy) as relay:
        server = ToyServer()
        try:
            yield relay, server
        finally:
            server.close()


def send(sock: socket.socket, body: bytes) -> bytes | None:
    sock.sendall(frame(body))
    return read_frame(sock)


def named(name: bytes) -> Rule:
    return Rule(lambda f: f.data == name, PASS)


def test_frames_pass_in_order_and_are_counted() -> None:
    with toy(FaultPolicy()) as (relay, server), socket.create_connection(("127.0.0.1", server.port)) as c:
        assert [send(c, b) for b in (b"a", b"bb", b"c" * 300_000)] == [pickle.dumps("ACK")] * 3
        assert server.bodies() == [b"a", b"bb", b"c" * 300_000]
        counts = relay.counts
        assert (counts["connections"], counts["frames"], counts["pass"], counts["ack"]) == (1, 3, 3, 3)
        assert [(r.fault, r.frame.index, r.frame.outbound, r.frame.target) for r in relay.log] == [
            (PASS, i, True, ("127.0.0.1", server.port)) for i in range(3)
        ]


def test_a_notice_answers_its_frame_as_an_ack_does() -> None:
    policy = FaultPolicy([Rule(lambda f: f.data == b"stale", CUT, times=1)])
    with toy(policy) as (relay, server), socket.create_connection(("127.0.0.1", server.port)) as c:
        with pytest.raises(ConnectionResetError):
            send(c, b"stale")  # cut: its answer, a notice, is dropped with the connection
        assert relay.wait_for(lambda: relay.counts["ack_dropped"] == 1)
        with socket.create_connection(("127.0.0.1", server.port)) as again:
            assert send(again, b"stale") == NOTICE
            assert send(again, b"fresh") == pickle.dumps("ACK")
        counts = relay.counts
        assert (counts["frames"], counts["notice"], counts["ack"]) == (3, 2, 1)  # a notice is no frame


def test_a_cut_delivers_the_frame_and_drops_its_ack_and_the_connection() -> None:
    policy = FaultPolicy([Rule(lambda f: f.data == b"b", CUT)])
    with toy(policy) as (relay, server), socket.create_connection(("127.0.0.1", server.port)) as c:
        assert send(c, b"a") == pickle.dumps("ACK")
        with pytest.raises(ConnectionResetError):
            send(c, b"b")  # delivered, but its ACK never comes: the connection is reset
        assert server.bodies() == [b"a", b"b"]
        assert relay.wait_for(lambda: relay.counts["ack_dropped"] == 1)
        with socket.create_connection(("127.0.0.1", server.port)) as again:  # a resend, as Thespian does
            assert send(again, b"b") == pickle.dumps("ACK")
        assert server.bodies() == [b"a", b"b", b"b"]
        assert relay.counts["cut"] == 1


def test_a_duplicate_is_delivered_again_on_a_new_connection_after_its_ack() -> None:
    policy = FaultPolicy([Rule(lambda f: f.data == b"twice", DUPLICATE)])
    with toy(policy) as (relay, server), socket.create_connection(("127.0.0.1", server.port)) as c:
        assert send(c, b"twice") == pickle.dumps("ACK")
        assert relay.wait_for(lambda: relay.counts["duplicate_ack"] == 1)
        assert server.got == [(1, b"twice"), (2, b"twice")]
        assert send(c, b"once") == pickle.dumps("ACK")  # the first connection goes on
        assert server.got[-1] == (1, b"once")


def test_a_duplicate_towards_the_side_that_connected_goes_twice_on_its_connection() -> None:
    policy = FaultPolicy([Rule(lambda f: not f.outbound, DUPLICATE)])
    with toy(policy) as (relay, server), socket.create_connection(("127.0.0.1", server.port)) as c:
        assert send(c, b"push") == pickle.dumps("ACK")
        for _ in range(2):  # the server's frame back, twice; each answered
            assert read_frame(c) == b"pushed"
            c.sendall(ACK)
        assert send(c, b"after") == pickle.dumps("ACK")
        assert server.bodies() == [b"push", b"<ack>", b"after"]  # the second answer was swallowed
        assert relay.counts["duplicate_ack"] == 1


def test_a_delayed_connection_is_overtaken_by_a_later_message_on_another() -> None:
    policy = FaultPolicy([Rule(lambda f: f.data == b"slow", delay(400))])
    with toy(policy) as (relay, server):
        with socket.create_connection(("127.0.0.1", server.port)) as a, socket.create_connection(
            ("127.0.0.1", server.port)
        ) as b:
            a.sendall(frame(b"slow"))
            assert relay.wait_for(lambda: relay.counts["delay"] == 1)
            assert send(b, b"fast") == pickle.dumps("ACK")
            assert read_frame(a) == pickle.dumps("ACK")
            assert server.bodies() == [b"fast", b"slow"]


def test_a_per_connection_rule_holds_every_later_frame_of_that_connection() -> None:
    policy = FaultPolicy([Rule(lambda f: f.data == b"first", delay(50), connection=True)])
    with toy(policy) as (relay, server), socket.create_connection(("127.0.0.1", server.port)) as c:
        for body in (b"first", b"second", b"third"):
            assert send(c, body) == pickle.dumps("ACK")
        assert [r.fault for r in relay.log] == [delay(50)] * 3


def test_a_stall_holds_a_frame_until_the_relay_stops_while_other_connections_flow() -> None:
    policy = FaultPolicy([Rule(lambda f: f.data == b"stuck", STALL)])
    with toy(policy) as (relay, server):
        stuck = socket.create_connection(("127.0.0.1", server.port))
        stuck.sendall(frame(b"stuck"))
        assert relay.wait_for(lambda: relay.counts["stall"] == 1)
        with socket.create_connection(("127.0.0.1", server.port)) as other:
            assert send(other, b"flows") == pickle.dumps("ACK")
        assert server.bodies() == [b"flows"]
        relay.stop()
        with pytest.raises(ConnectionResetError):
            read_frame(stuck)  # the relay stopped: the stalled connection is reset, never delivered
        stuck.close()
        assert server.bodies() == [b"flows"]


def test_a_reset_drops_the_frame_and_resets_the_sender() -> None:
    policy = FaultPolicy([Rule(lambda f: f.data == b"lost", RESET)])
    with toy(policy) as (relay, server), socket.create_connection(("127.0.0.1", server.port)) as c:
        with pytest.raises(ConnectionResetError):
            send(c, b"lost")
        with socket.create_connection(("127.0.0.1", server.port)) as again:
            assert send(again, b"after") == pickle.dumps("ACK")
        assert server.bodies() == [b"after"]
        assert relay.counts["reset"] == 1


def test_a_stream_that_is_not_framed_passes_untouched() -> None:
    with toy(FaultPolicy(rates={"reset": 1.0})) as (relay, server):
        echo = socket.create_server(("127.0.0.1", 0))
        port = echo.getsockname()[1]

        def serve() -> None:
            conn, _ = echo.accept()
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

        threading.Thread(target=serve, daemon=True).start()
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.sendall(b"GET / HTTP/1.1\r\n\r\n1>x")
            got = b""
            while len(got) < 21:
                got += c.recv(65536)
        echo.close()
        assert got == b"GET / HTTP/1.1\r\n\r\n1>x"
        assert relay.counts["frames"] == 0


def test_a_refused_destination_resets_the_sender() -> None:
    with relayed(FaultPolicy()) as relay:
        free = socket.create_server(("127.0.0.1", 0))
        port = free.getsockname()[1]
        free.close()
        with socket.create_connection(("127.0.0.1", port)) as c, pytest.raises(ConnectionResetError):
            send(c, b"nobody")
        assert relay.wait_for(lambda: relay.counts["refused"] == 1)


def test_the_same_seed_draws_the_same_faults_for_the_same_frames() -> None:
    frames = [Frame(1, True, i, ("127.0.0.1", 1), b"x") for i in range(200)]
    rates = {"cut": 0.1, "duplicate": 0.1, "delay": 0.1, "reset": 0.05}

    def draws(seed: int) -> list[object]:
        policy = FaultPolicy(seed=seed, rates=rates, delay_ms=(5, 50))
        return [policy.decide(f) for f in frames]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)
    kinds = {f.kind for f in draws(7)}  # type: ignore[attr-defined]
    assert kinds == {"pass", "cut", "duplicate", "delay", "reset"}
    with pytest.raises(ValueError, match=r"unknown fault kinds \['drop'\]"):
        FaultPolicy(rates={"drop": 0.1})


def test_a_rule_applies_its_count_then_the_frames_pass() -> None:
    rule = Rule(lambda f: f.carries("Stop"), CUT, times=2)
    policy = FaultPolicy([rule])
    stop = Frame(1, True, 0, ("h", 1), pickle.dumps(("addr", "Stop"), protocol=5))
    other = Frame(1, True, 0, ("h", 1), pickle.dumps(("addr", "StopTurn"), protocol=5))
    assert [policy.decide(f) for f in (other, stop, stop, stop)] == [PASS, CUT, CUT, PASS]
    assert rule.used == 2


def test_a_namespace_removes_what_runs_in_it() -> None:
    with Namespace() as ns:
        sleeper = ns.popen(["sleep", "300"])  # ip netns exec: in the namespace once it has entered it
        assert wait_until(lambda: sleeper.pid in ns.processes(), timeout=10)
    assert sleeper.wait(10) == -9


def test_between_two_namespaces_a_relay_takes_the_connections_its_side_starts() -> None:
    net = f"10.232.{10 + os.getpid() % 240}"
    policy = FaultPolicy([Rule(lambda f: f.data == b"b", CUT)])
    with Namespace() as here, Namespace() as there:
        here.join(there, f"{net}.1", f"{net}.2")
        with there.entered():
            server = ToyServer(host=f"{net}.2")
        try:
            with here.entered(), FaultRelay(policy) as relay, interpose(relay):
                with socket.create_connection((f"{net}.2", server.port)) as c:
                    assert send(c, b"a") == pickle.dumps("ACK")
                    with pytest.raises(ConnectionResetError):
                        send(c, b"b")
                assert relay.log[0].frame.target == (f"{net}.2", server.port)
            assert server.bodies() == [b"a", b"b"]
        finally:
            server.close()


def test_the_command_line_runs_a_command_with_every_connection_through_a_relay(
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = (
        "import socket; s = socket.create_server(('127.0.0.1', 0)); "
        "c = socket.create_connection(s.getsockname()); a, _ = s.accept(); "
        "c.sendall(b'3>abc'); assert a.recv(5) == b'3>abc'"
    )
    assert main(["--seed", "3", "--cut", "0", "--", sys.executable, "-c", script]) == 0
    counts = json.loads(capsys.readouterr().err.strip().splitlines()[-1])["relay"]
    assert (counts["connections"], counts["frames"], counts["pass"]) == (1, 1, 1)
