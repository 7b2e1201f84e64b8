"""The asyncio API: the same turns, awaited; nothing blocks the loop; a closed runtime ends
every reader."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from actors import AsyncRuntime, ControlRejected, RuntimeClosedError
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import TextDelta, ToolProgress

from . import tools_for_tests as T
from .helpers import summary

pytestmark = pytest.mark.integration


def arun(provider: ScriptedProvider, body: Callable[[AsyncRuntime], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        async with AsyncRuntime(provider.provider(), hosts=1, tool_processes=1, **options) as rt:
            return await body(rt)

    return asyncio.run(main())


def test_a_turn_is_read_with_async_for_and_its_result_awaited(provider: ScriptedProvider) -> None:
    provider.add(use_tools(call("add", {"a": 2, "b": 3})), say("five"))

    async def body(rt: AsyncRuntime) -> Any:
        turn = await rt.run("add", tools=[T.add])
        events = [e async for e in turn.events(timeout=30)]
        again = [e async for e in turn.events(timeout=30)]  # the turn has ended: nothing more
        return events, again, await turn.result(30)

    events, again, result = arun(provider, body)
    assert summary(events) == [
        ("turn_started",),
        ("tool_call_started", "call_1"),
        ("tool_finished", "call_1", "success"),
        ("text", "five"),
        ("finish", "stop"),
    ]
    assert again == []
    assert (result.finish_reason, result.text) == ("stop", "five")


def test_approvals_are_awaited_like_everything_else(provider: ScriptedProvider, tmp_path: Path) -> None:
    provider.add(use_tools(call("delete_file", {"path": str(tmp_path / "x")})), say("left it"))

    async def body(rt: AsyncRuntime) -> Any:
        turn = await rt.run("clean", tools=[T.delete_file])
        paused = await turn.result(30)
        await turn.deny("call_1", reason="")
        return paused, await turn.result(30)

    paused, done = arun(provider, body)
    assert (paused.finish_reason, [r.call_id for r in paused.pending_approvals]) == ("awaiting_approval", ["call_1"])
    assert done.finish_reason == "stop"
    assert done.messages[2].content == "Rejected: "  # an empty reason is the reason (the seed)


def test_cancelling_the_task_that_awaits_the_result_does_not_stop_the_turn(provider: ScriptedProvider) -> None:
    rest = threading.Event()
    provider.add(say("one two three", hold_after=1, hold=rest))

    async def body(rt: AsyncRuntime) -> Any:
        turn = await rt.run("talk")
        await turn.wait_for(lambda e: isinstance(e, TextDelta))
        waiting = asyncio.create_task(turn.result(30))
        await asyncio.sleep(0)  # let it start waiting
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        rest.set()
        return await turn.result(30)

    assert arun(provider, body).text == "one two three"


def test_stop_and_stop_tool_are_coroutines(provider: ScriptedProvider, tmp_path: Path) -> None:
    provider.add(
        use_tools(call("shell", {"command": "sleep 300"}), call("add", {"a": 1, "b": 1})),
        say("one was stopped"),
        say(" ".join(["word"] * 300), hold_after=10, hold=threading.Event()),  # ends only when stopped
    )

    async def body(rt: AsyncRuntime) -> Any:
        turn = await rt.run("both", tools=[T.shell, T.add])
        await turn.wait_for(lambda e: isinstance(e, ToolProgress))
        await turn.stop_tool("call_1", reason="too slow")
        first = await turn.result(30)
        second = await rt.run("talk")
        await second.wait_for(lambda e: isinstance(e, TextDelta))
        await second.stop("enough")
        return first, await second.result(30)

    first, second = arun(provider, body)
    assert first.finish_reason == "stop"
    assert second.finish_reason == "stopped"


def test_attach_turns_and_updates_are_awaited_on_a_durable_runtime(provider: ScriptedProvider, tmp_path: Path) -> None:
    provider.add(say("stored"))

    async def body(rt: AsyncRuntime) -> Any:
        turn = await rt.run("store it")
        await turn.result(30)
        attached = await rt.attach(turn.turn_id)
        with pytest.raises(ControlRejected) as unknown:
            await rt.attach("turn_nobody")
        return (await attached.result(30)).text, await rt.turns(), await rt.updates(turn.turn_id), unknown.value.code

    text, turns, updates, code = arun(provider, body, store=tmp_path / "turns.db")
    assert text == "stored"
    assert [(t.status, t.finish_reason) for t in turns] == [("finished", "stop")]
    assert [e.kind for e in updates] == ["turn_started", "text_delta", "finish"]
    assert code == "unknown_turn"


def test_readers_raise_runtime_closed_when_the_runtime_closes(provider: ScriptedProvider, tmp_path: Path) -> None:
    provider.add(say("never finished", hold_after=0, hold=threading.Event()))

    async def main() -> tuple[BaseException | None, BaseException | None]:
        rt = await AsyncRuntime(provider.provider(), hosts=1, tool_processes=1, store=tmp_path / "turns.db").start()
        turn = await rt.run("talk")  # with a store, closing leaves it to be recovered later
        await turn.wait_for(lambda e: e.kind == "turn_started")
        result = asyncio.create_task(turn.result(60))

        async def read() -> None:
            async for _ in turn.events():
                pass

        events = asyncio.create_task(read())
        await asyncio.sleep(0)
        await rt.close()
        done = await asyncio.gather(result, events, return_exceptions=True)
        return done[0], done[1]  # type: ignore[return-value]

    result, events = asyncio.run(main())
    assert isinstance(result, RuntimeClosedError) and isinstance(events, RuntimeClosedError)
