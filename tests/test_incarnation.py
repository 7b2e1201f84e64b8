"""Frames bound to their receiver's incarnation: refused by any other before anything is
unpickled; a notice teaches the frame's sender where to send, and nobody else (opening one
teaches nothing: the transport heeds it only as the answer to its own frame); an address
carries the incarnation its pickler knew. Each process is played by an ``Incarnation`` of
its own, with no actor system."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from actors.wire import transport
from actors.wire.frames import DUPLICATE, ForAnother, FrameCodec, FrameRejected, Notice
from actors.wire.incarnation import UNKNOWN, Incarnation

KEY = b"k" * 32
HOST, PORT = "127.0.0.1", 4242


class Touch:
    """A pickle that creates a file when it is loaded."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.path}",))


def process(encrypt: bool = False, listens: bool = False, key: bytes = KEY) -> tuple[Incarnation, FrameCodec]:
    """A process of a deployment: its incarnation and its codec; ``listens`` on HOST:PORT."""
    me = Incarnation()
    if listens:
        me.listen(HOST, PORT)
    return me, FrameCodec(key, encrypt, incarnation=me)


def heed(codec: FrameCodec, notice: bytes) -> None:
    """What the transport does with a notice that answers a frame of ``codec``'s process."""
    opened = codec.open(notice)
    assert opened[0] is None and isinstance(opened[1], Notice)
    codec.heed(opened[1])


def notice_in(refused: pytest.ExceptionInfo[ForAnother]) -> bytes:
    """The body of the framed notice a refusal answers with."""
    length, _, body = refused.value.notice.partition(b">")
    assert int(length) == len(body)
    return body


@pytest.mark.parametrize("encrypt", [False, True], ids=["signed", "encrypted"])
def test_a_frame_sealed_for_one_incarnation_is_refused_unopened_by_the_next_on_the_same_endpoint(
    tmp_path: Path, encrypt: bool
) -> None:
    sender, sending = process(encrypt)
    first, first_opens = process(encrypt, listens=True)
    _, second_opens = process(encrypt, listens=True)  # the same address and port, the same key, later
    sender.learn(HOST, PORT, first.me)
    marker = tmp_path / "pwned"
    with pytest.raises(ForAnother, match=f"^sealed for another incarnation of {HOST}:{PORT}$"):
        second_opens.open(sending.seal(Touch(marker), HOST, PORT))
    assert not marker.exists()
    assert first_opens.open(sending.seal(("sender", "hello"), HOST, PORT)) == ("sender", "hello")


def test_a_frame_for_an_unknown_incarnation_gets_a_notice_that_teaches_its_sender_where_to_send() -> None:
    sender, sending = process()
    receiver, receiving = process(listens=True)
    assert sender.of(HOST, PORT) == UNKNOWN
    with pytest.raises(ForAnother, match=f"^sealed for an unknown incarnation of {HOST}:{PORT}$") as refused:
        receiving.open(sending.seal(("sender", "first"), HOST, PORT))
    sending.open(notice_in(refused))
    assert sender.of(HOST, PORT) == UNKNOWN  # opened, not heeded: anywhere but in answer, it teaches nothing
    heed(sending, notice_in(refused))
    assert sender.of(HOST, PORT) == receiver.me
    sealed = sending.seal(("sender", "first"), HOST, PORT)  # sealed again, as the transport does
    assert receiving.open(sealed) == ("sender", "first")
    assert receiving.open(sealed) is DUPLICATE


def test_a_notice_teaches_nobody_but_the_sender_of_the_refused_frame() -> None:
    _, sending = process()
    _, receiving = process(listens=True)
    bystander, bystander_opens = process()
    with pytest.raises(ForAnother) as refused:
        receiving.open(sending.seal("hello", HOST, PORT))
    notice = notice_in(refused)
    with pytest.raises(FrameRejected, match="^a notice for another process$"):
        bystander_opens.open(notice)
    with pytest.raises(FrameRejected, match="^a notice made with another key$"):
        FrameCodec(b"x" * 32, False, incarnation=bystander).open(notice)
    with pytest.raises(FrameRejected, match="^a notice with a bad signature$"):
        sending.open(notice[:-1] + bytes([notice[-1] ^ 1]))
    with pytest.raises(FrameRejected, match="^a truncated notice$"):
        sending.open(notice[:20])
    assert bystander.of(HOST, PORT) == UNKNOWN


def test_a_restarted_receiver_is_reached_again_at_the_cost_of_one_notice() -> None:
    sender, sending = process()
    receiver, receiving = process(listens=True)
    gone = os.urandom(16)
    sender.learn(HOST, PORT, gone)  # told by the process that listened there before the restart
    sender.learn(HOST, PORT, os.urandom(16), sure=False)  # a hint from a third party fills no gap
    assert sender.of(HOST, PORT) == gone
    with pytest.raises(ForAnother, match="another incarnation") as refused:
        receiving.open(sending.seal("hello", HOST, PORT))
    heed(sending, notice_in(refused))
    assert sender.of(HOST, PORT) == receiver.me


class Address:
    """Stands for Thespian's ``IPActorAddress``: its endpoint in ``sockname``."""

    def __init__(self, host: str, port: int) -> None:
        self.sockname = (host, port)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__


transport._addresses_carry_incarnations(Address)
ELSEWHERE = ("198.51.100.7", 4242)  # an endpoint no test sends to (TEST-NET-2)


def test_an_address_carries_the_incarnation_its_pickler_knew_and_its_own_for_sure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pickler, reader = Incarnation(), Incarnation()
    pickler.listen(*ELSEWHERE)  # the pickling process's own address: it says so for sure
    monkeypatch.setattr(transport, "CURRENT", pickler)
    own = pickle.dumps(Address(*ELSEWHERE))
    pickler.endpoints.clear()  # now a third party's, whose incarnation it knows: a hint
    hint = pickle.dumps(Address(*ELSEWHERE))
    unknown = pickle.dumps(Address("198.51.100.8", 4242))
    monkeypatch.setattr(transport, "CURRENT", reader)
    stale = os.urandom(16)
    reader.learn(*ELSEWHERE, stale)
    assert pickle.loads(hint).sockname == ELSEWHERE
    assert reader.of(*ELSEWHERE) == stale  # a hint fills gaps only
    assert pickle.loads(own).__dict__ == {"sockname": ELSEWHERE}  # nothing stays on the address
    assert reader.of(*ELSEWHERE) == pickler.me
    pickle.loads(unknown)
    assert reader.of("198.51.100.8", 4242) == UNKNOWN


def test_a_forked_process_is_a_new_incarnation_that_keeps_what_its_parent_knew() -> None:
    parent = Incarnation()
    parent.listen(HOST, PORT)
    parent.learn(*ELSEWHERE, b"o" * 16)
    before = parent.me
    parent.forked()
    assert parent.me != before
    assert parent.endpoints == set()
    assert (parent.of(HOST, PORT), parent.of(*ELSEWHERE)) == (before, b"o" * 16)


def test_a_port_this_process_left_is_sent_to_as_the_other_process_that_took_it_says() -> None:
    owner, sending = process(listens=True)  # a transport of this process listened on HOST:PORT, then closed
    owner.unlisten(HOST, PORT)
    assert (HOST, PORT) not in owner.endpoints and owner.of(HOST, PORT) == UNKNOWN
    owner.listen(HOST, PORT)  # or its close was never seen: a notice from the one there now decides
    taker, taking = process(listens=True)
    with pytest.raises(ForAnother, match="another incarnation") as refused:
        taking.open(sending.seal("hello", HOST, PORT))
    heed(sending, notice_in(refused))
    assert (HOST, PORT) not in owner.endpoints and owner.of(HOST, PORT) == taker.me
    assert taking.open(sending.seal("hello", HOST, PORT)) == "hello"
