"""The TCP transport refuses unsigned frames before unpickling them."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from actors import Runtime, TransportAuthError
from actors.scripted_provider import ScriptedProvider, say
from actors.transport import MAGIC, SignedPickle

pytestmark = pytest.mark.integration


class Touch:
    """A pickle that creates a file when it is loaded: what an attacker would send."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.path}",))


def frame(payload: bytes) -> bytes:
    """Thespian's TCP framing: '<length>>' then the serialized envelope."""
    return b"%d>" % len(payload) + payload


def send_raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        s.settimeout(5)
        try:
            return s.recv(100)
        except (socket.timeout, ConnectionResetError):
            return b""


def port_of(address: object) -> int:
    return int(str(address).rsplit(":", 1)[1].rstrip(")"))


def test_the_forged_payload_is_live_when_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "control"
    subprocess.run(
        [sys.executable, "-c", "import pickle,sys; pickle.loads(sys.stdin.buffer.read())"],
        input=pickle.dumps(Touch(str(marker))),
        check=True,
        timeout=30,
    )
    assert marker.exists(), "the payload should run code when unpickled (positive control)"


@pytest.mark.parametrize("forgery", ["plain_pickle", "bad_mac"])
def test_a_forged_frame_to_the_admin_and_to_an_actor_runs_nothing_and_messaging_goes_on(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path, forgery: str
) -> None:
    marker = tmp_path / "pwned"
    evil = pickle.dumps(Touch(str(marker)))
    payload = evil if forgery == "plain_pickle" else MAGIC + b"\0" * 32 + evil
    for port in (runtime.admin_port, port_of(runtime.directory)):
        answer = send_raw(port, frame(payload))
        assert b"ACK+DATAERR" in answer or answer == b""
    provider.add(say("still here"))
    assert runtime.run("hello?").result(30).text == "still here"
    assert not marker.exists()


def test_signed_pickle_rejects_before_loading() -> None:
    codec = SignedPickle(b"k" * 32)
    assert codec.loads(codec.dumps({"a": 1})) == {"a": 1}
    with pytest.raises(TransportAuthError, match="unsigned"):
        codec.loads(pickle.dumps(Touch("/nonexistent/x")))
    with pytest.raises(TransportAuthError, match="bad signature"):
        codec.loads(SignedPickle(b"o" * 32).dumps({"a": 1}))
