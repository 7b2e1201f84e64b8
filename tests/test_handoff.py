"""The hand-off from a worker thread to its actor never loses a wake-up (the actor only wakes on its pipe)."""

from __future__ import annotations

import select
import sys
import threading
from collections.abc import Iterator

import pytest

from actors.handoff import Handoff


@pytest.fixture(autouse=True)
def frequent_thread_switches() -> Iterator[None]:
    """Switch threads as often as the interpreter allows, so that races show up."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.mark.parametrize("round_", range(10))
def test_every_item_is_delivered_by_wake_ups_alone_under_contention(round_: int) -> None:
    handoff = Handoff()
    total = 5_000
    done = threading.Event()

    def produce() -> None:
        for i in range(total):
            handoff.put(i)
        done.set()

    producer = threading.Thread(target=produce)
    producer.start()
    received: list[int] = []
    try:
        while len(received) < total:
            ready, _, _ = select.select([handoff.fd], [], [], 2.0)
            assert ready, f"no wake-up although {total - len(received)} items were queued (lost wake-up)"
            received.extend(handoff.drain())
    finally:
        producer.join(10)
        handoff.close()
    assert received == list(range(total))
    assert done.is_set()


def test_a_drain_that_races_a_put_leaves_a_wake_up_for_what_it_missed() -> None:
    for _ in range(2_000):
        handoff = Handoff()
        handoff.put("a")
        t = threading.Thread(target=handoff.put, args=("b",))
        t.start()
        first = handoff.drain()
        t.join(10)
        if "b" not in first:
            ready, _, _ = select.select([handoff.fd], [], [], 5.0)
            assert ready, "the item put during the drain has no wake-up"
            assert handoff.drain() == ["b"]
        handoff.close()


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_an_item_put_while_the_actor_is_awake_writes_no_wake_up_and_settle_writes_one() -> None:
    handoff = Handoff()
    try:
        handoff.wake()
        handoff.put("a")
        assert not _readable(handoff.fd)
        assert handoff.drain() == ["a"]
        handoff.put("b")  # after the handler's last drain: settle must leave a wake-up for it
        handoff.settle()
        assert _readable(handoff.fd)
        assert handoff.drain() == ["b"]
        handoff.settle()
        assert not _readable(handoff.fd)  # nothing queued: no wake-up
        handoff.put("c")  # asleep: a byte as before
        assert _readable(handoff.fd)
    finally:
        handoff.close()


@pytest.mark.parametrize("round_", range(5))
def test_no_item_is_lost_when_the_actor_wakes_and_settles_while_threads_put(round_: int) -> None:
    handoff = Handoff()
    total, producers = 3_000, 3

    def produce(k: int) -> None:
        for i in range(total):
            handoff.put((k, i))

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
    for t in threads:
        t.start()
    received: list[tuple[int, int]] = []
    try:
        while len(received) < total * producers:
            ready, _, _ = select.select([handoff.fd], [], [], 2.0)
            assert ready, f"no wake-up although {total * producers - len(received)} items were queued"
            handoff.wake()  # a handler: drain on the wake-up, drain again at its end, settle
            received.extend(handoff.drain())
            received.extend(handoff.drain())
            handoff.settle()
    finally:
        for t in threads:
            t.join(10)
        handoff.close()
    for k in range(producers):
        assert [i for j, i in received if j == k] == list(range(total))


def test_a_handler_that_raises_still_settles_and_later_puts_wake_the_actor() -> None:
    handoff = Handoff()
    try:
        with pytest.raises(RuntimeError):
            with handoff:
                handoff.put("a")  # no byte: the actor is awake
                raise RuntimeError("the handler failed")
        assert _readable(handoff.fd)  # settled on the way out: a byte for what is queued
        assert handoff.drain() == ["a"]
        handoff.put("b")
        assert _readable(handoff.fd)
    finally:
        handoff.close()
