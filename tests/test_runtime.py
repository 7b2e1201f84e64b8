"""The embedded Runtime as a user drives it: async iteration, threads, broken streams, sockets."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
from pathlib import Path

import pytest

from actors import AsyncRuntime, ConfigurationError, Runtime, TurnTimeout
from actors.lifecycle.processes import session_processes
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import CancelTurn, Finish, StopTurn, TextDelta, ToolProgress

from . import tools_for_tests as T
from .helpers import summary, wait_until
from .wire import accept_queue, listening_sockets

pytestmark = pytest.mark.integration


def test_turns_can_be_started_and_read_from_several_threads(runtime: Runtime, provider: ScriptedProvider) -> None:
    texts = [f"answer number {i}" for i in range(8)]
    provider.add(*[say(t) for t in texts])
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            results[i] = runtime.run(f"question {i}").result(60).text
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert errors == []
    assert sorted(results.values()) == sorted(texts)


def test_a_malformed_data_line_ends_the_turn_with_an_explicit_error(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("one two three", malformed_after=1))
    turn = runtime.run("hi")
    events = list(turn.events(timeout=30))
    assert summary(events)[-2:] == [
        ("error", "malformed_stream", "the provider sent a data line that is not JSON: '{this is not json'"),
        ("finish", "error"),
    ]
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert streamed == "one "
    assert turn.result(30).messages[-1].content == "one "


def test_a_stream_cut_midway_ends_the_turn_with_an_explicit_error_and_no_retry(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("one two three four", cut_after=2))
    turn = runtime.run("hi")
    events = list(turn.events(timeout=30))
    error = events[-2]
    assert (error.kind, error.error_type) == ("error", "stream_broken")
    assert error.message.startswith("the provider stream broke: RemoteProtocolError")
    assert isinstance(events[-1], Finish) and events[-1].finish_reason == "error"
    assert len(provider.requests) == 1  # text had reached the turn: never retried


def test_nothing_of_the_embedded_runtime_listens_beyond_127_0_0_1(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(say("hello"))
    assert runtime.run("hi").result(30).text == "hello"
    assert runtime.admin_sid is not None
    pids = set(session_processes(runtime.admin_sid)) | {os.getpid()}
    sockets = listening_sockets(pids)
    assert ("127.0.0.1", runtime.admin_port) in sockets
    assert {host for host, _ in sockets} == {"127.0.0.1"}, sockets


def test_a_command_without_a_turn_id_is_refused_at_once_by_either_api(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    with pytest.raises(ConfigurationError, match="stop_turn needs a turn_id to be sent through the Runtime"):
        runtime.control(StopTurn(turn_id="", reason="which turn?"))
    unstarted = Runtime(provider.provider())
    with pytest.raises(ConfigurationError, match="stop_turn needs a turn_id"):
        unstarted.control(StopTurn(turn_id="", reason="which turn?"))
    assert unstarted.admin_sid is None and not unstarted.closed  # refused before anything started

    async def main() -> None:
        async with AsyncRuntime(provider.provider(), hosts=1, tool_processes=1) as rt:
            with pytest.raises(ConfigurationError, match="cancel_turn needs a turn_id"):
                await rt.control(CancelTurn(turn_id="", reason="which turn?"))

    asyncio.run(main())


def test_every_socket_the_owner_listens_on_is_serviced(runtime: Runtime, provider: ScriptedProvider) -> None:
    owner = {p for _, p in listening_sockets({os.getpid()}) if p != provider.port}
    assert len(owner) >= 2, "the pump's endpoint and the actor system's own"
    clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for port in sorted(owner) for _ in range(20)]
    try:
        for port in owner:  # idle connections are accepted (then held to the transport's limits)
            assert wait_until(lambda port=port: accept_queue(port) == 0, timeout=10), f"port {port} is never read"
    finally:
        for c in clients:
            c.close()


def test_a_command_a_host_never_answers_times_out_saying_how_long(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("host_pid", {"wait": True})))
    turn = runtime.run("hold", tools=[T.host_pid])
    host = turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30).data["pid"]
    os.kill(host, signal.SIGSTOP)
    try:
        with pytest.raises(TurnTimeout, match=r"^no answer to stop_turn after 0.5 s$"):
            turn.stop("now", timeout=0.5)
    finally:
        os.kill(host, signal.SIGCONT)
    assert turn.result(30, final=True).finish_reason == "stopped"  # it was delivered, and applied
