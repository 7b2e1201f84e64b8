"""A start's answer: to the node's own Runtime it travels in the batch of its turn's first
events, so a two-round turn costs one cross-process message less; a supervisor actor still
gets it as a ``ControlReply`` message of its own, and events only in its batches."""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import Runtime, debug_trace
from actors.lifecycle.processes import session_processes
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.tools.definition import tool_specs
from messages import ChatMessage, StartTurn

from . import tools_for_tests as T
from .actors_for_tests import Begin, Report, Seen, Supervisor

pytestmark = pytest.mark.integration


def frames(directory: Path) -> Counter[str]:
    """The frames every process of the tree serialized, by message class (``debug_trace``)."""
    out: Counter[str] = Counter()
    for name in os.listdir(directory):
        for line in (directory / name).read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "frame":
                out[parts[2]] += 1
    return out


@pytest.fixture
def traced(tmp_path: Path, provider: ScriptedProvider) -> Iterator[tuple[Runtime, Path]]:
    directory = tmp_path / "trace"
    directory.mkdir()
    debug_trace.enable(str(directory))  # in this process and every process forked from it
    try:
        rt = Runtime(provider.provider(), hosts=1, tool_processes=1).start()
        try:
            yield rt, directory
        finally:
            rt.close()
            assert rt.admin_sid is not None
            assert session_processes(rt.admin_sid) == [], "the Runtime left processes behind"
    finally:
        debug_trace.enable(None)


def test_the_runtime_gets_its_starts_answers_with_their_first_events(
    traced: tuple[Runtime, Path], provider: ScriptedProvider
) -> None:
    rt, directory = traced
    gate = threading.Event()  # the turns' last model calls wait for it: none has ended before it is set
    for n in range(3):
        provider.add(use_tools(call("add", {"a": 2, "b": 3})), say(f"done {n}", hold=gate))
    before = frames(directory)
    handles = [rt.run(f"add {n}", tools=[T.add], wait=True) for n in range(3)]  # wait: each waits for its answer
    assert [h.status for h in handles] == ["running"] * 3
    gate.set()
    assert sorted(h.result(30).text for h in handles) == ["done 0", "done 1", "done 2"]  # in any order
    sent = frames(directory) - before
    assert sent["StartTurn"] == 3 and sent["EventBatch"] >= 3
    assert sent["ControlReply"] == 0, sent


def test_a_supervisor_actor_gets_its_starts_answer_as_a_message_of_its_own(
    traced: tuple[Runtime, Path], provider: ScriptedProvider
) -> None:
    rt, directory = traced
    provider.add(say("Hello."))
    start = StartTurn(
        messages=[ChatMessage.user("hi")], tools=tool_specs([T.add]), provider=rt.provider, request_id="start-1"
    )
    before = frames(directory)
    asys = rt.actor_system
    sup = asys.createActor(Supervisor)
    asys.tell(sup, Begin(start, [], replies=1))
    seen = asys.ask(sup, Report(), 60)
    assert isinstance(seen, Seen), seen
    assert [(r.command, r.ok, r.message, r.request_id) for r in seen.replies] == [
        ("start_turn", True, "running", "start-1")
    ]
    assert (seen.events[0].kind, seen.events[-1].kind) == ("turn_started", "finish")
    assert (frames(directory) - before)["ControlReply"] == 1
