"""Conversations end to end (issue 31): a session carries its turns, durable across a SIGKILL;
what each ``on_busy`` policy does when a message comes while a turn runs (held back by the
scripted provider, so the order is the test's); forking a turn from an earlier step; bad
inputs. Real parts: the scripted provider on 127.0.0.1, tool processes, a multiprocTCPBase
system, subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from actors import (
    AsyncRuntime,
    ConfigurationError,
    ControlRejected,
    ForkOrigin,
    Queued,
    Runtime,
    TextDelta,
    TurnHandle,
    TurnStarted,
    UnknownSession,
)
from actors.lifecycle.processes import session_processes
from actors.store import open_store
from actors.store.base import STORE_SCHEMA
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import ChatMessage, ProviderConfig, RetryPolicy

from . import tools_for_tests as T
from .helpers import wait_until
from .stores import leases_run_out, sql
from .test_cli import greenroom

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def config(provider: ScriptedProvider) -> ProviderConfig:
    return provider.provider(retry=RetryPolicy(max_attempts=1))


def said(messages: Sequence[ChatMessage]) -> list[tuple[str, str]]:
    return [(m.role, m.content or "") for m in messages]


def sent(provider: ScriptedProvider, n: int) -> list[tuple[str, str]]:
    """(role, text) of the messages the ``n``-th request to the model carried."""
    return [(m["role"], m.get("content") or "") for m in provider.requests[n].messages]


@pytest.fixture
def durable(provider: ScriptedProvider, store_location: str) -> Iterator[Runtime]:
    rt = Runtime(config(provider), store=store_location, hosts=1, tool_processes=1).start()
    try:
        yield rt
    finally:
        rt.close()
        assert rt.admin_sid is not None and session_processes(rt.admin_sid) == []


def streaming(turn: TurnHandle) -> None:
    """Wait until the turn's model is streaming (its first text has come)."""
    turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)


# -- a chat ------------------------------------------------------------------------------------


def test_a_chat_of_five_turns_on_a_durable_session_is_whole_after_its_process_was_killed_between_turns_3_and_4(
    provider: ScriptedProvider, store_location: str
) -> None:
    provider.add(say("One."), say("Two."), say("Three."), say("Four."), say("Five."))
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.session_child", store_location, provider.base_url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=ENV,
    )  # fmt: skip
    try:
        info = json.loads(child.stdout.readline())  # type: ignore[union-attr]
    finally:
        os.kill(child.pid, signal.SIGKILL)  # by PID: the child's tree ends with it (its lifeline)
        child.wait(10)
    assert wait_until(lambda: session_processes(info["sid"]) == [])
    leases_run_out(store_location)
    with Runtime(config(provider), store=store_location, hosts=1, tool_processes=1) as rt:
        chat = rt.session(info["session_id"])
        assert chat.turns == info["turns"] and len(chat.turns) == 3
        assert said(chat.history) == [
            ("user", "one"), ("assistant", "One."), ("user", "two"), ("assistant", "Two."),
            ("user", "three"), ("assistant", "Three."),
        ]  # fmt: skip
        for text in ("four", "five"):
            assert chat.run(text).result(30).finish_reason == "stop"
        history = chat.wait_idle(30)
        assert said(history)[6:] == [("user", "four"), ("assistant", "Four."), ("user", "five"), ("assistant", "Five.")]
        assert sent(provider, 4) == said(history)[:9]  # the fifth turn was given the whole chat
        assert rt.session(info["session_id"]) is chat
    with Runtime(config(provider), store=store_location, hosts=1, tool_processes=1) as again:
        reopened = again.session(info["session_id"])
        assert (reopened.turns, said(reopened.history)) == (chat.turns, said(history))
        assert len(reopened.turns) == 5
    assert child.returncode == -signal.SIGKILL


def test_a_session_without_a_store_carries_the_history_from_turn_to_turn(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("Hello Ada."), say("You are Ada."))
    chat = runtime.session(system="Be brief.")
    assert chat.run("I am Ada").result(30).text == "Hello Ada."
    assert chat.run("Who am I?").result(30).text == "You are Ada."
    assert sent(provider, 1) == [
        ("system", "Be brief."), ("user", "I am Ada"), ("assistant", "Hello Ada."), ("user", "Who am I?"),
    ]  # fmt: skip
    assert said(chat.wait_idle(30)) == [
        ("user", "I am Ada"), ("assistant", "Hello Ada."), ("user", "Who am I?"), ("assistant", "You are Ada."),
    ]  # fmt: skip


def test_max_messages_bounds_what_a_turn_is_given_and_the_session_keeps_its_whole_history(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("A."), say("B."), say("C."))
    chat = runtime.session(max_messages=2)
    for text in ("a", "b", "c"):
        chat.run(text).result(30)
    assert sent(provider, 2) == [("user", "b"), ("assistant", "B."), ("user", "c")]
    assert len(chat.wait_idle(30)) == 6


def test_compact_turns_the_history_into_a_shorter_one_before_each_turn(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    def summary(history: list[ChatMessage]) -> list[ChatMessage]:
        if len(history) <= 2:
            return history
        return [ChatMessage.user("(what we said so far: a and b)"), ChatMessage.assistant("Noted.")]

    provider.add(say("A."), say("B."), say("C."))
    chat = runtime.session(compact=summary)
    for text in ("a", "b", "c"):
        chat.run(text).result(30)
    assert sent(provider, 1) == [("user", "a"), ("assistant", "A."), ("user", "b")]
    assert sent(provider, 2) == [("user", "(what we said so far: a and b)"), ("assistant", "Noted."), ("user", "c")]
    assert [text for _, text in said(chat.wait_idle(30))] == ["a", "A.", "b", "B.", "c", "C."]


def test_a_compact_that_returns_an_invalid_history_fails_that_message_and_the_session_goes_on(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("A."), say("B."))
    broken = [True]

    def compact(history: list[ChatMessage]) -> list[ChatMessage]:
        return [ChatMessage.tool("{}", "call_x")] if broken[0] else history

    chat = runtime.session(compact=compact)
    with pytest.raises(ConfigurationError, match=f"session {chat.session_id}: compact returned an invalid history: "):
        chat.run("a")
    assert (chat.history, chat.running, len(provider.requests)) == ([], None, 0)
    broken[0] = False
    assert chat.run("a").result(30).text == "A."


def test_a_stopped_turn_contributes_its_valid_interrupted_history(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(
        use_tools(call("add", {"a": 1, "b": 2})), say("The sum is 3 and", hold_after=1, hold=threading.Event())
    )
    chat = runtime.session(tools=[T.add])
    turn = chat.run("add 1 and 2")
    turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
    turn.stop()
    assert turn.result(30).finish_reason == "stopped"
    history = chat.wait_idle(30)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history == turn.result(30).messages


# -- on_busy -----------------------------------------------------------------------------------


def test_reject_refuses_a_message_while_a_turn_runs_and_changes_nothing(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    hold = threading.Event()
    provider.add(say("Paris is sunny", hold_after=1, hold=hold))
    chat = runtime.session()
    first = chat.run("Weather in Paris?")
    streaming(first)
    with pytest.raises(ControlRejected) as refused:
        chat.run("And Oslo?")
    assert (refused.value.code, str(refused.value)) == (
        "busy",
        f"the session is busy: turn {first.turn_id} is running (on_busy='reject')",
    )
    hold.set()
    assert said(chat.wait_idle(30)) == [("user", "Weather in Paris?"), ("assistant", "Paris is sunny")]
    assert chat.turns == [first.turn_id] and len(provider.requests) == 1


def test_enqueue_starts_the_waiting_messages_in_order_each_when_the_turn_before_ends(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    hold = threading.Event()
    provider.add(say("Paris is sunny", hold_after=1, hold=hold), say("Oslo is cold."), say("Rome is warm."))
    chat = runtime.session(on_busy="enqueue")
    first = chat.run("Weather in Paris?")
    streaming(first)
    oslo, rome = chat.run("And Oslo?"), chat.run("And Rome?")
    assert isinstance(oslo, Queued) and isinstance(rome, Queued)
    assert chat.queued == [oslo.turn_id, rome.turn_id] and not oslo.started
    hold.set()
    assert rome.result(30).finish_reason == "stop"
    history = chat.wait_idle(30)
    assert said(history) == [
        ("user", "Weather in Paris?"), ("assistant", "Paris is sunny"), ("user", "And Oslo?"),
        ("assistant", "Oslo is cold."), ("user", "And Rome?"), ("assistant", "Rome is warm."),
    ]  # fmt: skip
    assert chat.turns == [first.turn_id, oslo.turn_id, rome.turn_id]
    assert sent(provider, 2) == said(history)[:5]


def test_a_waiting_message_withdrawn_never_starts_and_one_that_started_cannot_be_withdrawn(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    hold, hold_oslo = threading.Event(), threading.Event()
    provider.add(say("Paris is sunny", hold_after=1, hold=hold), say("Oslo is cold", hold_after=1, hold=hold_oslo))
    chat = runtime.session(on_busy="enqueue")
    streaming(first := chat.run("Weather in Paris?"))  # type: ignore[arg-type]
    oslo, rome = chat.run("And Oslo?"), chat.run("And Rome?")
    assert isinstance(oslo, Queued) and isinstance(rome, Queued)
    rome.withdraw()
    assert chat.queued == [oslo.turn_id]
    with pytest.raises(ControlRejected) as withdrawn:
        rome.handle(5)
    assert withdrawn.value.code == "withdrawn"
    hold.set()
    streaming(oslo.handle(30))
    with pytest.raises(ControlRejected) as started:
        oslo.withdraw()
    assert (started.value.code, str(started.value)) == (
        "started",
        f"message {oslo.turn_id} has already started its turn: stop it instead",
    )
    with pytest.raises(ControlRejected) as unknown:
        chat.withdraw("turn_never")
    assert (unknown.value.code, str(unknown.value)) == (
        "unknown_message",
        "no message turn_never waits on this session",
    )
    hold_oslo.set()
    assert said(chat.wait_idle(30))[2:] == [("user", "And Oslo?"), ("assistant", "Oslo is cold")]
    assert chat.turns == [first.turn_id, oslo.turn_id] and len(provider.requests) == 2  # type: ignore[union-attr]


def test_interrupt_sends_the_message_into_the_running_turn_now(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(say("Paris is sunny and warm today", hold_after=2, hold=threading.Event()), say("Oslo is cold."))
    chat = runtime.session()
    first = chat.run("Weather in Paris?")
    streaming(first)
    again = chat.run("And Oslo?", on_busy="interrupt")
    assert again is first
    result = first.result(30)
    assert provider.requests[0].disconnected.wait(30), "the provider did not see its stream closed"
    history = chat.wait_idle(30)
    assert history == result.messages and chat.turns == [first.turn_id]
    roles = said(history)
    assert roles[0] == ("user", "Weather in Paris?") and roles[1][0] == "assistant"
    assert roles[2:] == [("user", "And Oslo?"), ("assistant", "Oslo is cold.")]
    assert "Paris is sunny and warm today".startswith(roles[1][1]) and roles[1][1] != "Paris is sunny and warm today"


def test_rollback_stops_the_running_turn_drops_its_messages_and_starts_from_the_history_before_it(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(say("Before."), say("Paris is sunny", hold_after=1, hold=threading.Event()), say("Rome is warm."))
    chat = runtime.session(on_busy="rollback")
    chat.run("Hello").result(30)
    first = chat.run("Weather in Paris?")
    assert isinstance(first, TurnHandle)
    streaming(first)
    rome = chat.run("Actually: Rome?")
    assert isinstance(rome, TurnHandle) and rome.turn_id != first.turn_id
    assert first.result(30, final=True).finish_reason == "stopped"
    assert rome.result(30).finish_reason == "stop"
    history = chat.wait_idle(30)
    assert said(history) == [
        ("user", "Hello"), ("assistant", "Before."), ("user", "Actually: Rome?"), ("assistant", "Rome is warm."),
    ]  # fmt: skip
    assert sent(provider, 2) == said(history)[:3]
    assert len(chat.turns) == 2 and first.turn_id not in chat.turns


def test_a_turn_whose_start_was_decided_and_never_carried_out_keeps_the_session_busy_a_minute_only(
    durable: Runtime, provider: ScriptedProvider, store_location: str
) -> None:
    provider.add(say("Hello."))
    chat = durable.session()
    store = open_store(store_location)
    try:
        store.sessions.decide(chat.session_id, lambda owned: setattr(owned, "running", "turn_ghost"))  # its decider died
    finally:
        store.close()
    with pytest.raises(ControlRejected) as busy:
        chat.run("hi")
    assert str(busy.value) == "the session is busy: turn turn_ghost is running (on_busy='reject')"
    sql(store_location, "UPDATE sessions SET updated_at = updated_at - 61 WHERE session_id = ?", (chat.session_id,))
    assert chat.run("hi").result(30).text == "Hello."  # type: ignore[union-attr]
    assert said(chat.wait_idle(30)) == [("user", "hi"), ("assistant", "Hello.")]
    assert "turn_ghost" not in chat.turns and len(chat.turns) == 1


# -- fork --------------------------------------------------------------------------------------


def test_a_fork_of_a_stopped_turn_at_an_earlier_step_runs_to_its_end_and_the_original_stays_as_it_was(
    durable: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(
        use_tools(call("add", {"a": 1, "b": 2})),
        say("The sum is 3 and", hold_after=1, hold=threading.Event()),
        say("It is 3."),
    )
    original = durable.run("add 1 and 2", tools=[T.add])
    original.wait_for(lambda e: isinstance(e, TextDelta), timeout=30)
    original.stop()
    before = original.result(30).messages
    assert [m.role for m in before] == ["user", "assistant", "tool", "assistant"]
    fork = durable.fork(original.turn_id, at=3, tools=[T.add])
    result = fork.result(30)
    assert result.finish_reason == "stop" and said(result.messages)[3:] == [("assistant", "It is 3.")]
    assert result.messages[:3] == before[:3]
    store = open_store(durable.store_path or "")
    try:
        assert store.log.load(original.turn_id).messages == before
        assert store.log.load(original.turn_id).finish_reason == "stopped"
    finally:
        store.close()


def test_a_fork_may_replace_the_last_user_message(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(say("Paris: sunny."), say("Oslo: cold."))
    original = runtime.run("Weather in Paris?")
    original.result(30)
    fork = runtime.fork(original, at=2, text="Weather in Oslo?")  # without a store: the handle (or its result)
    assert said(fork.result(30).messages) == [("user", "Weather in Oslo?"), ("assistant", "Oslo: cold.")]
    assert said(original.result(30).messages) == [("user", "Weather in Paris?"), ("assistant", "Paris: sunny.")]


def test_a_fork_records_where_it_came_from_and_turns_show_says_so(
    durable: Runtime, provider: ScriptedProvider, store_location: str
) -> None:
    provider.add(use_tools(call("add", {"a": 1, "b": 2})), say("3."), say("It is 3."))
    original = durable.run("add 1 and 2", tools=[T.add])
    assert len(original.result(30).messages) == 4
    fork = durable.fork(original.turn_id, at=3, tools=[T.add])
    assert fork.result(30).finish_reason == "stop"
    origin = ForkOrigin(turn_id=original.turn_id, at=3)
    started = fork.all_events[0]
    assert isinstance(started, TurnStarted) and started.forked_from == origin
    store = open_store(store_location)
    try:
        assert store.log.load(fork.turn_id).forked_from == origin
        assert store.log.load(original.turn_id).forked_from is None
    finally:
        store.close()
    shown = greenroom("turns", "show", fork.turn_id, "--store", store_location)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[1] == f"forked from turn {original.turn_id} at message 3"


def test_a_fork_at_an_event_seq_starts_from_the_history_as_it_stood_at_that_event(
    durable: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("add", {"a": 1, "b": 2})), say("3."), say("Three."), say("Again."))
    original = durable.run("add 1 and 2", tools=[T.add])
    before = original.result(30).messages
    seq = {type(e).__name__: e.seq for e in original.all_events}
    at_result = durable.fork(original.turn_id, at_seq=seq["ToolFinished"], tools=[T.add])
    assert at_result.result(30).messages[:4] == [*before[:3], ChatMessage.assistant("Three.")]
    at_call = durable.fork(original, at_seq=seq["ToolCallStarted"])  # the call is not cut from its result
    assert said(at_call.result(30).messages) == [("user", "add 1 and 2"), ("assistant", "Again.")]
    origin = at_call.all_events[0].forked_from  # type: ignore[attr-defined]
    assert origin == ForkOrigin(turn_id=original.turn_id, at=1, at_seq=seq["ToolCallStarted"])
    with pytest.raises(ConfigurationError) as past:
        durable.fork(original.turn_id, at_seq=99)
    last = seq["Finish"]
    assert str(past.value) == (
        f"turn {original.turn_id} cannot be forked at event 99: at_seq=99 is not an event of the turn "
        f"(its events are 0 to {last})"
    )
    assert len(provider.requests) == 4  # nothing more started


def test_a_fork_into_a_new_session_is_its_first_turn(durable: Runtime, provider: ScriptedProvider) -> None:
    provider.add(say("Paris: sunny."), say("Oslo: cold."), say("Yes, cold."))
    original = durable.run("Weather in Paris?")
    original.result(30)
    fork = durable.fork(original.turn_id, at=2, text="Weather in Oslo?", session="chat_oslo")
    assert fork.result(30).finish_reason == "stop"
    chat = durable.session("chat_oslo")
    assert chat.wait_idle(30) and chat.turns == [fork.turn_id]
    assert chat.run("Cold?").result(30).text == "Yes, cold."  # type: ignore[union-attr]
    assert said(chat.wait_idle(30)) == [
        ("user", "Weather in Oslo?"), ("assistant", "Oslo: cold."), ("user", "Cold?"), ("assistant", "Yes, cold."),
    ]  # fmt: skip
    with pytest.raises(ConfigurationError) as exists:
        durable.fork(original.turn_id, at=2, session="chat_oslo")
    assert str(exists.value) == "session chat_oslo exists already: fork(session=) makes a new one"
    assert len(provider.requests) == 3


def test_greenroom_fork_starts_the_fork_on_the_runtime_running_on_the_store(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("add", {"a": 1, "b": 2})), say("3."), say("It is 3."))
    path = str(tmp_path / "turns.db")
    with Runtime(config(provider), store=path, hosts=1, tool_processes=1) as rt:
        original = rt.run("add 1 and 2", tools=[T.add])
        before = original.result(30).messages
        out = greenroom("fork", original.turn_id, "--at", "3", "--new-id", "turn_forked", "--store", path, "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {
            "turn_id": "turn_forked",
            "forked_from": {"turn_id": original.turn_id, "at": 3, "at_seq": None, "replaced": False},
            "admitted": json.loads(out.stdout)["admitted"],
        }
        fork = rt.attach("turn_forked")
        result = fork.result(30)
        assert result.messages == [*before[:3], ChatMessage.assistant("It is 3.")]
        refused = greenroom("fork", original.turn_id, "--at", "2", "--store", path)
        assert refused.returncode == 2
        assert refused.stderr.startswith(f"greenroom: turn {original.turn_id} cannot be forked at message 2: ")
    stopped = greenroom("fork", original.turn_id, "--at", "3", "--store", path)
    assert (stopped.returncode, stopped.stderr) == (
        2,
        "greenroom: no running runtime to start the fork on: give --admin HOST:PORT, or --store of a running runtime\n",
    )


# -- bad inputs --------------------------------------------------------------------------------


def test_a_fork_past_the_end_of_the_history_or_between_a_call_and_its_result_is_refused(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("add", {"a": 1, "b": 2})), say("3."))
    original = runtime.run("add 1 and 2", tools=[T.add])
    assert len(original.result(30).messages) == 4
    with pytest.raises(ConfigurationError) as past:
        runtime.fork(original, at=5)
    assert str(past.value) == (
        f"turn {original.turn_id} has 4 messages: at=5 is past the end of its history (0 < at <= 4)"
    )
    with pytest.raises(ConfigurationError, match=f"turn {original.turn_id} cannot be forked at message 2: "):
        runtime.fork(original.result(30), at=2)
    with pytest.raises(ControlRejected) as unknown:
        runtime.fork("turn_nowhere", at=1)
    assert unknown.value.code == "unknown_turn"
    assert len(provider.requests) == 2  # nothing started


def test_an_unknown_session_id_is_a_clear_error_and_creates_nothing(durable: Runtime, store_location: str) -> None:
    with pytest.raises(UnknownSession) as unknown:
        durable.session("session_nowhere")
    assert str(unknown.value) == (
        f"no session 'session_nowhere' in the store {durable.store_path}: runtime.session(id, create=True) makes one"
    )
    assert isinstance(unknown.value, LookupError)
    assert sql(store_location, "SELECT count(*) FROM sessions") == [(0,)]
    made = durable.session("session_named", create=True)
    assert (made.session_id, made.history) == ("session_named", [])


def test_an_unknown_session_id_without_a_store_is_a_clear_error(runtime: Runtime) -> None:
    with pytest.raises(UnknownSession) as unknown:
        runtime.session("session_nowhere")
    assert str(unknown.value) == (
        "no session 'session_nowhere' in this Runtime (it has no store: sessions live as long as it does): "
        "runtime.session(id, create=True) makes one"
    )
    with pytest.raises(ConfigurationError, match="on_busy must be one of reject, enqueue, interrupt, rollback"):
        runtime.session(on_busy="later")  # type: ignore[arg-type]


# -- the store ---------------------------------------------------------------------------------


def test_a_store_of_schema_3_gets_the_sessions_tables_when_opened(store_location: str) -> None:
    open_store(store_location).close()
    sql(store_location, "DROP TABLE session_turns")
    sql(store_location, "DROP TABLE sessions")
    sql(store_location, "UPDATE meta SET value = '3' WHERE key = 'schema'")
    store = open_store(store_location)
    try:
        store.sessions.create("s1")
        store.sessions.append("s1", 0, "t1", [ChatMessage.user("hi"), ChatMessage.assistant("hello")])
        store.sessions.append("s1", 0, "t1", [ChatMessage.user("hi"), ChatMessage.assistant("hello")])  # again: once
        record = store.sessions.load("s1")
        assert (record.turns, said(record.messages)) == (["t1"], [("user", "hi"), ("assistant", "hello")])
    finally:
        store.close()
    assert sql(store_location, "SELECT value FROM meta WHERE key = 'schema'") == [(str(STORE_SCHEMA),)] == [("8",)]


# -- asyncio -----------------------------------------------------------------------------------


def test_an_async_session_carries_the_history(provider: ScriptedProvider) -> None:
    import asyncio

    provider.add(say("Hi."), say("Again."))

    async def chat() -> list[tuple[str, str]]:
        async with AsyncRuntime(config(provider), hosts=1, tool_processes=1) as rt:
            session = await rt.session()
            for text in ("hi", "again"):
                turn = await session.run(text)
                assert (await turn.result(30)).finish_reason == "stop"
            history = said(await session.wait_idle(30))
            sid = rt.admin_sid
        assert sid is not None and session_processes(sid) == []
        return history

    assert asyncio.run(chat()) == [("user", "hi"), ("assistant", "Hi."), ("user", "again"), ("assistant", "Again.")]
