"""Durable turns: SIGKILL and recovery, exactly-once results, persisted cancel, replay, the CLI.

Each runs on both stores (``store_location``: SQLite and PostgreSQL). On PostgreSQL the
hosts of a killed runtime hold their leases a few seconds more; a new runtime takes their
turns over once those ran out (``leases_run_out``), and the command line's commands are
answered by the turn's host through the store (``NOTIFY``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest

from actors import Runtime, SnapshotError
from actors.lifecycle.processes import session_processes
from actors.store import open_store
from actors.store.base import is_url
from actors.store.files import running_runtime, store_in_use
from actors.store.ownership import host_of
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import ChatMessage, Finish, ProviderConfig, RetryPolicy

from . import tools_for_tests as T
from .helpers import summary, wait_until
from .stores import leases_run_out, recovered, sql

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def config(provider: ScriptedProvider) -> ProviderConfig:
    return provider.provider(retry=RetryPolicy(max_attempts=1))


def run_child(store: str, provider: ScriptedProvider, scenario: str, turn_id: str) -> dict[str, Any]:
    """Start a durable runtime in a child process, wait until it reached the point, kill it all."""
    cmd = [sys.executable, "-m", "tests.durable_child", store, provider.base_url, scenario, turn_id]
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    try:
        line = child.stdout.readline()  # type: ignore[union-attr]
        info = json.loads(line)
    except Exception:
        child.kill()
        child.wait(10)
        raise
    # SIGKILL by PID the process that held the Runtime: its whole tree ends with it (the lifeline)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    assert wait_until(lambda: session_processes(info["sid"]) == [])
    leases_run_out(store)
    return info


def greenroom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", *args], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=60
    )


def approve_and_finish(rt: Runtime, turn_id: str) -> list[ChatMessage]:
    turn = rt.attach(turn_id)
    turn.approve("call_1")
    result = turn.result(30)
    assert result.finish_reason == "stop"
    return result.messages


def test_sigkill_while_awaiting_approval_then_a_new_runtime_finishes_the_turn(
    provider: ScriptedProvider, store_location: str
) -> None:
    store = store_location
    script = [use_tools(call("write_file", {"path": "/etc/motd", "text": "hi"})), say("Written.")]
    provider.add(script[0])
    run_child(store, provider, "approval", "turn_crash1")
    provider.add(script[1])
    with Runtime(config(provider), store=store) as rt:
        assert recovered(store, rt, ["turn_crash1"])
        assert [(s.turn_id, s.status, s.pending_approvals) for s in rt.turns()] == [
            ("turn_crash1", "awaiting_approval", ["call_1"])
        ]
        resumed = approve_and_finish(rt, "turn_crash1")
        events = rt.updates("turn_crash1")
    # the same turn, never interrupted
    provider.add(*script)
    with Runtime(config(provider)) as rt:
        turn = rt.run("write the motd", tools=[T.write_file])
        assert turn.result(30).finish_reason == "awaiting_approval"
        turn.approve("call_1")
        uninterrupted = turn.result(30).messages
    assert resumed == uninterrupted
    assert [e.seq for e in events] == list(range(len(events)))
    assert summary(events)[-4:] == [
        ("tool_call_started", "call_1"),
        ("tool_finished", "call_1", "success"),
        ("text", "Written."),
        ("finish", "stop"),
    ]


@pytest.mark.parametrize("scenario, runs", [("tool", 1), ("tool_safely", 2)])
def test_a_recorded_side_effect_is_not_repeated_unless_the_tool_is_safe_to_retry(
    provider: ScriptedProvider, tmp_path: Path, store_location: str, scenario: str, runs: int
) -> None:
    store, keys = store_location, tmp_path / "keys.txt"
    name = "record_key" if scenario == "tool" else "record_key_safely"
    provider.add(use_tools(call(name, {"path": str(keys)})))
    run_child(store, provider, scenario, "turn_crash2")
    provider.add(say("Done."))
    with Runtime(config(provider), store=store) as rt:
        assert recovered(store, rt, ["turn_crash2"])
        turn = rt.attach("turn_crash2")
        finish = turn.wait_for(lambda e: isinstance(e, Finish) and e.terminal, timeout=30)
    assert finish.finish_reason == "stop"
    assert keys.read_text().splitlines() == ["turn_crash2:0:call_1"] * runs
    tool_message = finish.messages[2].content
    if runs == 1:
        # interrupted by the restart, or (the whole tree killed at once, its tool process seen
        # gone first by its host) failed: either way the call ran once and has one tool message
        errors = [
            "Interrupted: the runtime stopped while the call ran (recovered after a restart)",
            "Tool 'record_key' failed: its process exited before the call finished",
        ]
        assert tool_message in [json.dumps({"ok": False, "error": e, "data": None}) for e in errors]
    else:
        assert tool_message == json.dumps({"ok": True, "data": "recorded on attempt 2"})


def test_a_cancel_written_while_no_runtime_runs_ends_the_turn_cancelled_at_the_next_start(
    provider: ScriptedProvider, store_location: str
) -> None:
    store = store_location
    provider.add(use_tools(call("write_file", {"path": "/etc/motd", "text": "hi"})))
    run_child(store, provider, "approval", "turn_crash3")
    out = greenroom("cancel", "turn_crash3", "--store", str(store), "--reason", "abandoned")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "cancelled: no host is running: queued in the store's inbox, applied when a host takes the turn"
        if is_url(store)
        else "cancelled: no runtime is running on the store: queued in the store's inbox, applied when a runtime "
        "loads the turn again"
    )
    with Runtime(config(provider), store=store) as rt:
        assert recovered(store, rt, ["turn_crash3"])
        turn = rt.attach("turn_crash3")
        finish = turn.wait_for(lambda e: isinstance(e, Finish) and e.terminal, timeout=30)
        assert finish.finish_reason == "cancelled"
        assert [s.status for s in rt.turns()] == ["finished"]
    assert finish.messages[-1].role == "tool"
    assert len(provider.requests) == 1


def test_a_cancel_in_the_store_reaches_a_running_turn_at_its_next_step(
    provider: ScriptedProvider, tmp_path: Path, store_location: str
) -> None:
    store, ready = store_location, tmp_path / "ready"
    provider.add(use_tools(call("wait_for_file", {"path": str(ready)})), say("never asked"))
    with Runtime(config(provider), store=store) as rt:
        turn = rt.run("go", tools=[T.wait_for_file])
        turn.wait_for(lambda e: e.kind == "tool_progress", timeout=30)
        # another process writes the cancel to the store; no message is sent to the turn
        code = f"from actors.store import open_store; from messages import CancelTurn; open_store({store!r}).inbox.add({turn.turn_id!r}, CancelTurn(turn_id={turn.turn_id!r}, reason='from the store'))"
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=ENV, timeout=60)
        ready.touch()  # the tool returns only now, whenever the command was written
        result = turn.result(30)
    assert result.finish_reason == "cancelled"
    assert summary(turn.all_events)[-3:] == [
        ("tool_finished", "call_1", "success"),
        ("error", "cancelled", "Agent run cancelled"),
        ("finish", "cancelled"),
    ]
    assert len(provider.requests) == 1


def test_events_replay_from_a_sequence_number_in_another_process(
    provider: ScriptedProvider, store_location: str
) -> None:
    store = store_location
    provider.add(use_tools(call("add", {"a": 2, "b": 2})), say("Four."))
    with Runtime(config(provider), store=store) as rt:
        turn = rt.run("2+2?", tools=[T.add])
        assert turn.result(30).text == "Four."
        original = turn.all_events
    out = greenroom("turns", "show", turn.turn_id, "--since", "2", "--store", str(store), "--json")
    assert out.returncode == 0, out.stderr
    replayed = json.loads(out.stdout)["events"]
    assert replayed == [e.model_dump(mode="json") for e in original[2:]]
    with Runtime(config(provider), store=store) as rt:  # and by attaching from a new runtime
        again = rt.attach(turn.turn_id, since=2)
        assert again.wait_for(lambda e: isinstance(e, Finish), timeout=30) == original[-1]
        assert again.all_events == original[2:]


def corrupt(store: str, turn_id: str, how: str) -> None:
    if how == "bytes":
        sql(store, "UPDATE turns SET snapshot = ? WHERE turn_id = ?", (b"\xc1\x00garbage", turn_id))
    else:
        ((blob,),) = sql(store, "SELECT snapshot FROM turns WHERE turn_id = ?", (turn_id,))
        data = msgpack.unpackb(bytes(blob))
        data["v"] = 99
        sql(store, "UPDATE turns SET snapshot = ? WHERE turn_id = ?", (msgpack.packb(data), turn_id))


def test_an_unknown_version_and_a_corrupted_record_fail_clearly_and_alone(
    provider: ScriptedProvider, store_location: str
) -> None:
    store = store_location
    provider.add(*[use_tools(call("write_file", {"path": "/etc/x", "text": "y"})) for _ in range(3)])
    with Runtime(config(provider), store=store) as rt:
        for turn_id in ("turn_good", "turn_bytes", "turn_version"):
            assert rt.run("w", tools=[T.write_file], turn_id=turn_id).result(30).finish_reason == "awaiting_approval"
    corrupt(store, "turn_bytes", "bytes")
    corrupt(store, "turn_version", "version")
    s = open_store(store)
    with pytest.raises(SnapshotError, match="turn turn_version: snapshot schema version 99 is not supported"):
        s.log.load("turn_version")
    with pytest.raises(SnapshotError, match="turn turn_bytes: malformed snapshot"):
        s.log.load("turn_bytes")
    statuses = {x.turn_id: x.status for x in s.log.summaries()}
    assert statuses == {"turn_good": "awaiting_approval", "turn_bytes": "unreadable", "turn_version": "unreadable"}
    provider.add(say("Done."))
    with Runtime(config(provider), store=store) as rt:
        assert recovered(store, rt, ["turn_good"])
        assert sorted(rt.unrecoverable) == ["turn_bytes", "turn_version"]
        assert approve_and_finish(rt, "turn_good")[-1] == ChatMessage.assistant("Done.")
    out = greenroom("turns", "show", "turn_version", "--store", str(store))
    assert out.returncode == 2
    assert (
        out.stderr.strip()
        == "greenroom: turn turn_version: snapshot schema version 99 is not supported (this code reads 1, 2, 3, 4, 5, 6, 7 and 8)"
    )


def test_the_command_line_against_a_running_runtime(provider: ScriptedProvider, store_location: str) -> None:
    store = store_location
    provider.add(use_tools(call("write_file", {"path": "/etc/x", "text": "y"})), say("Written."))
    with Runtime(config(provider), store=store) as rt:
        turn = rt.run("w", tools=[T.write_file], turn_id="turn_cli1")
        assert turn.result(30).finish_reason == "awaiting_approval"
        listed = greenroom("turns", "list", "--store", str(store), "--json")
        assert [(t["turn_id"], t["status"], t["pending_approvals"]) for t in json.loads(listed.stdout)] == [
            ("turn_cli1", "awaiting_approval", ["call_1"])
        ]
        bad = greenroom("approve", "turn_cli1", "call_9", "--store", str(store))
        assert (bad.returncode, bad.stderr.strip()) == (
            2,
            "greenroom: no approval was requested for call 'call_9' in turn turn_cli1",
        )
        unknown = greenroom("approve", "turn_nope", "call_1", "--store", str(store))
        assert (unknown.returncode, unknown.stderr.strip()) == (2, "greenroom: unknown turn turn_nope")
        ok = greenroom("approve", "turn_cli1", "call_1", "--store", str(store))
        assert ok.returncode == 0, ok.stderr
        if is_url(store):  # through the store's inbox, answered by the turn's host
            owner = open_store(store).owners.route("turn_cli1")
            assert owner is not None and ok.stdout.strip() == f"approved: done by host {host_of(owner.host_id or '')}"
        else:
            assert ok.stdout.startswith("approved: done by the running runtime (pid ")
        assert turn.result(30, final=True).finish_reason == "stop"
        after = greenroom("stop", "turn_cli1", "--store", str(store))
        assert (after.returncode, after.stderr.strip()) == (2, "greenroom: turn turn_cli1 has already finished (stop)")
        shown = greenroom("turns", "show", "turn_cli1", "--store", str(store))
        assert "turn turn_cli1: finished (stop)" in shown.stdout and "assistant: Written." in shown.stdout


def test_the_command_line_against_a_stopped_runtime(provider: ScriptedProvider, store_location: str) -> None:
    store = store_location
    provider.add(
        use_tools(
            call("write_file", {"path": "/etc/x", "text": "y"}), call("write_file", {"path": "/etc/z", "text": "y"})
        )
    )
    with Runtime(config(provider), store=store) as rt:
        assert rt.run("w", tools=[T.write_file], turn_id="turn_cli2").result(30).finish_reason == "awaiting_approval"
    listed = greenroom("turns", "list", "--store", str(store))
    assert listed.stdout.splitlines()[1].split()[:5] == ["turn_cli2", "awaiting_approval", "(no", "live", "host)"]
    assert greenroom("approve", "turn_cli2", "call_1", "--store", str(store)).returncode == 0
    dup = greenroom("approve", "turn_cli2", "call_1", "--store", str(store))
    assert (dup.returncode, dup.stderr.strip()) == (2, "greenroom: call 'call_1' was already approved")
    denied = greenroom("deny", "turn_cli2", "call_2", "--reason", "no thanks", "--store", str(store), "--json")
    assert json.loads(denied.stdout)["sent_to"] == "store"
    provider.add(say("Half done."))
    with Runtime(config(provider), store=store) as rt:
        assert recovered(store, rt, ["turn_cli2"])
        turn = rt.attach("turn_cli2")
        finish = turn.wait_for(lambda e: isinstance(e, Finish) and e.terminal, timeout=30)
    assert [m.content for m in finish.messages if m.role == "tool"] == [
        json.dumps({"ok": True, "data": "would write 1 bytes to /etc/x"}),
        "Rejected: no thanks",
    ]
    assert finish.messages[-1] == ChatMessage.assistant("Half done.")


def test_a_second_runtime_cannot_take_a_store_in_use(provider: ScriptedProvider, tmp_path: Path) -> None:
    """SQLite only: one runtime per file (a PostgreSQL store is shared by every node's hosts)."""
    from actors import ConfigurationError

    store = tmp_path / "turns.db"
    with Runtime(config(provider), store=store) as first:
        with pytest.raises(ConfigurationError, match="is used by another running runtime"):
            Runtime(config(provider), store=store).start()
        found = running_runtime(str(store))  # the refused one left the first one's file alone
        assert found is not None and found["pid"] == os.getpid() and found["admin_port"] == first.admin_port
    assert not store_in_use(str(store))  # free again once the first runtime closed
    with Runtime(config(provider), store=store):
        pass


def test_attach_after_an_approval_from_another_process_shows_the_turn_as_it_is(
    provider: ScriptedProvider, store_location: str
) -> None:
    store = store_location
    provider.add(use_tools(call("write_file", {"path": "/etc/motd", "text": "hi"})))
    run_child(store, provider, "approval", "turn_attach1")  # paused, then its owner was killed
    provider.add(say("Written."))
    with Runtime(config(provider), store=store) as rt:
        assert recovered(store, rt, ["turn_attach1"])
        ok = greenroom("approve", "turn_attach1", "call_1", "--store", str(store))
        assert ok.returncode == 0, ok.stderr
        turn = rt.attach("turn_attach1")  # its events replay a pause that is over
        result = turn.result(30)
        assert result.finish_reason == "stop" and result.pending_approvals == []
        assert result.text == "Written."
