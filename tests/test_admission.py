"""Admission end to end: a host's limits on running turns, its queue, priorities and tenants,
``Overloaded`` and ``wait=True``; a real Runtime, the scripted provider over HTTP, each model
call held until the test lets it answer."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from actors import AsyncRuntime, ConfigurationError, ControlRejected, Overloaded, Runtime
from actors.lifecycle.processes import session_processes
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.testing.script import Reply
from actors.testing.server import Request

from . import tools_for_tests as T
from .helpers import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]


class Gates:
    """Every model call waits until the test opens the gate named by the turn's prompt."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gates: dict[str, threading.Event] = {}
        self.approval: set[str] = set()  # prompts whose first call asks to delete a file
        self.all_open = False

    def gate(self, prompt: str) -> threading.Event:
        with self.lock:
            gate = self.gates.setdefault(prompt, threading.Event())
            if self.all_open:
                gate.set()
            return gate

    def respond(self, request: Request) -> Reply:
        prompt = request.messages[-1]["content"] if request.messages[-1]["role"] == "user" else None
        if prompt in self.approval:
            return use_tools(call("delete_file", {"path": "/nonexistent/greenroom-admission"}))
        first = next(m["content"] for m in request.messages if m["role"] == "user")
        return say(f"done {first}", hold=self.gate(first), hold_after=0)

    def open(self, prompt: str) -> None:
        self.gate(prompt).set()

    def open_all(self) -> None:
        with self.lock:
            self.all_open = True
            for gate in self.gates.values():
                gate.set()


@pytest.fixture
def gates() -> Gates:
    return Gates()


@pytest.fixture
def gated(gates: Gates) -> Iterator[ScriptedProvider]:
    with ScriptedProvider(responder=gates.respond) as p:
        yield p
    gates.open_all()


def _runtime(provider: ScriptedProvider, gates: Gates, running: int, queued: int) -> Iterator[Runtime]:
    rt = Runtime(provider.provider(), hosts=1, tool_processes=1, max_running=running, max_queued=queued).start()
    try:
        yield rt
    finally:
        gates.open_all()
        rt.close()
        assert rt.admin_sid is not None
        assert session_processes(rt.admin_sid) == [], "the Runtime left processes behind"


@pytest.fixture
def two_and_three(gated: ScriptedProvider, gates: Gates) -> Iterator[Runtime]:
    yield from _runtime(gated, gates, 2, 3)


@pytest.fixture
def one_and_nine(gated: ScriptedProvider, gates: Gates) -> Iterator[Runtime]:
    yield from _runtime(gated, gates, 1, 9)


def _prompts(requests: list[Request]) -> list[str]:
    return [next(m["content"] for m in r.messages if m["role"] == "user") for r in requests]


def test_ten_runs_at_once_two_run_three_queue_and_five_are_refused_overloaded(
    two_and_three: Runtime, gated: ScriptedProvider, gates: Gates
) -> None:
    rt = two_and_three
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        futures = [pool.submit(rt.run, f"t{n}") for n in range(10)]
        concurrent.futures.wait(futures, timeout=30)
    handles = [f.result() for f in futures if f.exception() is None]
    refused = [f.exception() for f in futures if f.exception() is not None]
    assert len(handles) == 5 and len(refused) == 5
    host = handles[0].host
    for error in refused:
        assert isinstance(error, Overloaded) and error.code == "overloaded"
        assert str(error) == (
            f"host {host} is full: 2 turns running (max_running=2) and 3 queued (max_queued=3); "
            "try later, or run(..., wait=True)"
        )
    gated.wait_for_requests(2, timeout=30)
    statuses = sorted(h.status for h in handles)
    assert statuses == ["queued", "queued", "queued", "running", "running"]
    gates.open_all()
    answers = sorted(h.result(30, final=True).text for h in handles)
    assert answers == sorted(f"done {p}" for p in _prompts(gated.requests))
    assert len(gated.requests) == 5  # a refused turn never reached the model


def test_queued_turns_start_by_priority_then_tenants_take_turns(
    one_and_nine: Runtime, gated: ScriptedProvider, gates: Gates
) -> None:
    rt = one_and_nine
    first = rt.run("first")
    gated.wait_for_requests(1, timeout=30)
    queued = [rt.run(f"big{n}", tenant="big") for n in range(4)]
    queued += [rt.run(f"small{n}", tenant="small") for n in range(2)]
    queued += [rt.run("urgent", tenant="big", priority=5), rt.run("later", tenant="small", priority=-1)]
    assert [h.status for h in queued] == ["queued"] * 8
    gates.open("first")
    expected = ["first", "urgent", "big0", "small0", "big1", "small1", "big2", "big3", "later"]
    for n, prompt in enumerate(expected[1:], start=2):
        started = _prompts(gated.wait_for_requests(n, timeout=30))
        assert started == expected[:n]
        gates.open(prompt)
    assert first.result(30).finish_reason == "stop"
    assert [h.result(30).finish_reason for h in queued] == ["stop"] * 8


def test_a_queued_turn_stopped_or_cancelled_ends_so_without_calling_the_model(
    one_and_nine: Runtime, gated: ScriptedProvider, gates: Gates
) -> None:
    rt = one_and_nine
    first = rt.run("first")
    gated.wait_for_requests(1, timeout=30)
    stopped, cancelled = rt.run("stopped"), rt.run("cancelled")
    assert (stopped.status, cancelled.status) == ("queued", "queued")
    stopped.stop("not now")
    cancelled.cancel("not needed")
    assert stopped.result(30).finish_reason == "stopped"
    assert cancelled.result(30).finish_reason == "cancelled"
    assert [e.kind for e in stopped.all_events] == ["turn_started", "error", "finish"]
    assert [e.kind for e in cancelled.all_events] == ["turn_started", "error", "finish"]
    assert (stopped.status, cancelled.status, first.status) == ("finished", "finished", "running")
    gates.open("first")
    assert first.result(30).finish_reason == "stop"
    assert _prompts(gated.requests) == ["first"]


def test_a_turn_waiting_for_approval_frees_its_slot_for_the_next_queued_turn(
    gated: ScriptedProvider, gates: Gates
) -> None:
    gates.approval.add("ask")
    for rt in _runtime(gated, gates, 1, 1):
        asking = rt.run("ask", tools=[T.delete_file])
        after = rt.run("after")
        assert asking.result(30).finish_reason == "awaiting_approval"
        assert asking.status == "awaiting_approval"
        assert _prompts(gated.wait_for_requests(2, timeout=30)) == ["ask", "after"]
        assert after.status == "running"
        gates.open("after")
        assert after.result(30).finish_reason == "stop"
        asking.stop()
        assert asking.result(30, final=True).finish_reason == "stopped"


def test_run_with_wait_waits_for_room_then_runs(gated: ScriptedProvider, gates: Gates) -> None:
    for rt in _runtime(gated, gates, 1, 0):
        first = rt.run("first")
        gated.wait_for_requests(1, timeout=30)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(rt.run, "patient", wait=True)
            with pytest.raises(Overloaded):  # the host is full: a run that does not wait is refused
                rt.run("impatient")
            assert not waiting.done()
            gates.open("first")
            patient = waiting.result(30)
        assert _prompts(gated.wait_for_requests(2, timeout=30)) == ["first", "patient"]
        gates.open("patient")
        assert patient.result(30).text == "done patient"
        assert first.result(30).finish_reason == "stop"


def test_a_run_with_the_id_of_a_turn_still_waiting_for_room_is_refused_and_the_first_goes_on(
    gated: ScriptedProvider, gates: Gates
) -> None:
    for rt in _runtime(gated, gates, 1, 0):
        first = rt.run("first")
        gated.wait_for_requests(1, timeout=30)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(rt.run, "patient", turn_id="turn_patient", wait=True)
            assert wait_until(lambda: rt._inbound.stream("turn_patient") is not None or waiting.done())
            with pytest.raises(ControlRejected, match="turn id turn_patient is already in use") as refused:
                rt.run("again", turn_id="turn_patient")  # it took the first's answer away, which never came
            assert refused.value.code == "invalid" and not waiting.done()
            gates.open("first")
            patient = waiting.result(30)
        assert patient.status == "running"
        gates.open("patient")
        assert patient.result(30).text == "done patient"
        assert _prompts(gated.wait_for_requests(2, timeout=30)) == ["first", "patient"]
        assert first.result(30).finish_reason == "stop"


@pytest.mark.parametrize(
    "limits, message",
    [
        ({"max_running": 0}, "max_running must be an int >= 1 (turns running at once per host), not 0"),
        ({"max_queued": -1}, "max_queued must be an int >= 0 (turns queued per host), not -1"),
    ],
)
def test_a_bad_limit_is_refused_by_the_runtime(limits: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Runtime(**limits)  # type: ignore[arg-type]
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"priority": "high"}, "priority must be an int (higher starts first), not 'high'"),
        ({"priority": 1.5}, "priority must be an int (higher starts first), not 1.5"),
        ({"tenant": 7}, "tenant must be a string (its name), not 7"),
        ({"wait": "yes"}, "wait must be True or False, not 'yes'"),
        ({"requires": ["gpu"]}, "requires must be a dict of capability names to values, not ['gpu']"),
        (
            {"requires": {"gpu": {1, 2}}},
            "requires must map names to JSON values (strings, numbers, booleans, null, lists): "
            "Object of type set is not JSON serializable",
        ),
    ],
)
def test_bad_admission_arguments_are_refused_before_anything_starts(
    two_and_three: Runtime, gated: ScriptedProvider, arguments: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        two_and_three.run("hello", **arguments)  # type: ignore[arg-type]
    assert str(caught.value) == message
    assert gated.requests == []


def test_with_a_store_a_queued_turn_stopped_is_stored_stopped_and_the_next_starts(
    gated: ScriptedProvider, gates: Gates, tmp_path: Path
) -> None:
    rt = Runtime(gated.provider(), store=tmp_path / "turns.db", hosts=1, tool_processes=1, max_running=1,
                 max_queued=2).start()  # fmt: skip
    try:
        first = rt.run("first")
        gated.wait_for_requests(1, timeout=30)
        stopped, second = rt.run("stopped"), rt.run("second")
        stopped.stop("not now")
        assert stopped.result(30).finish_reason == "stopped"
        gates.open("first")
        gates.open("second")
        assert (first.result(30).finish_reason, second.result(30).finish_reason) == ("stop", "stop")
        assert _prompts(gated.requests) == ["first", "second"]
        stored = {t.turn_id: (t.status, t.finish_reason) for t in rt.turns()}
        assert stored[stopped.turn_id] == ("finished", "stopped")
    finally:
        gates.open_all()
        rt.close()
        assert rt.admin_sid is not None
        assert session_processes(rt.admin_sid) == [], "the Runtime left processes behind"


def test_the_async_runtime_is_refused_overloaded_and_waits_when_asked(gated: ScriptedProvider, gates: Gates) -> None:
    async def main() -> tuple[str, str, str]:
        async with AsyncRuntime(gated.provider(), hosts=1, tool_processes=1, max_running=1, max_queued=0) as rt:
            first = await rt.run("first")
            await asyncio.to_thread(gated.wait_for_requests, 1, 30)
            with pytest.raises(Overloaded) as caught:
                await rt.run("impatient")
            waiting = asyncio.ensure_future(rt.run("patient", wait=True))
            gates.open("first")
            gates.open("patient")
            patient = await asyncio.wait_for(waiting, 30)
            return caught.value.code, (await first.result(30)).text, (await patient.result(30)).text

    assert asyncio.run(main()) == ("overloaded", "done first", "done patient")


@pytest.mark.parametrize(
    "flag, value, least", [("--max-running", "0", 1), ("--max-running", "-2", 1), ("--max-queued", "-1", 0)]
)
def test_greenroom_node_refuses_a_bad_limit_saying_which(flag: str, value: str, least: int) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "actors.cluster.node", "--leader", "127.0.0.1:1900", "--listen", "127.0.0.1",
         flag, value],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == (
        f"greenroom node: error: argument {flag}: must be a whole number >= {least}, not '{value}'"
    )


def test_closing_the_runtime_ends_a_queued_turn_stopped_without_calling_the_model(
    gated: ScriptedProvider, gates: Gates
) -> None:
    rt = Runtime(gated.provider(), hosts=1, tool_processes=1, max_running=1, max_queued=2).start()
    try:
        first = rt.run("first")
        gated.wait_for_requests(1, timeout=30)
        queued = rt.run("queued")
        assert queued.status == "queued"
    finally:
        rt.close()
        gates.open_all()
    assert rt.admin_sid is not None and session_processes(rt.admin_sid) == []
    assert (first.status, queued.status) == ("finished", "finished")
    assert [e.kind for e in queued.all_events] == ["turn_started", "error", "finish"]
    assert queued.all_events[-1].finish_reason == "stopped"  # type: ignore[attr-defined]
    assert _prompts(gated.requests) == ["first"]


@pytest.mark.parametrize("with_store", [False, True], ids=["runtime", "store"])
def test_the_console_lists_a_queued_turn_as_queued_and_stops_or_cancels_it(
    gated: ScriptedProvider, gates: Gates, with_store: bool, tmp_path: Path
) -> None:
    from actors.console import ConsoleConfig

    key = "a-console-key-for-admission-0123456789"
    rt = Runtime(
        gated.provider(), hosts=1, tool_processes=1, max_running=1, max_queued=4,
        console=ConsoleConfig(port=0, key=key, quiet=True), store=tmp_path / "turns.db" if with_store else None,
    ).start()  # fmt: skip
    try:
        api, headers = f"http://127.0.0.1:{rt._console.port}/api/turns", {"Authorization": f"Bearer {key}"}
        first = rt.run("first")
        gated.wait_for_requests(1, timeout=30)
        stopped, cancelled = rt.run("stopped"), rt.run("cancelled")
        rows = {r["turn_id"]: r["status"] for r in httpx.get(api, headers=headers, timeout=10).json()["turns"]}
        assert rows == {first.turn_id: "running", stopped.turn_id: "queued", cancelled.turn_id: "queued"}
        stop = httpx.post(f"{api}/{stopped.turn_id}/stop", headers=headers, json={"reason": "not now"}, timeout=10)
        cancel = httpx.post(f"{api}/{cancelled.turn_id}/cancel", headers=headers, json={"reason": "no"}, timeout=10)
        assert (stop.status_code, stop.json()["ok"], cancel.status_code, cancel.json()["ok"]) == (200, True, 200, True)
        assert stopped.result(30).finish_reason == "stopped" and cancelled.result(30).finish_reason == "cancelled"
        rows = {r["turn_id"]: r["status"] for r in httpx.get(api, headers=headers, timeout=10).json()["turns"]}
        assert (rows[stopped.turn_id], rows[cancelled.turn_id]) == ("finished", "finished")
        gates.open("first")
        assert first.result(30).finish_reason == "stop"
        assert _prompts(gated.requests) == ["first"]  # neither queued turn reached the model
    finally:
        gates.open_all()
        rt.close()
        assert rt.admin_sid is not None and session_processes(rt.admin_sid) == []
