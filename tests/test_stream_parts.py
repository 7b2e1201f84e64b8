"""The parts under a provider stream and a caller's streams, without an actor system: the
process's stream deadlines, a provider client's own thread, one wake per event batch."""

from __future__ import annotations

import asyncio
import pickle
import queue
import threading
import time
from typing import Any

import pytest

from actors import ControlRejected
from actors.client.receiving import Inbound
from actors.client.records import EventRecords
from actors.client.starting import Room, admit_later
from actors.client.stream import GAP_WAIT, LOST_AFTER, QUIET, TurnStream
from actors.host.llm_actor import LLMActor
from actors.mailbox import Kernel, LocalActor
from actors.providers import client as client_module
from actors.providers import streaming
from actors.providers.streaming import StreamOutput, StreamWorker
from actors.testing import ScriptedProvider, say
from actors.wire.protocol import EventBatch
from messages import (
    AbortStream,
    ChatMessage,
    ControlReply,
    Error,
    Finish,
    StreamChat,
    TextDelta,
    ToolProgress,
    TurnStarted,
    encode,
)


def test_the_readers_of_a_stream_are_woken_once_per_batch() -> None:
    inbound = Inbound(lambda: False, lambda msg: None)
    stream = inbound.open_stream("turn_1", 0, fresh=True)
    wakes: list[int] = []
    wake = stream.wake
    stream.wake = lambda *later: (wakes.append(len(stream.events)), wake(*later))  # type: ignore[method-assign]
    events = [TurnStarted(turn_id="turn_1", seq=0)] + [
        TextDelta(turn_id="turn_1", seq=i, text=f"part {i} ") for i in range(1, 4)
    ]
    inbound.on_message(EventBatch([encode(e) for e in events]), None)
    assert wakes == [4] and [e.seq for e in stream.events] == [0, 1, 2, 3]


# found by the soak over a lossy network (seeds 240, 492, 720, 951: a StartTurn's ACK lost,
# and with it, at times, its answer): a start that run() did not wait for stayed waited for
# after its turn had ended, and its host's count of starts sent unanswered never went down
def test_a_start_not_waited_for_whose_answer_never_came_is_let_go_when_its_turn_ends() -> None:
    inbound, room = Inbound(lambda: False, lambda msg: None), Room()
    room.answered("host", ControlReply(turn_id="turn_0", command="start", ok=True, room=1))
    stream = inbound.open_stream("turn_1", 0, fresh=True)
    stream.host = "host"
    admitted = inbound.expect("start:turn_1")
    assert admit_later(inbound, room, stream, admitted, wait=False)  # the host has room: run() returns
    events = [TurnStarted(turn_id="turn_1", seq=0), Finish(turn_id="turn_1", seq=1, finish_reason="stop", messages=[])]
    inbound.on_message(EventBatch([encode(e) for e in events]), None)
    assert admitted.cancelled() and inbound.forget("start:turn_1") is None
    assert room.sent("host"), "the host's room counts the unanswered start no longer"


def test_a_second_start_of_a_turn_id_whose_first_waits_for_its_answer_is_refused_and_takes_nothing() -> None:
    inbound = Inbound(lambda: False, lambda msg: None)
    first = inbound.expect_start("turn_x")
    with pytest.raises(ControlRejected, match="turn id turn_x is already in use by a turn being started"):
        inbound.expect_start("turn_x")
    reply = ControlReply(turn_id="turn_x", request_id="start:turn_x", command="start", ok=True)
    inbound.on_message(reply, None)
    assert first.result(0) is reply  # the first start's answer reaches the first
    assert inbound.expect_start("turn_x") is not first  # answered: a new start of that id may wait


def test_a_turn_ended_by_its_lost_events_replaced_is_let_go_with_its_unanswered_start() -> None:
    inbound = Inbound(lambda: False, lambda msg: None)
    stream = inbound.open_stream("turn_gone", 0, fresh=True)
    admitted = inbound.expect("start:turn_gone")  # its answer lost with its connection
    t0 = time.monotonic()
    events = [
        TurnStarted(turn_id="turn_gone", seq=0),
        Finish(turn_id="turn_gone", seq=2, finish_reason="stop", messages=[]),
    ]
    inbound.on_message(EventBatch([encode(e) for e in events]), None)  # seq 1 never comes
    inbound.on_idle(t0 + LOST_AFTER / 2)
    assert not stream.finished and not admitted.cancelled() and inbound.stream("turn_gone") is stream
    inbound.on_idle(t0 + LOST_AFTER + 1)
    assert stream.finished and [e.kind for e in stream.events] == ["turn_started", "error", "finish"]
    assert admitted.cancelled() and inbound.forget("start:turn_gone") is None
    assert inbound.stream("turn_gone") is None


def test_asyncio_readers_of_several_streams_are_woken_with_one_callback_per_loop() -> None:
    inbound = Inbound(lambda: False, lambda msg: None)
    streams = [inbound.open_stream(f"turn_{i}", 0, fresh=True) for i in range(3)]
    batch = EventBatch([encode(TurnStarted(turn_id=f"turn_{i}", seq=0)) for i in range(3)])

    async def main() -> int:
        loop = asyncio.get_running_loop()
        calls: list[Any] = []
        original = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *a: (calls.append(a), original(*a))[1]  # type: ignore[method-assign]
        futures = [s.ready(0) for s in streams]
        await asyncio.to_thread(inbound.on_message, batch, None)  # the pump's thread
        await asyncio.wait_for(asyncio.gather(*futures), 10)
        return len([a for a in calls if a[0].__name__ == "_set_done"])  # to_thread uses one too

    assert asyncio.run(main()) == 1
    assert [s.take(0).turn_id for s in streams] == ["turn_0", "turn_1", "turn_2"]


def _until_end(outputs: queue.SimpleQueue[Any]) -> tuple[str, StreamOutput]:
    while (item := outputs.get(timeout=10))[2][0] not in ("done", "failed"):
        pass
    return item[1], item[2]


@pytest.mark.integration  # a real provider server
def test_a_stop_that_lands_just_after_its_stream_ended_aborts_nothing() -> None:
    outputs: queue.SimpleQueue[Any] = queue.SimpleQueue()
    kernel = Kernel()
    llm = LLMActor(kernel, outputs.put)
    with ScriptedProvider() as provider:
        provider.add(say("first"), say("second"))
        request = StreamChat(stream_id="s1", provider=provider.provider(), messages=[ChatMessage.user("go")])
        llm.tell(request, LocalActor(kernel))
        kernel.run()
        assert _until_end(outputs)[1][0] == "done"  # the stream ended; the LLMActor has not seen it
        llm.tell(AbortStream(stream_id="s1", reason="stop"), None)  # a stop in that moment: nothing to abort
        kernel.run()
        first = provider.wait_for_requests(1, timeout=10)[0]
        assert first.finished.wait(10)
        assert not first.disconnected.is_set()
        llm.tell(request.model_copy(update={"stream_id": "s2"}), LocalActor(kernel))
        kernel.run()
        stream_id, out = _until_end(outputs)
        assert stream_id == "s2" and out[1].content == "second"  # nothing came about s1 meanwhile
        llm.close()


@pytest.mark.integration  # a real provider server
def test_streams_share_one_loop_thread_and_an_abort_closes_its_own_connection_only() -> None:
    outputs: queue.SimpleQueue[Any] = queue.SimpleQueue()
    threads: set[str] = set()

    def emit_for(stream_id: str) -> Any:
        return lambda out: (threads.add(threading.current_thread().name), outputs.put(("", stream_id, out)))

    hold = threading.Event()
    with ScriptedProvider() as provider:
        provider.add(say("held", hold_after=0, hold=hold), say("goes on"))
        config = provider.provider()
        held = StreamWorker(
            StreamChat(stream_id="s1", provider=config, messages=[ChatMessage.user("a")]), emit_for("s1")
        )
        other = StreamWorker(
            StreamChat(stream_id="s2", provider=config, messages=[ChatMessage.user("b")]), emit_for("s2")
        )
        held.start()
        first = provider.wait_for_requests(1, timeout=10)[0]
        other.start()
        stream_id, out = _until_end(outputs)
        assert (stream_id, out[0], out[1].content) == ("s2", "done", "goes on")  # while s1 waits
        held.abort(("stopped", "aborted by the test"))
        assert _until_end(outputs) == ("s1", ("failed", "stopped", "aborted by the test"))
        hold.set()  # the server writes on: into a closed connection
        assert first.disconnected.wait(10), "the aborted stream's connection stayed open"
        second = provider.wait_for_requests(2, timeout=10)[1]
        assert second.finished.wait(10) and not second.disconnected.is_set()
        held.abort(("stopped", "again"))  # once ended, an abort does nothing
    assert outputs.empty()
    assert threads == {"greenroom streams"}


def _stream(provider: ScriptedProvider, stream_id: str, outputs: queue.SimpleQueue[Any]) -> StreamWorker:
    request = StreamChat(stream_id=stream_id, provider=provider.provider(), messages=[ChatMessage.user("go")])
    worker = StreamWorker(request, lambda out: outputs.put(("", stream_id, out)))
    worker.start()
    return worker


@pytest.mark.integration  # a real provider server
def test_a_stream_is_done_at_its_last_event_and_its_body_read_to_the_end_after(monkeypatch: Any) -> None:
    monkeypatch.setattr(streaming, "DRAIN", 60.0)  # the body's end may take long: the answer does not wait
    outputs: queue.SimpleQueue[Any] = queue.SimpleQueue()
    end = threading.Event()
    with ScriptedProvider() as provider:
        provider.add(say("answered", hold_at_end=end), say("next"))
        worker = _stream(provider, "s1", outputs)
        assert _until_end(outputs)[1][1].content == "answered" and not end.is_set()
        end.set()  # the body ends: its connection is fit for the next stream
        assert worker.finished.wait(10)  # its client given back, with its connection
        first = provider.wait_for_requests(1, timeout=10)[0]
        assert not first.disconnected.is_set()
        _stream(provider, "s2", outputs)
        assert _until_end(outputs)[1][1].content == "next"
        assert provider.wait_for_requests(2, timeout=10)[1].peer == first.peer


@pytest.mark.integration  # a real provider server
def test_a_body_that_does_not_end_after_its_last_event_is_closed_after_drain(monkeypatch: Any) -> None:
    monkeypatch.setattr(streaming, "DRAIN", 0.05)
    outputs: queue.SimpleQueue[Any] = queue.SimpleQueue()
    never = threading.Event()
    with ScriptedProvider() as provider:
        provider.add(say("answered", hold_at_end=never))
        _stream(provider, "s1", outputs)
        assert _until_end(outputs)[1][1].content == "answered"
        first = provider.wait_for_requests(1, timeout=10)[0]
        assert first.disconnected.wait(10), "the client kept a connection whose body never ended"


def test_a_stream_loop_keeps_the_latest_clients_closes_the_oldest_and_waits_on_threads_of_its_own(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(client_module, "IDLE", 2)
    streams = client_module.StreamLoop()

    async def main() -> None:
        clients = [streams.take() for _ in range(3)]
        assert len({id(c) for c in clients}) == 3  # none idle yet: each a new one
        for c in clients:
            streams.give(c)
        while not clients[0].is_closed:  # the close of the oldest runs as a task of the loop
            await asyncio.sleep(0)
        assert not clients[1].is_closed and not clients[2].is_closed
        assert streams.take() is clients[2] and streams.take() is clients[1]
        name = await streams.wait_on(lambda: threading.current_thread().name)
        assert name.startswith("greenroom-stream-waits")
        for c in clients[1:]:
            await c.aclose()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_an_idle_client_is_closed_after_expiry(monkeypatch: Any) -> None:
    monkeypatch.setattr(client_module, "EXPIRY", 0.02)
    streams = client_module.StreamLoop()

    async def main() -> None:
        given = streams.take()
        streams.give(given)
        while not given.is_closed:  # the loop's pruning timer closes it: waited for on the loop
            await asyncio.sleep(0.01)
        assert streams.take() is not given

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_caller_asks_again_for_a_missing_event_and_for_what_follows_a_long_silence() -> None:
    asked: list[int] = []
    stream = TurnStream("turn_gap", resend=lambda seq, unread_from: asked.append(seq))
    t0 = time.monotonic()
    stream.deliver(TurnStarted(turn_id="turn_gap", seq=0))
    stream.deliver(TextDelta(turn_id="turn_gap", seq=2, text="late"))  # seq 1 is missing
    assert not stream.fill_gaps(t0 + GAP_WAIT / 2) and asked == []
    stream.fill_gaps(t0 + GAP_WAIT + 0.01)
    stream.fill_gaps(t0 + GAP_WAIT + 0.02)  # asked once per GAP_WAIT, not at every look
    assert asked == [1]
    last_ask = t0 + 2 * GAP_WAIT + 0.03
    stream.fill_gaps(last_ask)
    assert asked == [1, 1]
    stream.deliver(TextDelta(turn_id="turn_gap", seq=1, text="came"))  # the resend arrives
    assert [e.seq for e in stream.events] == [0, 1, 2]
    stream.fill_gaps(last_ask + QUIET / 2)
    assert asked == [1, 1], "a stream that heard lately asks nothing"
    stream.fill_gaps(last_ask + QUIET + 1)
    assert asked == [1, 1, 3], "after a silence it asks for what follows the last event it has"


def test_an_event_still_missing_after_lost_after_is_replaced_once_a_finish_is_behind_it() -> None:
    stream = TurnStream("turn_lost")
    t0 = time.monotonic()
    stream.deliver(TurnStarted(turn_id="turn_lost", seq=0))
    stream.deliver(Finish(turn_id="turn_lost", seq=2, finish_reason="stop", messages=[]))
    assert not stream.fill_gaps(t0 + LOST_AFTER / 2)
    assert stream.fill_gaps(t0 + LOST_AFTER + 1)
    assert [(e.seq, e.kind) for e in stream.events] == [(0, "turn_started"), (1, "error"), (2, "finish")]


def test_a_stream_holds_batched_events_as_their_bytes_and_its_readers_get_the_same_models() -> None:
    tid = "turn_records"
    events = [
        TurnStarted(turn_id=tid, seq=0),
        TextDelta(turn_id=tid, seq=1, text="héllo "),
        ToolProgress(turn_id=tid, seq=2, call_id="c1", data={"done": [1, 2]}),
        TextDelta(turn_id=tid, seq=3, text="world"),
        Finish(turn_id=tid, seq=4, finish_reason="stop", messages=[ChatMessage.assistant("héllo world")]),
    ]
    inbound = Inbound(lambda: False, lambda msg: None)
    stream = inbound.open_stream(tid, 0, fresh=True)
    batch = pickle.loads(pickle.dumps(EventBatch([encode(e) for e in events])))  # as it crosses
    inbound.on_message(batch, None)
    assert [stream.events.is_model(i) for i in range(5)] == [False, False, False, False, True]
    assert list(stream.events) == events and stream.events[1:3] == events[1:3] and stream.events[-1] == events[-1]
    assert stream.held == 5 and stream.finished
    assert [stream.wait_index(i, 1) for i in range(5)] == events and stream.held == 0
    assert stream.result_at(5).text == "héllo world"


def test_a_record_that_does_not_decode_is_read_as_an_event_lost_error() -> None:
    records = EventRecords("turn_bad", 7)
    records.append(b"\x81\xa4kind\xaatext_delta", "text_delta")  # no turn_id, seq or text
    (event,) = list(records)
    assert isinstance(event, Error) and (event.seq, event.error_type) == (7, "event_lost")
    assert event.message == "event 7 cannot be decoded"
