"""Who runs a host's stream loop: its actor thread while it has few streams, the loop's own
thread past ``HAND_OVER_PAST``, and the actor thread again once they are down to
``OWN_UP_TO`` (``providers.client``). The driver here is the test's thread, waiting on the
loop's descriptor as a TurnHost waits through Thespian."""

from __future__ import annotations

import queue
import select
import threading
import time
from collections.abc import Callable
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


def _driven(monkeypatch: Any) -> client_module.StreamLoop:
    streams = client_module.StreamLoop()
    streams.drive(standby.later)
    monkeypatch.setattr(streaming, "STREAMS", streams)  # the workers of this test run on it
    return streams


def _drive(streams: client_module.StreamLoop, until: Callable[[], bool]) -> None:
    """Run the loop as its driver does, waking on its descriptor, until ``until()``."""
    deadline = time.monotonic() + WAIT
    while not until():
        assert time.monotonic() < deadline, "the driven loop made no progress"
        fd = streams.fileno()
        assert fd is not None, "the loop's thread kept the loop"
        select.select([fd], [], [], 0.05)
        streams.run_ready()


def test_a_driven_loop_wakes_its_driver_for_its_timers(monkeypatch: Any) -> None:
    streams = _driven(monkeypatch)
    loop = streams.loop()
    fired = threading.Event()
    loop.call_soon_threadsafe(loop.call_later, 0.05, fired.set)
    streams.run_ready()  # the timer is set now, due in 50 ms
    fd = streams.fileno()
    assert fd is not None and not fired.is_set()
    while not fired.is_set():
        readable, _, _ = select.select([fd], [], [], WAIT)
        assert readable, "nothing woke the driver when the loop's timer came due"
        streams.run_ready()
    loop.close()


@pytest.mark.integration  # a real provider server
def test_a_driven_loop_hands_many_streams_to_its_thread_and_takes_the_loop_back(monkeypatch: Any) -> None:
    monkeypatch.setattr(client_module, "HAND_OVER_PAST", 2)
    monkeypatch.setattr(client_module, "OWN_UP_TO", 1)
    streams = _driven(monkeypatch)
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
        _drive(streams, lambda: len(provider.requests) == 2)  # HAND_OVER_PAST streams: the driver reads them
        workers.append(start(provider, "s3"))
        _drive(streams, lambda: streams.fileno() is None)  # one more: the loop's thread takes them over
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
        assert streams.fileno() is not None
        last = start(provider, "s4")
        _drive(streams, last.finished.is_set)
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
            assert rt.run("and now").result(WAIT).text == "one more"  # the host's thread reads it again
