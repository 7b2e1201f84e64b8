"""When things end: close() in any state, the owner's death in any way, signals, and every
process a tool started, however it started it. Proved by scanning /proc."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from actors import Runtime
from actors.lifecycle.processes import descendants, dies_with_parent, session_processes
from actors.store.files import runtime_file, store_in_use
from actors.store.sqlite import SQLiteStore
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import Error, Finish, TextDelta, ToolProgress, TurnOptions

from . import tools_for_tests as T
from .helpers import pid_alive, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
INTERRUPTED = json.dumps(
    {
        "ok": False,
        "error": "Interrupted: the runtime stopped while the call ran (recovered after a restart)",
        "data": None,
    }
)


def tree(sid: int, extra: list[int]) -> list[int]:
    """Every process of a runtime's tree: its session, their descendants, and ``extra``."""
    pids = set(extra)
    for pid in session_processes(sid):
        pids.add(pid)
        pids.update(descendants(pid))
    return sorted(pids)


def lock_holders(store: Path) -> list[tuple[int, str]]:
    """Every process with the store's lock file open, and its command line."""
    lock, found = os.path.abspath(f"{store}.lock"), []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == lock for fd in os.listdir(f"/proc/{pid}/fd")):
                found.append((pid, Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()))
        except OSError:
            continue
    return found


def none_alive(pids: list[int]) -> bool:
    return not [p for p in pids if pid_alive(p)]


def start_owner(
    provider: ScriptedProvider, store: Path | None, scenario: str, turn_id: str, mode: str
) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    cmd = [sys.executable, "-m", "tests.owner_child", str(store or "-"), provider.base_url, scenario, turn_id, mode]
    child = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=ENV
    )
    try:
        info = json.loads(child.stdout.readline())  # type: ignore[union-attr]
    except Exception:
        child.kill()
        child.wait(10)
        raise
    return child, info


# -- close() ----------------------------------------------------------------------------------


def test_an_exception_raised_in_the_with_block_is_not_swallowed(provider: ScriptedProvider) -> None:
    provider.add(say("never read", delay=0.05))
    with pytest.raises(ValueError, match="the caller's own error"), Runtime(provider.provider()) as rt:
        rt.run("talk")
        raise ValueError("the caller's own error")
    assert session_processes(rt.admin_sid) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("state", ["just_started", "streaming", "tool_running", "awaiting_approval", "tool_children"])
def test_close_in_any_state_ends_live_turns_stopped_and_leaves_no_process(
    provider: ScriptedProvider, state: str, tmp_path: Path
) -> None:
    tools: list[Any] = []
    if state in ("just_started", "streaming"):
        provider.add(say(" ".join(["word"] * 500), hold_after=10, hold=threading.Event()))  # ends only when closed
    elif state == "tool_running":
        provider.add(use_tools(call("wait_for_stop", {"marker": str(tmp_path / "stopped")})))
        tools = [T.wait_for_stop]
    elif state == "awaiting_approval":
        provider.add(use_tools(call("delete_file", {"path": str(tmp_path / "x")})))
        tools = [T.delete_file]
    else:
        provider.add(use_tools(call("spawn_naive", {})))
        tools = [T.spawn_naive]
    rt = Runtime(provider.provider()).start()
    turn = rt.run("go", tools=tools)
    extra: list[int] = []
    if state == "streaming":
        turn.wait_for(lambda e: isinstance(e, TextDelta))
    elif state in ("tool_running", "tool_children"):
        progress = turn.wait_for(lambda e: isinstance(e, ToolProgress))
        extra = progress.data["pids"] if isinstance(progress.data, dict) else []
    elif state == "awaiting_approval":
        assert turn.result(30).finish_reason == "awaiting_approval"
    everything = tree(rt.admin_sid, extra)  # type: ignore[arg-type]
    rt.close()
    assert [p for p in everything if pid_alive(p)] == []
    events = turn.all_events
    if state == "awaiting_approval":
        assert isinstance(events[-1], Finish) and events[-1].finish_reason == "stopped"
    else:
        finish = events[-1]
        assert isinstance(finish, Finish) and finish.finish_reason == "stopped", events[-3:]
    error = events[-2]
    assert isinstance(error, Error)
    assert (error.error_type, error.detail, error.cause) == ("stopped", "the runtime is closing", "shutdown")


def test_close_with_a_store_leaves_the_turn_to_be_recovered(provider: ScriptedProvider, tmp_path: Path) -> None:
    store = tmp_path / "turns.db"
    provider.add(use_tools(call("delete_file", {"path": str(tmp_path / "x")})))
    with Runtime(provider.provider(), store=store) as rt:
        turn = rt.run("go", tools=[T.delete_file])
        assert turn.result(30).finish_reason == "awaiting_approval"
    assert [(s.turn_id, s.status) for s in SQLiteStore(store).log.summaries()] == [(turn.turn_id, "awaiting_approval")]
    assert not store_in_use(str(store)) and not os.path.exists(runtime_file(str(store)))
    with Runtime(provider.provider(), store=store) as rt:
        assert rt.recovered == [turn.turn_id]


# -- a tool's processes -----------------------------------------------------------------------


def test_stop_ends_every_process_a_tool_started_however_it_started_it(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("spawn_naive", {})), say("again"), use_tools(call("add", {"a": 1, "b": 2})), say("3"))
    turn = runtime.run("go", tools=[T.spawn_naive], options=TurnOptions(stop_grace=0.2))
    pids = turn.wait_for(lambda e: isinstance(e, ToolProgress)).data["pids"]
    assert all(pid_alive(p) for p in pids)
    turn.stop()
    assert turn.result(30).finish_reason == "stopped"
    assert wait_until(lambda: none_alive(pids)), [p for p in pids if pid_alive(p)]
    # the stubborn call's process ended with it and was replaced: tools still run
    assert runtime.run("add", tools=[T.add]).result(30).finish_reason == "stop"


def test_a_call_that_returns_leaves_none_of_its_children_behind(runtime: Runtime, provider: ScriptedProvider) -> None:
    provider.add(use_tools(call("spawn_naive", {"stubborn": False})), say("done"))
    turn = runtime.run("go", tools=[T.spawn_naive], options=TurnOptions(stop_grace=0.2))
    pids = turn.wait_for(lambda e: isinstance(e, ToolProgress)).data["pids"]
    assert turn.result(30).finish_reason == "stop"
    assert wait_until(lambda: none_alive(pids)), [p for p in pids if pid_alive(p)]


# -- memory ----------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["collection_cost", "host_collection_cost"])
def test_a_forked_process_never_collects_what_it_inherited_so_those_pages_stay_shared(
    runtime: Runtime, provider: ScriptedProvider, where: str
) -> None:
    """A full collection writes to every object it visits, and so copies every page of them the
    process shares with its parent: each process of the tree froze what it inherited at its fork.
    The same process's collection with that unfrozen is the baseline."""
    provider.add(use_tools(call(where, {})), say("done"))
    result = runtime.run("go", tools=[getattr(T, where)]).result(30)
    cost = json.loads(result.messages[2].content)["data"]
    assert cost["frozen"] > 10_000, cost  # the modules, the owner's state, the parent's actors
    assert cost["unfrozen_kib"] > 2_048, cost  # else the baseline says nothing
    assert cost["frozen_kib"] * 4 < cost["unfrozen_kib"], cost


# -- the owner's death ------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["sigkill", "os_exit", "exception", "broken_pipe"])
def test_when_the_owner_dies_its_whole_tree_ends_and_a_new_runtime_recovers_the_turn(
    provider: ScriptedProvider, tmp_path: Path, how: str
) -> None:
    store = tmp_path / "turns.db"
    provider.add(use_tools(call("spawn_naive", {})))
    mode = {"sigkill": "wait", "os_exit": "exit", "exception": "raise", "broken_pipe": "spam"}[how]
    child, info = start_owner(provider, store, "naive", "turn_owner", mode)
    everything = tree(info["sid"], info["pids"])
    assert len(everything) > len(info["pids"])
    if how == "sigkill":
        os.kill(child.pid, signal.SIGKILL)
    elif how == "broken_pipe":
        child.stdout.close()  # type: ignore[union-attr]
    child.wait(30)
    assert wait_until(lambda: none_alive(everything)), [p for p in everything if pid_alive(p)]
    # a process forked after the snapshot above (a spare tool process, say) holds the
    # store's lock too: it must end as well, and the lock be free then
    assert wait_until(lambda: not store_in_use(str(store))), lock_holders(store)
    provider.add(say("Recovered."))
    with Runtime(provider.provider(), store=store) as rt:
        assert rt.recovered == ["turn_owner"]
        finish = rt.attach("turn_owner").wait_for(lambda e: isinstance(e, Finish) and e.terminal, timeout=30)
    assert finish.finish_reason == "stop"
    assert finish.messages[2].content == INTERRUPTED


def test_sigterm_to_the_owner_closes_gracefully_and_the_paused_turn_resumes_later(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    store, keys = tmp_path / "turns.db", tmp_path / "keys.txt"
    provider.add(use_tools(call("append_key", {"path": str(keys)})))
    child, info = start_owner(provider, store, "gated", "turn_term", "wait")
    everything = tree(info["sid"], [])
    os.kill(child.pid, signal.SIGTERM)
    assert child.wait(30) == -signal.SIGTERM
    assert wait_until(lambda: none_alive(everything))
    assert [(s.turn_id, s.status) for s in SQLiteStore(store).log.summaries()] == [("turn_term", "awaiting_approval")]
    provider.add(say("Appended."))
    with Runtime(provider.provider(), store=store) as rt:
        turn = rt.attach("turn_term")
        turn.approve("call_1")
        assert turn.result(30).finish_reason == "stop"
    assert keys.read_text() == "turn_term:0:call_1\n"


def test_a_command_line_approval_while_the_owner_is_dead_is_kept_and_runs_the_call_once(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    store, keys = tmp_path / "turns.db", tmp_path / "keys.txt"
    provider.add(use_tools(call("append_key", {"path": str(keys)})))
    child, info = start_owner(provider, store, "gated", "turn_dead", "wait")
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    assert wait_until(lambda: none_alive(tree(info["sid"], [])))
    assert os.path.exists(runtime_file(str(store)))  # stale: its pid is dead, its lock free
    cli = subprocess.run(
        [sys.executable, "-m", "actors.cli", "approve", "turn_dead", "call_1", "--store", str(store)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert "queued in the store's inbox" in cli.stdout
    assert not keys.exists()
    provider.add(say("Appended."))
    with Runtime(provider.provider(), store=store) as rt:
        finish = rt.attach("turn_dead").wait_for(lambda e: isinstance(e, Finish) and e.terminal, timeout=30)
    assert finish.finish_reason == "stop"
    assert keys.read_text() == "turn_dead:0:call_1\n"


# -- a child that is not ours to watch ---------------------------------------------------------


def test_a_guarded_program_keeps_its_arguments_and_a_missing_one_is_refused_before_it_starts() -> None:
    out = subprocess.run(dies_with_parent(["sh", "-c", 'echo "$0|$1"', "first", "second"]), capture_output=True)
    assert out.stdout == b"first|second\n"
    with pytest.raises(FileNotFoundError, match="no-such-program-greenroom"):
        dies_with_parent(["no-such-program-greenroom"])


def test_a_guarded_program_is_killed_when_the_thread_that_started_it_ends() -> None:
    started: list[subprocess.Popen[bytes]] = []
    release = threading.Event()

    def starter() -> None:
        command = dies_with_parent(["sh", "-c", "trap '' TERM; echo ready; exec sleep 300"])
        child = subprocess.Popen(command, stdout=subprocess.PIPE)
        started.append(child)
        release.wait(30)  # the thread lives until the child has become the program

    thread = threading.Thread(target=starter)
    thread.start()
    assert wait_until(lambda: bool(started))
    child = started[0]
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        release.set()
        thread.join(10)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


def test_a_guarded_program_is_found_relative_to_its_cwd_and_one_that_cannot_run_is_named(tmp_path: Path) -> None:
    hello = tmp_path / "hello"
    hello.write_text("#!/bin/sh\necho hello\n")
    hello.chmod(0o755)
    out = subprocess.run(dies_with_parent(["./hello"], cwd=str(tmp_path)), cwd=tmp_path, capture_output=True)
    assert out.stdout == b"hello\n"
    broken = tmp_path / "broken"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    out = subprocess.run(dies_with_parent(["./broken"], cwd=str(tmp_path)), cwd=tmp_path, capture_output=True)
    assert out.returncode == 127
    assert out.stderr == f"greenroom: cannot run {broken}: No such file or directory\n".encode()
