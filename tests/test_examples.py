"""Every example runs as it is, as a user would run it, and says what it should."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str, stdin: str = "", env_extra: dict[str, str] | None = None) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("OPENAI_API_KEY", None)
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        input=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


def test_the_demo_shows_tools_an_approval_and_a_stop() -> None:
    out = run_example("00_demo.py", "--no")
    assert "== finish: awaiting_approval" in out
    assert "<- call_3 denied: Rejected: the user said no" in out
    assert "file still there: True" in out
    assert "!! Agent run stopped (the user pressed stop)" in out
    assert out.rstrip().endswith(
        'tool -> {"ok": false, "error": "Interrupted: the call was stopped (the user pressed stop)", "data": null}'
    )


def test_the_demo_never_approves_a_real_models_call_without_a_person() -> None:
    from actors.testing import ScriptedProvider
    from actors.testing.demo import demo_responder

    with ScriptedProvider(responder=demo_responder) as model:  # stands in for a real model
        out = run_example("00_demo.py", env_extra={"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": model.base_url})
    assert "greenroom demo on a real model" in out
    assert "n (no person could be asked (stdin is not a terminal), and a real model's calls never run unasked)" in out
    assert "file still there: True" in out


def test_the_demo_shell_runs_only_its_harmless_commands() -> None:
    from actors.testing.demo import run_shell

    with pytest.raises(PermissionError, match="the demo runs only these commands: sleep 30; echo built, date"):
        run_shell.fn("rm -rf /")


def test_the_demo_deletes_the_file_when_approved() -> None:
    out = run_example("00_demo.py", "--yes")
    assert "<- call_3 success" in out
    assert "file still there: False" in out


def test_quickstart() -> None:
    out = run_example("01_quickstart.py")
    assert "tool_finished" in out and "'content': '{\"ok\": true, \"data\": 5}'" in out
    assert out.rstrip().endswith("stop -> 2 + 3 = 5.")


@pytest.mark.parametrize(
    "args, stdin, expected",
    [
        (["--deny-all", "--reason", "not today"], "", ["[tool] Rejected: not today", "[tool] Rejected: not today"]),
        ([], "a\nd\n", ['[tool] {"ok": true, "data": "wrote 5 bytes to /etc/motd"}', "[tool] Rejected: User denied"]),
        ([], "x\n", ["[tool] Rejected: User denied", "[tool] Rejected: User denied"]),
    ],
)
def test_tool_approval_example(args: list[str], stdin: str, expected: list[str]) -> None:
    out = run_example("02_tool_approval.py", *args, stdin=stdin)
    history = out.split("final history:")[1].splitlines()
    tools = [line.strip() for line in history if line.strip().startswith("[tool]")]
    assert tools == ['[tool] {"ok": true, "data": "wrote 5 bytes to /tmp/sandbox/notes.txt"}', *expected]
    assert "send_email" in out and "Done with what I was allowed to do." in out


def test_stop_and_cancel_example() -> None:
    out = run_example("03_stop_and_cancel.py")
    assert "(on_stop callback: releasing the lock on app)" in out
    assert "!! Agent run stopped (the user pressed stop)" in out
    assert "== finish: stopped" in out
    assert "Interrupted: the call was cancelled (the supervisor winds down)" in out
    assert "== finish: cancelled" in out


def test_supervisor_example() -> None:
    out = run_example("04_supervisor.py")
    lines = out.splitlines()
    assert lines[:3] == [
        "'tidy up the disk'           -> stop",
        "'send the weekly report'     -> stop",
        "'wait for the build'         -> stopped",
    ], out
    assert sorted(line for line in lines if line.startswith("decision:")) == [
        "decision: delete_path: approved",
        "decision: delete_path: denied: only /tmp may be deleted",
        "decision: send_email: approved",
    ]
    assert lines[-1].startswith("stopped over budget: 1 turn(s); events received as messages: ")


def test_asyncio_example() -> None:
    out = run_example("05_asyncio.py")
    assert out.splitlines() == [
        "approving book_table({'city': 'Oslo', 'people': 2})",
        'lookup: Done: {"ok": true, "data": {"city": "Paris", "population_m": 2.1}}',
        'booking: Done: {"ok": true, "data": "booked for 2 in Oslo"}',
        "chatter: stopped",
    ], out


def test_sessions_example() -> None:
    out = run_example("08_sessions.py")
    assert out.splitlines() == [
        "Hi, I am Ada. -> Hello Ada!",
        "What is my name? -> You are Ada.",
        "turns so far: 2",
        "Paris: stopped | Rome: Rome!",
        "[('user', 'No, about Rome'), ('assistant', 'Rome!')]",
    ], out


def test_tracing_example() -> None:
    out = run_example("07_tracing.py")
    assert out.splitlines() == [
        "awaiting_approval ['call_2']",
        "stop -> Added, and sent.",
        "handle request",
        "  invoke_agent  [stop, 24 in / 14 out tokens]",
        "    · greenroom.approval.requested  call_2 send_email",
        "    · greenroom.approval.granted  call_2 send_email",
        "    · greenroom.approval.resumed",
        "    chat scripted-model  [tool_calls, 12 in / 7 out tokens]",
        "    execute_tool add  [success]",
        "    execute_tool send_email  [success]",
        "    chat scripted-model  [stop, 12 in / 7 out tokens]",
        "one trace: True",
    ]


def test_mcp_example() -> None:
    out = run_example("06_mcp.py")
    assert out.splitlines()[:3] == [
        "tool lookup_city: Population of a city, in millions.",
        "tool index_pages: Index pages, reporting progress after each.",
        "tool export_all: Export everything (takes until it is cancelled).",
    ]
    assert '<- call_1 success: {"ok": true, "data": {"city": "Paris", "population_m": 2.1}}' in out
    assert '.. call_2: {"progress": 3.0, "total": 3.0, "message": "page 3/3"}' in out
    assert "== finish: stopped" in out
    assert out.rstrip().splitlines()[-2:] == [
        'tool -> {"ok": false, "error": "Interrupted: the call was stopped (the user pressed stop)", "data": null}',
        "the server's handler was cancelled: True",
    ]
