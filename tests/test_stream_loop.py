"""Who runs a host's stream loop: its actor thread while it has few streams, the loop's own
thread past ``HAND_OVER_PAST``, and the actor thread again once they are down to
``OWN_UP_TO`` (``providers.client``). The driver here is the test's thread, waiting on the
loop's descriptor as a TurnHost waits through Thespian."""

from __future__ import annotations

import asyncio
import os
import queue
import select
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors import Runtime, TextDelta, trace
from actors.providers import client as client_module
from actors.providers import streaming
from actors.providers.streaming import StreamWorker
from actors.testing import ScriptedProvider, say
from actors.tools import standby
from messages import ChatMessage, StreamChat

WAIT = 10.0  # seconds any one step may take


class Driven:
    """A stream loop driven by the test's thread, as a TurnHost drives its own: it waits on
    the loop's descriptor and on the pipe the loop's thread wakes it through."""

    def __init__(self) -> None:
        self.woken_r, self.woken_w = os.pipe()
        self.streams = client_module.StreamLoop()
        self.streams.drive(standby.later, lambda: os.write(self.woken_w, b"\0"))

    def wait(self) -> bool:
        """Wait (``WAIT`` at most) until the loop or its thread has something for the driver."""
        fd = self.streams.fileno()
        readable, _, _ = select.select([self.woken_r] + ([fd] if fd is not None else []), [], [], WAIT)
        if self.woken_r in readable:
            os.read(self.woken_r, 64)
        return bool(readable)

    def until(self, done: Callable[[], bool]) -> None:
        """Run the loop as its driver does, each pass after a wake-up, until ``done()``."""
        deadline = time.monotonic() + WAIT
        while not done():
            assert time.monotonic() < deadline, "the driven loop made no progress"
            assert self.wait() or done(), "nothing woke the driver"
            self.streams.run_ready()

    def close(self) -> None:
        loop = self.streams.loop()
        if self.streams.fileno() is not None:  # the driver's to run: close its clients, then it
            clients = [client for _, client in self.streams._idle]

            async def close_clients() -> None:
                await asyncio.gather(*(client.aclose() for client in clients))

            loop.run_until_complete(close_clients())
            loop.close()
        os.close(self.woken_r)
        os.close(self.woken_w)


@pytest.fixture
def driven(monkeypatch: Any) -> Iterator[Driven]:
    loop = Driven()
    monkeypatch.setattr(streaming, "STREAMS", loop.streams)  # the workers of the test run on it
    try:
        yield loop
    finally:
        loop.close()


def test_a_driven_loop_wakes_its_driver_for_its_timers(driven: Driven) -> None:
    loop = driven.streams.loop()
    fired = threading.Event()
    loop.call_soon_threadsafe(loop.call_later, 0.05, fired.set)
    driven.streams.run_ready()  # the timer is set now, due in 50 ms: only the timer thread wakes the driver
    assert not fired.is_set()
    driven.until(fired.is_set)


def test_a_driven_loop_whose_passes_end_with_callbacks_ready_wakes_its_driver_again(driven: Driven) -> None:
    loop = driven.streams.loop()
    left = [3 * client_module.BUDGET]

    def step() -> None:  # each step makes the next one ready: more than one run_ready does
        left[0] -= 1
        if left[0]:
            loop.call_soon(step)

    loop.call_soon_threadsafe(step)
    driven.streams.run_ready()
    assert left[0] > 0
    fd = driven.streams.fileno()
    assert fd is not None and select.select([fd], [], [], 0)[0], "callbacks left ready, and nothing to wake the driver"
    driven.until(lambda: left[0] == 0)


@pytest.mark.integration  # a real provider server
def test_a_driven_loop_hands_many_streams_to_its_thread_and_takes_the_loop_back(
    monkeypatch: Any, driven: Driven
) -> None:
    monkeypatch.setattr(client_module, "HAND_OVER_PAST", 2)
    monkeypatch.setattr(client_module, "OWN_UP_TO", 1)
    streams = driven.streams
    outputs: queue.SimpleQueue[tuple[str, str, str]] = queue.SimpleQueue()
    hold = threading.Event()

    def start(provider: ScriptedProvider, stream_id: str) -> StreamWorker:
        request = StreamChat(stream_id=stream_id, provider=provider.provider(), messages=[ChatMessage.user("go")])
        worker = StreamWorker(request, lambda out: outputs.put((stream_id, out[0], threading.current_thread().name)))
        worker.start()
        return worker

    with ScriptedProvider() as provider:
        provider.add(*[say(f"held {i}", hold_after=0, hold=hold) for i in range(3)], say("after"))
        workers = [start(provider, "s1"), start(provider, "s2")]
        driven.until(lambda: len(provider.requests) == 2)  # HAND_OVER_PAST streams: the driver reads them
        workers.append(start(provider, "s3"))
        driven.until(lambda: streams.fileno() is None)  # one more: the loop's thread takes them over
        assert len(provider.wait_for_requests(3, timeout=WAIT)) == 3
        hold.set()
        ends = []
        while len(ends) < 3:
            stream_id, kind, thread = outputs.get(timeout=WAIT)
            if kind in ("done", "failed"):
                ends.append((stream_id, kind, thread))
        assert sorted(ends) == [(f"s{n}", "done", "greenroom streams") for n in (1, 2, 3)]
        for worker in workers:
            assert worker.finished.wait(WAIT)  # its client given back: no stream under way
        streams.run_ready()  # down to OWN_UP_TO: the thread is asked to stop
        assert streams.fileno() is None  # and the driver waits for its wake-up, not on the loop
        driven.until(lambda: streams.fileno() is not None)  # woken by the thread, it takes the loop
        last = start(provider, "s4")
        driven.until(last.finished.is_set)
    seen = []
    while not outputs.empty():
        seen.append(outputs.get())
    assert ("s4", "done", threading.current_thread().name) in seen, seen
    assert {thread for stream_id, _, thread in seen if stream_id == "s4"} == {threading.current_thread().name}


@pytest.mark.integration  # a real actor system
def test_a_host_with_more_streams_than_its_thread_reads_itself_streams_each_whole_and_in_order(
    tmp_path: Path,
) -> None:
    hold = threading.Event()
    turns = client_module.HAND_OVER_PAST + 4
    trace.enable(str(tmp_path))  # the host says when its loop moves (``debug_trace``)
    try:
        _stream_past_the_hand_over(hold, turns)
    finally:
        trace.enable(None)
    moves = [
        line.split()[3] for f in tmp_path.iterdir() for line in f.read_text().splitlines() if " stream loop " in line
    ]
    assert moves == ["thread", "own"], moves


def _stream_past_the_hand_over(hold: threading.Event, turns: int) -> None:
    with ScriptedProvider() as provider:
        words = [f"turn {i} says " + " ".join(f"w{j}" for j in range(30)) for i in range(turns)]
        provider.add(*[say(text, hold_after=3, hold=hold) for text in words], say("one more"))
        with Runtime(provider.provider(), hosts=1, tool_processes=1) as rt:
            handles = [rt.run(f"talk {i}") for i in range(turns)]
            assert len(provider.wait_for_requests(turns, timeout=WAIT)) == turns  # all under way at once
            hold.set()
            texts = set()
            for handle in handles:
                deltas = [e for e in handle.events(timeout=WAIT) if isinstance(e, TextDelta)]
                assert [e.seq for e in deltas] == sorted(e.seq for e in deltas)
                result = handle.result(WAIT)
                assert result.finish_reason == "stop" and "".join(e.text for e in deltas) == result.text
                texts.add(result.text)
            assert texts == set(words)
            assert rt.run("and now").result(WAIT).text == "one more"  # read by the host's thread: no move after "own"
