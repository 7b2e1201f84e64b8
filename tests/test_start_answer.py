"""A start's answer: to the node's own Runtime it travels in the outbox of its turn's events
(``actors/host/answers.py``), so a two-round turn costs one cross-process message less; a
supervisor actor still gets it as a ``ControlReply`` message of its own, and events only in
its batches. Counted where every process serializes a frame (``debug_trace``)."""

from __future__ import annotations

import concurrent.futures
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors import Overloaded, Runtime, debug_trace
from actors.lifecycle.processes import session_processes
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.testing.script import Reply
from actors.testing.server import Request
from actors.tools.definition import tool_specs
from messages import ChatMessage, StartTurn

from . import tools_for_tests as T
from .actors_for_tests import Begin, Report, Seen, Supervisor
from .test_admission import Gates as AdmissionGates

pytestmark = pytest.mark.integration


def frames(directory: Path) -> Counter[str]:
    """The frames every process of the tree serialized, by message class."""
    out: Counter[str] = Counter()
    for name in os.listdir(directory):
        for line in (directory / name).read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "frame":
                out[parts[2]] += 1
    return out


class Gates(AdmissionGates):
    """``test_admission``'s gates; here each turn calls a tool first, then its last model
    call waits for the gate of the turn's prompt."""

    def respond(self, request: Request) -> Reply:
        prompt = request.messages[0]["content"]
        if request.messages[-1]["role"] == "user":
            return use_tools(call("add", {"a": 2, "b": 3}))
        return say(f"done {prompt}", hold=self.gate(prompt), hold_after=0)


Traced = Callable[..., tuple[Runtime, Path]]


@pytest.fixture
def gates() -> Gates:
    return Gates()


@pytest.fixture
def traced(tmp_path: Path, gates: Gates) -> Iterator[Traced]:
    """``traced(**runtime_options)``: a Runtime on a scripted provider held by ``gates``,
    every process of its tree tracing its frames to a directory of this test."""
    directory = tmp_path / "trace"
    directory.mkdir()
    started: list[Runtime] = []
    debug_trace.enable(str(directory))  # in this process and every process forked from it
    with ScriptedProvider(responder=gates.respond) as provider:
        try:

            def start(**options: Any) -> tuple[Runtime, Path]:
                started.append(Runtime(provider.provider(), hosts=1, tool_processes=1, **options).start())
                return started[-1], directory

            yield start
        finally:
            gates.open_all()
            debug_trace.enable(None)
            for rt in started:
                rt.close()
                assert rt.admin_sid is not None
                assert session_processes(rt.admin_sid) == [], "the Runtime left processes behind"


@pytest.mark.parametrize("durable", [False, True], ids=["no store", "sqlite"])
def test_the_runtime_gets_its_starts_answers_in_its_event_batches(
    traced: Traced, gates: Gates, tmp_path: Path, durable: bool
) -> None:
    rt, directory = traced(store=tmp_path / "turns.db") if durable else traced()
    before = frames(directory)
    handles = [rt.run(f"add {n}", tools=[T.add], wait=True) for n in range(3)]  # wait: each waits for its answer
    assert [h.status for h in handles] == ["running"] * 3  # none has ended: their gates are shut
    gates.open_all()
    assert sorted(h.result(30).text for h in handles) == ["done add 0", "done add 1", "done add 2"]
    sent = frames(directory) - before
    assert (sent["StartTurn"], sent["ControlReply"]) == (3, 0), sent
    assert sent["EventBatch"] >= 3, sent  # each turn's answer and events: as the acknowledgements batch them


def test_a_start_that_waited_for_room_gets_its_answer_in_a_batch_once_it_starts(traced: Traced, gates: Gates) -> None:
    rt, directory = traced(max_running=1, max_queued=0)
    first = rt.run("first", tools=[T.add])
    before = frames(directory)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(rt.run, "second", tools=[T.add], wait=True)
        with pytest.raises(Overloaded):  # the host is full: the second waits for room, unanswered
            rt.run("impatient")
        assert not waiting.done()
        gates.gate("first").set()  # the first ends: the second starts in that handler, answered
        second = waiting.result(30)
    assert second.status == "running"  # its gate is shut: it has not ended
    gates.gate("second").set()
    assert (first.result(30).text, second.result(30).text) == ("done first", "done second")
    sent = frames(directory) - before
    assert (sent["StartTurn"], sent["ControlReply"]) == (2, 1), sent  # the impatient start's refusal


def test_a_supervisor_actor_gets_its_starts_answer_as_a_message_of_its_own(traced: Traced, gates: Gates) -> None:
    rt, directory = traced()
    gates.gate("hi").set()
    start = StartTurn(
        messages=[ChatMessage.user("hi")], tools=tool_specs([T.add]), provider=rt.provider, request_id="start-1"
    )
    before = frames(directory)
    asys = rt.actor_system
    sup = asys.createActor(Supervisor)
    asys.tell(sup, Begin(start, [], replies=1))
    seen = asys.ask(sup, Report(), 60)
    assert isinstance(seen, Seen), seen
    answers = [(r.command, r.ok, r.message, r.request_id) for r in seen.replies]
    assert answers == [("start_turn", True, "running", "start-1")]
    assert (seen.events[0].kind, seen.events[-1].kind) == ("turn_started", "finish")
    assert (frames(directory) - before)["ControlReply"] == 1
