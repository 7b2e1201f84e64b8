"""The transport against hostile frames: forged, malformed, fuzzed, replayed, idle, read on
the wire. Every attack goes to every listening port of a running runtime, which must keep
serving turns with all its processes alive."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actors import Runtime
from actors.lifecycle.processes import descendants, session_processes
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.testing.netns import available, relayed
from actors.testing.relay import MARK, FaultPolicy
from actors.wire.frames import (
    DUPLICATE,
    MAGIC,
    NOTICE_MAGIC,
    BoundedReceiveBuffer,
    FrameCodec,
    FrameRejected,
)
from actors.wire.incarnation import Incarnation

from . import tools_for_tests as T
from .helpers import pid_alive, wait_until
from .wire import ACK, ACK_DATAERR, can_capture, capture, frame, listening_sockets, send_raw

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


class Touch:
    """A pickle that creates a file when it is loaded: what an attacker would send."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.path}",))


def tree(rt: Runtime) -> list[int]:
    return tree_of(rt.admin_sid)  # type: ignore[arg-type]


def tree_of(sid: int) -> list[int]:
    pids = set(session_processes(sid))
    for pid in list(pids):
        pids.update(descendants(pid))
    return sorted(pids)


def ports(rt: Runtime) -> list[int]:
    return sorted({port for _, port in listening_sockets(set(tree(rt)))})


def still_serving(rt: Runtime, provider: ScriptedProvider, processes: list[int]) -> None:
    """Every process the attack found is alive, and a turn still runs."""
    assert [p for p in processes if not pid_alive(p)] == []
    provider.add(say("still here"))
    assert rt.run("hello?").result(30).text == "still here"


# -- forged and malformed frames ----------------------------------------------------------


@pytest.mark.parametrize("forgery", ["plain_pickle", "greenroom_v1_frame", "bad_signature", "another_key"])
def test_a_forged_frame_to_every_port_runs_nothing_and_each_connection_is_closed(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path, forgery: str
) -> None:
    marker = tmp_path / "pwned"
    evil = pickle.dumps(Touch(str(marker)))
    processes, targets = tree(runtime), ports(runtime)
    for port in targets:
        if forgery == "plain_pickle":
            payload = evil
        elif forgery == "greenroom_v1_frame":
            payload = b"GRv1" + b"\0" * 32 + evil
        else:
            key = b"k" * 32 if forgery == "another_key" else os.urandom(32)
            codec = FrameCodec(key, encrypt=False, incarnation=Incarnation())
            sealed = codec.seal(Touch(str(marker)), "127.0.0.1", port)
            payload = sealed if forgery == "another_key" else sealed[:-1] + bytes([sealed[-1] ^ 1])
        assert send_raw(port, frame(payload)) == ACK_DATAERR  # refused before anything was unpickled
    still_serving(runtime, provider, processes)
    assert not marker.exists()


@pytest.mark.parametrize(
    "data",
    [b"-5>", b"-1>" + b"x" * 100, b"99999999999999999999>", b"12a>hello", b"1" * 40, b"100>short", b">"],
    ids=["negative", "negative_with_data", "huge", "not_digits", "endless_digits", "truncated", "empty_length"],
)
def test_a_frame_that_lies_about_its_length_closes_only_its_own_connection(
    runtime: Runtime, provider: ScriptedProvider, data: bytes
) -> None:
    processes, targets = tree(runtime), ports(runtime)
    for port in targets:
        assert send_raw(port, data) == b""  # closed, unanswered
    still_serving(runtime, provider, processes)


def test_an_empty_frame_is_refused_like_a_forged_one(runtime: Runtime, provider: ScriptedProvider) -> None:
    processes, targets = tree(runtime), ports(runtime)
    for port in targets:
        assert send_raw(port, b"0>") == ACK_DATAERR
    still_serving(runtime, provider, processes)


def test_fuzzed_frames_to_every_port_leave_the_runtime_serving(runtime: Runtime, provider: ScriptedProvider) -> None:
    rng = random.Random(20261130)
    processes, targets = tree(runtime), ports(runtime)
    for batch in range(6):
        for port in targets:
            send_raw(port, fuzz(rng, port))
        still_serving(runtime, provider, processes)


def fuzz(rng: random.Random, port: int) -> bytes:
    """Random lengths, truncations, garbage, and valid-looking greenroom headers."""
    kind = rng.choice(["garbage", "length", "header", "truncated"])
    if kind == "garbage":
        return os.urandom(rng.randint(1, 4000))
    if kind == "length":
        return str(rng.choice([-(2**40), -1, 0, 2**31, 10**15, rng.randint(0, 500)])).encode() + b">" + os.urandom(50)
    head = struct.pack("!4sB8s16s16sQQHB", MAGIC, rng.randint(0, 255), os.urandom(8), os.urandom(16), os.urandom(16),
                       rng.getrandbits(64), rng.getrandbits(64), port, rng.randint(0, 255))  # fmt: skip
    head += os.urandom(rng.randint(0, 300))
    body = head if kind == "header" else head[: rng.randint(1, len(head))]
    return b"%d>" % rng.choice([len(body), len(body) + rng.randint(1, 1000)]) + body


def test_the_frame_reader_refuses_bad_lengths_before_sizing_anything() -> None:
    for bad in (b"-3>", b"1234567890123>", b"x>", b"9" * 13):
        buffer = BoundedReceiveBuffer(lambda b: b)
        with pytest.raises(FrameRejected):
            buffer.addMore(bad)
    with pytest.raises(FrameRejected, match=f"over the limit of {BoundedReceiveBuffer.max_frame}"):
        BoundedReceiveBuffer(lambda b: b).addMore(b"%d>" % (BoundedReceiveBuffer.max_frame + 1))


# -- replay ----------------------------------------------------------------------------------


def test_a_frame_accepted_once_opens_as_a_duplicate_afterwards() -> None:
    here = Incarnation()
    here.listen("127.0.0.1", 4242)
    codec = FrameCodec(b"k" * 32, encrypt=False, incarnation=here)
    sealed = codec.seal(("sender", "hello"), "127.0.0.1", 4242)
    assert codec.open(sealed) == ("sender", "hello")
    assert codec.open(sealed) is DUPLICATE  # acknowledged again by the transport, delivered to nobody
    assert codec.open(codec.seal(("sender", "next"), "127.0.0.1", 4242)) == ("sender", "next")


@pytest.mark.skipif(not can_capture(), reason="capturing the loopback needs root")
def test_frames_captured_on_the_loopback_and_sent_again_are_acknowledged_and_do_nothing(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.txt"
    provider.add(use_tools(call("append_key_now", {"path": str(keys)})), say("recorded"))
    with capture() as wire:
        turn = runtime.run("record it", tools=[T.append_key_now])
        assert turn.result(30).text == "recorded"
    # only this runtime's frames: the loopback also carries those of other runtimes on the machine
    mine = [(port, data) for port, data in wire.payloads if port in set(ports(runtime))]
    runs = [(port, data) for port, data in mine if b"RunTool" in data]
    starts = [(port, data) for port, data in mine if b"StartTurn" in data]
    assert runs and starts, "the capture saw the turn's frames"
    requests = len(provider.requests)
    for port, data in runs + starts:  # accepted before: acknowledged again (a resend), delivered to nobody
        answer = send_raw(port, data)
        # or, for a frame the sender had sealed for an earlier incarnation on that port (a port
        # reused by this runtime in a long test session): a notice, also delivered to nobody
        assert answer == ACK or answer.split(b">", 1)[1].startswith(b"GRn1"), answer[:16]
    still_serving(runtime, provider, tree(runtime))
    assert keys.read_text() == f"{turn.turn_id}:0:call_1\n", "a replayed RunTool ran the tool again"
    assert len(provider.requests) == requests + 1, "a replayed StartTurn started a turn again"


@pytest.mark.skipif(available() is not None, reason=str(available()))
def test_a_second_runtime_with_the_same_key_on_the_same_ports_takes_none_of_the_first_runtimes_frames() -> None:
    """Every frame sent between the first runtime's processes, recorded whole by the relay,
    is sent again to the same port once a second runtime with the same key listens on the
    same admin port: none is acknowledged (an ACK is sent only for a frame unpickled and
    delivered), none makes an actor, and the second runtime goes on serving."""
    settings = {"key": os.urandom(32).hex(), "admin_port": 1900}  # in a namespace of its own: the port is free
    with relayed(FaultPolicy(), log_bytes=1 << 30) as relay:  # the relay records every frame whole
        with Child(**settings) as first:
            assert first.turn("recorded") == "the answer to recorded is three"
        sent = list(dict.fromkeys((r.frame.target[1], r.frame.data) for r in relay.log if r.frame.outbound))
        with Child(**settings) as second:
            assert second.turn("before") == "the answer to before is three"
            processes = tree_of(second.info["sid"])
            answers = [answer_to(port, data) for port, data in sent]
            assert tree_of(second.info["sid"]) == processes  # no replay made an actor or a process
            assert second.turn("after") == "the answer to after is three"
    reached = [a for a in answers if a != "nobody listens"]
    assert len(reached) >= 3, f"too few frames reached a process of the second runtime: {answers}"
    assert "ack" not in answers  # an ACK: the frame was taken (unpickled, delivered)
    assert set(reached) <= {"notice", "refused"}


@pytest.mark.skipif(available() is not None, reason=str(available()))
def test_a_process_that_knows_a_runtime_only_by_its_port_is_told_its_incarnation_and_answered() -> None:
    key = "a deployment key of some length"
    with relayed(FaultPolicy()) as relay, Child(key=key.encode().hex(), admin_port=1900):
        before = relay.counts["notice"]
        nodes = subprocess.run(
            [sys.executable, "-m", "actors.cli", "--json", "nodes", "--admin", "127.0.0.1:1900"],
            env=dict(ENV, GREENROOM_KEY=key), cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        notices = relay.counts["notice"] - before
    assert (nodes.returncode, nodes.stderr) == (0, "")
    assert [(n["node"], n["leader"]) for n in json.loads(nodes.stdout)] == [("127.0.0.1:1900", True)]  # no member
    assert notices >= 1, "the command line's first frame, sealed for no incarnation, got a notice"


def answer_to(port: int, data: bytes) -> str:
    """How a frame replayed on its own port was answered (straight there: the relay lets
    connections with its mark pass)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
        s.settimeout(10)
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return "nobody listens"
        s.sendall(frame(data))
        s.shutdown(socket.SHUT_WR)
        answer = b""
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            while chunk := s.recv(65536):
                answer += chunk
    if answer == ACK:
        return "ack"
    if answer in (ACK_DATAERR, b""):
        return "refused"
    return "notice" if answer.partition(b">")[2].startswith(NOTICE_MAGIC) else f"answered {answer[:40]!r}"


# -- limits and confidentiality, each in a runtime of its own ---------------------------------


class Child:
    """``tests.transport_child``: a runtime with its own transport settings."""

    def __init__(self, **config: Any) -> None:
        cmd = [sys.executable, "-m", "tests.transport_child", json.dumps(config)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
        self.info = json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]

    def turn(self, word: str) -> str:
        self.proc.stdin.write(f"turn {word}\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return json.loads(self.proc.stdout.readline())["text"]  # type: ignore[union-attr]

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.stdin.write("quit\n")  # type: ignore[union-attr]
        self.proc.stdin.close()  # type: ignore[union-attr]
        assert self.proc.wait(30) == 0
        assert wait_until(lambda: session_processes(self.info["sid"]) == [])


def test_idle_connections_are_capped_per_peer_and_closed_after_the_frame_timeout() -> None:
    with Child(frame_timeout=1.0, max_pending_per_peer=16) as child:
        port = child.info["admin_port"]
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(200)]
        assert child.turn("idle") == "the answer to idle is three"
        for s in idle:
            s.settimeout(10)
            assert s.recv(1) == b""  # closed by the runtime: evicted, or too slow to send a frame
            s.close()
        assert child.turn("after") == "the answer to after is three"


@pytest.mark.skipif(not can_capture(), reason="capturing the loopback needs root")
@pytest.mark.parametrize("encrypt", [True, False])
def test_with_encryption_nothing_of_a_turn_is_readable_on_the_wire(encrypt: bool) -> None:
    with Child(encrypt=encrypt) as child, capture() as wire:
        assert child.turn("xylophone") == "the answer to xylophone is three"
    ours = b"".join(data for _, data in wire.payloads if MAGIC in data)
    assert ours, "the capture saw the runtime's frames"
    assert (b"xylophone" in ours) is (not encrypt)
