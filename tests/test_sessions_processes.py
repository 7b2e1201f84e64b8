"""Two processes writing to one session at the same time (issue 31): each ``on_busy`` policy,
with the running turn held in a tool until the test releases it, ends in the documented
history whatever the order the two messages come in.

The session's decisions are taken in one transaction on its row, so this needs a store that
several Runtimes share: PostgreSQL (a SQLite store is one Runtime's). Real parts: a
throwaway PostgreSQL, the scripted provider on 127.0.0.1, two writer subprocesses
(``tests.session_writer``), each with its own Runtime and actor system, and the test's own.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from actors import ControlRejected, InputAccepted, Runtime, ToolProgress, TurnHandle
from actors.lifecycle.processes import session_processes
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.wire import transport
from messages import ChatMessage, ProviderConfig, RetryPolicy

from . import tools_for_tests as T

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[1]


def env() -> dict[str, str]:
    """The writers' environment: the transport key of this process (one process, one key: the
    test's Runtime has it), which every Runtime of one deployment shares."""
    return dict(os.environ, PYTHONPATH=str(ROOT), WRITER_KEY=transport.install("127.0.0.1").hex())


def config(provider: ScriptedProvider) -> ProviderConfig:
    return provider.provider(retry=RetryPolicy(max_attempts=1))


def said(messages: Sequence[ChatMessage]) -> list[tuple[str, str]]:
    return [(m.role, m.content or "") for m in messages]


@pytest.fixture
def shared(postgres: Any) -> str:
    """A fresh store on the throwaway PostgreSQL, for the test's Runtime and its writers."""
    return str(postgres.create_database(f"t_{uuid.uuid4().hex[:16]}"))


class Writer:
    """A ``tests.session_writer`` process: a message sent when asked, its outcome read back."""

    def __init__(self, store: str, base_url: str, session_id: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.session_writer", store, base_url, session_id],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env(),
        )  # fmt: skip

    def send(self, text: str, on_busy: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"text": text, "on_busy": on_busy}) + "\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = 60.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        assert line, f"the writer (pid {self.proc.pid}) said nothing within {timeout:g} s"
        out: dict[str, Any] = json.loads(line)
        return out

    def close(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write("exit\n")
            self.proc.stdin.close()
            self.proc.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()  # by its PID: its tree ends with it (the lifeline)
            self.proc.wait(10)


@contextmanager
def writers(store: str, provider: ScriptedProvider, session_id: str) -> Iterator[tuple[Writer, Writer]]:
    pair = (Writer(store, provider.base_url, session_id), Writer(store, provider.base_url, session_id))
    try:
        assert [w.read() for w in pair] == [{"ready": True}] * 2
        yield pair
    finally:
        for w in pair:
            w.close()


def at_once(pair: tuple[Writer, Writer], texts: tuple[str, str], on_busy: str) -> list[dict[str, Any]]:
    """Both messages sent before either answer is read: the two decisions race."""
    for w, text in zip(pair, texts):
        w.send(text, on_busy)
    return [w.read() for w in pair]


def held(chat: Any, gate: Path) -> TurnHandle:
    """The session's turn, held in its tool until ``gate`` exists."""
    turn = chat.run("Weather in Paris?")
    assert isinstance(turn, TurnHandle)
    turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30)  # the tool runs
    return turn


def holding(gate: Path) -> Any:
    return use_tools(call("wait_for_file", {"path": str(gate)}))


HELD = [("user", "Weather in Paris?"), ("assistant", ""), ("tool", '{"ok": true, "data": "found"}')]


def test_reject_from_two_processes_at_once_refuses_both_and_changes_nothing(
    provider: ScriptedProvider, shared: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    provider.add(holding(gate), say("Paris is sunny."))
    with Runtime(config(provider), store=shared, hosts=1, tool_processes=1) as rt:
        chat = rt.session(tools=[T.wait_for_file])
        with writers(shared, provider, chat.session_id) as pair:
            first = held(chat, gate)
            answers = at_once(pair, ("And Oslo?", "And Rome?"), "reject")
            busy = f"the session is busy: turn {first.turn_id} is running (on_busy='reject')"
            assert answers == [{"ok": False, "code": "busy", "message": busy}] * 2
            assert chat.queued == []
            gate.touch()
            assert said(chat.wait_idle(30)) == [*HELD, ("assistant", "Paris is sunny.")]
            assert chat.turns == [first.turn_id] and len(provider.requests) == 2
        sid = rt.admin_sid
    assert sid is not None and session_processes(sid) == []


def test_enqueue_from_two_processes_at_once_runs_both_after_the_turn_in_the_order_decided(
    provider: ScriptedProvider, shared: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    provider.add(holding(gate), say("Paris is sunny."), say("First."), say("Second."))
    with Runtime(config(provider), store=shared, hosts=1, tool_processes=1) as rt:
        chat = rt.session(tools=[T.wait_for_file])
        with writers(shared, provider, chat.session_id) as pair:
            first = held(chat, gate)
            answers = at_once(pair, ("And Oslo?", "And Rome?"), "enqueue")
            assert [(a["ok"], a["returned"]) for a in answers] == [(True, "queued")] * 2
            texts = {a["turn_id"]: text for a, text in zip(answers, ("And Oslo?", "And Rome?"))}
            order = chat.queued  # as the store decided them: visible to every process
            assert sorted(order) == sorted(texts)
            gate.touch()
            history = chat.wait_idle(60)
            assert said(history) == [
                *HELD, ("assistant", "Paris is sunny."),
                ("user", texts[order[0]]), ("assistant", "First."), ("user", texts[order[1]]), ("assistant", "Second."),
            ]  # fmt: skip
            assert chat.turns == [first.turn_id, *order]
            sent = [(m["role"], m.get("content") or "") for m in provider.requests[3].messages]
            assert sent == said(history)[:7]  # the last was given the whole session


def test_interrupt_from_two_processes_at_once_puts_both_into_the_running_turn(
    provider: ScriptedProvider, shared: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    provider.add(holding(gate), say("Sunny; Oslo is cold, Rome is warm."))
    with Runtime(config(provider), store=shared, hosts=1, tool_processes=1) as rt:
        chat = rt.session(tools=[T.wait_for_file])
        with writers(shared, provider, chat.session_id) as pair:
            first = held(chat, gate)
            answers = at_once(pair, ("And Oslo?", "And Rome?"), "interrupt")
            assert answers == [{"ok": True, "returned": "handle", "turn_id": first.turn_id}] * 2
            gate.touch()
            history = chat.wait_idle(60)
            accepted = [e.messages[0].content for e in first.all_events if isinstance(e, InputAccepted)]
            assert sorted(accepted) == ["And Oslo?", "And Rome?"]  # type: ignore[type-var]
            assert said(history) == [
                *HELD, ("user", accepted[0]), ("user", accepted[1]), ("assistant", "Sunny; Oslo is cold, Rome is warm."),
            ]  # type: ignore[list-item]  # fmt: skip
            assert chat.turns == [first.turn_id] and history == first.result(30).messages


def test_rollback_from_two_processes_at_once_keeps_only_the_last_decided_on_the_history_before(
    provider: ScriptedProvider, shared: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    provider.add(say("Hello."), holding(gate), say("Noted."), say("Noted."))
    with Runtime(config(provider), store=shared, hosts=1, tool_processes=1) as rt:
        chat = rt.session(tools=[T.wait_for_file])
        chat.run("Hello").result(30)  # type: ignore[union-attr]
        with writers(shared, provider, chat.session_id) as pair:
            first = held(chat, gate)
            answers = at_once(pair, ("Actually: Oslo?", "Actually: Rome?"), "rollback")
            assert [(a["ok"], a["returned"]) for a in answers] == [(True, "handle")] * 2
            assert first.result(30, final=True).finish_reason == "stopped"
            history = chat.wait_idle(60)
            texts = {a["turn_id"]: text for a, text in zip(answers, ("Actually: Oslo?", "Actually: Rome?"))}
            (kept,) = [t for t in chat.turns[1:]]  # the one decided last: it rolled the other back
            assert said(history) == [
                ("user", "Hello"),
                ("assistant", "Hello."),
                ("user", texts[kept]),
                ("assistant", "Noted."),
            ]
            assert first.turn_id not in chat.turns and len(chat.turns) == 2


def test_a_message_waiting_is_visible_and_withdrawn_from_another_process(
    provider: ScriptedProvider, shared: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    provider.add(holding(gate), say("Paris is sunny."), say("Oslo is cold."))
    with Runtime(config(provider), store=shared, hosts=1, tool_processes=1) as rt:
        chat = rt.session(tools=[T.wait_for_file])
        with writers(shared, provider, chat.session_id) as pair:
            first = held(chat, gate)
            pair[0].send("And Rome?", "enqueue")
            rome = pair[0].read()["turn_id"]  # decided before the next is sent: the queue's order
            pair[1].send("And Oslo?", "enqueue")
            oslo = pair[1].read()["turn_id"]
            assert chat.queued == [rome, oslo]
            chat.withdraw(rome)  # another process's message
            assert chat.queued == [oslo]
            gate.touch()
            assert said(chat.wait_idle(60))[4:] == [("user", "And Oslo?"), ("assistant", "Oslo is cold.")]
            with pytest.raises(ControlRejected) as started:
                chat.withdraw(oslo)
            assert (started.value.code, str(started.value)) == (
                "started",
                f"message {oslo} has already started its turn: stop it instead",
            )
            assert chat.turns == [first.turn_id, oslo] and len(provider.requests) == 3
