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
