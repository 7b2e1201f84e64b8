"""The ``greenroom`` command line: clear errors for bad input and bad stores, option order, safe output, stale runtimes.

Stores are built with the store's own code directly (``store_location``: once on SQLite, once on PostgreSQL where
it applies); no actor system runs, so every test takes a fraction of a second.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import random
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from actors.cli import build_parser
from actors.store import open_store
from actors.store.base import is_url
from actors.store.urls import redacted
from actors.store.files import write_runtime_file
from actors.store.sqlite import SQLiteStore
from messages import (
    CallState,
    ChatMessage,
    ProviderConfig,
    RespondToApprovals,
    TextDelta,
    ToolApprovalResponse,
    ToolCall,
    TurnStarted,
    TurnState,
    encode,
)

from .stores import save, sql

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("GREENROOM_")} | {"PYTHONPATH": str(ROOT)}
PROVIDER = ProviderConfig(base_url="http://127.0.0.1:9/v1", model="scripted")
RED = "\x1b[31mred\x1b[0m"


def greenroom(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the command line in its own process, as a shell would."""
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=60,
        check=False,
    )


def finished_turn(turn_id: str, text: str) -> TurnState:
    """A turn that ended with the assistant saying ``text``."""
    return TurnState(
        turn_id=turn_id,
        root_turn_id=turn_id,
        provider=PROVIDER,
        messages=[ChatMessage.user("say it"), ChatMessage.assistant(text)],
        round=1,
        phase="finished",
        finish_reason="stop",
        next_seq=2,
    )


def paused_turn(turn_id: str) -> TurnState:
    """A turn waiting for a decision on its call ``call_1``."""
    tool_call = ToolCall(id="call_1", name="write_file", arguments='{"path": "/etc/motd"}')
    return TurnState(
        turn_id=turn_id,
        root_turn_id=turn_id,
        provider=PROVIDER,
        messages=[ChatMessage.user("write the motd"), ChatMessage.assistant(None, [tool_call])],
        round=1,
        phase="awaiting_approval",
        batch=[CallState(call=tool_call, arguments={"path": "/etc/motd"}, status="pending_approval")],
        paused=True,
        waiting_since=1.0,
    )


def store_with(path: Path | str, state: TurnState, events: Sequence[TurnStarted | TextDelta] = ()) -> str:
    """Write ``state`` and ``events`` to a new store at ``path`` (a file or a URL), as the runtime does."""
    store = open_store(path)
    save(store, state, [(e.seq, e.kind, encode(e)) for e in events])
    store.close()
    return str(path)


def said(path: Path | str, text: str) -> str:
    """A store holding turn_1, finished, whose model said ``text`` (in the history and in a text event)."""
    events: list[TurnStarted | TextDelta] = [
        TurnStarted(turn_id="turn_1", seq=0),
        TextDelta(turn_id="turn_1", seq=1, text=text),
    ]
    return store_with(path, finished_turn("turn_1", text), events)


def execute(path: Path | str, sql: str, *params: object) -> None:
    """Run one statement on the store's file behind its back, as damage would."""
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(sql, params)


def tables(path: Path | str) -> set[str]:
    if is_url(path):
        return {row[0] for row in sql(str(path), "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


# -- a file that is not a readable store ---------------------------------------------------------------------


def test_a_file_of_random_bytes_fails_at_start_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "turns.db"
    path.write_bytes(random.Random(7).randbytes(8192))
    out = greenroom("turns", "list", "--store", str(path))
    assert (out.returncode, out.stderr, out.stdout) == (
        2,
        f"greenroom: cannot open the turn store {path}: file is not a database\n",
        "",
    )


def test_a_text_file_fails_at_start_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("remember to approve the motd change\n" * 20)
    out = greenroom("turns", "show", "turn_1", "--store", str(path))
    assert (out.returncode, out.stderr) == (
        2,
        f"greenroom: cannot open the turn store {path}: file is not a database\n",
    )


def test_a_directory_fails_at_start_naming_it(tmp_path: Path) -> None:
    out = greenroom("turns", "list", "--store", str(tmp_path))
    assert (out.returncode, out.stderr) == (
        2,
        f"greenroom: the turn store {tmp_path} is a directory, not a greenroom database\n",
    )


def test_a_store_whose_turns_table_was_dropped_fails_at_start_and_is_left_as_it_was(store_location: str) -> None:
    path = said(store_location, "hello")
    sql(path, "DROP TABLE turns")
    out = greenroom("turns", "show", "turn_1", "--store", str(path))
    assert (out.returncode, out.stderr) == (
        2,
        f"greenroom: {redacted(path)} is not a greenroom turn store: table(s) turns missing\n",
    )
    assert "turns" not in tables(path)


def test_a_store_whose_turns_table_lost_its_snapshot_column_fails_at_start_naming_the_file(tmp_path: Path) -> None:
    path = said(tmp_path / "turns.db", "hello")
    execute(path, "ALTER TABLE turns RENAME COLUMN snapshot TO blob")
    out = greenroom("turns", "list", "--store", str(path))
    assert (out.returncode, out.stderr) == (
        2,
        f"greenroom: {path} is not a greenroom turn store: table 'turns' lacks snapshot\n",
    )


def test_a_store_with_a_renamed_column_fails_at_start_naming_the_file_and_the_column(tmp_path: Path) -> None:
    path = said(tmp_path / "turns.db", "hello")
    execute(path, "ALTER TABLE turns RENAME COLUMN pending TO waiting_for")
    out = greenroom("turns", "list", "--store", str(path))
    assert (out.returncode, out.stderr) == (
        2,
        f"greenroom: {path} is not a greenroom turn store: table 'turns' lacks pending\n",
    )


def test_an_event_row_of_garbage_bytes_makes_turns_show_fail_clearly(store_location: str) -> None:
    path = said(store_location, "hello")
    sql(path, "UPDATE events SET data = ? WHERE turn_id = 'turn_1' AND seq = 1", (b"garbage",))
    out = greenroom("turns", "show", "turn_1", "--store", str(path))
    assert (out.returncode, out.stderr, out.stdout) == (
        2,
        "greenroom: turn turn_1: event 1: malformed message payload: ExtraData: unpack(b) received extra data.\n",
        "",
    )


# -- bad options ---------------------------------------------------------------------------------------------


def test_cancel_refuses_a_negative_grace(store_location: str) -> None:
    path = store_with(store_location, paused_turn("turn_1"))
    out = greenroom("cancel", "turn_1", "--grace", "-1", "--store", str(path))
    assert out.returncode == 2
    assert out.stderr.startswith("usage: greenroom cancel ")
    assert out.stderr.splitlines()[-1] == "greenroom: argument --grace: must be a number of seconds >= 0, not '-1'"
    assert open_store(path).inbox.pending("turn_1") == []


def test_nodes_refuses_an_admin_address_without_a_numeric_port() -> None:
    out = greenroom("nodes", "--admin", "garbage")
    assert out.returncode == 2
    assert out.stderr.startswith("usage: greenroom nodes ")
    assert (
        out.stderr.splitlines()[-1]
        == "greenroom: argument --admin: must be HOST:PORT with a numeric port from 1 to 65535, not 'garbage'"
    )


def test_an_option_before_demo_is_refused_clearly() -> None:
    out = greenroom("--json", "demo")
    assert out.returncode == 2
    assert out.stderr == "greenroom: demo takes only its own options, after it (see greenroom demo --help)\n"


# -- option order --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--store", "x.db", "--json", "--timeout", "3", "approve", "turn_1", "call_1"],
        ["approve", "turn_1", "call_1", "--store", "x.db", "--json", "--timeout", "3"],
        ["--store", "x.db", "approve", "turn_1", "call_1", "--json", "--timeout", "3"],
        ["turns", "--json", "show", "turn_1", "--timeout", "3", "--store", "x.db"],
    ],
    ids=["before", "after", "both", "between"],
)
def test_store_json_and_timeout_are_read_before_or_after_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.store, args.json, args.timeout) == ("x.db", True, 3.0)


def test_store_json_and_timeout_not_given_take_their_defaults() -> None:
    args = build_parser().parse_args(["turns", "list"])
    assert (args.store, args.json, args.timeout) == (None, False, 10.0)


@pytest.mark.parametrize(
    "order",
    [
        ("--store", "--json", "turns", "list"),
        ("turns", "list", "--store", "--json"),
        ("--json", "turns", "list", "--store"),
    ],
    ids=["before", "after", "split"],
)
def test_turns_list_prints_the_same_with_its_options_before_or_after_the_command(
    store_location: str, order: tuple[str, ...]
) -> None:
    path = said(store_location, "hello")
    argv = [a for word in order for a in ((word, str(path)) if word == "--store" else (word,))]
    out = greenroom(*argv)
    assert out.returncode == 0, out.stderr
    assert [(t["turn_id"], t["status"]) for t in json.loads(out.stdout)] == [("turn_1", "finished")]


# -- model text and the terminal -----------------------------------------------------------------------------


def test_turns_show_escapes_terminal_control_characters_from_model_text(store_location: str) -> None:
    path = said(store_location, f"{RED}\rover\x9b2J")
    out = greenroom("turns", "show", "turn_1", "--store", str(path))
    assert out.returncode == 0, out.stderr
    escaped = "\\x1b[31mred\\x1b[0m\\x0dover\\x9b2J"
    assert f"  assistant: {escaped}" in out.stdout.splitlines()
    assert f"  #1 text_delta {escaped}" in out.stdout.splitlines()
    assert not any(c in out.stdout for c in "\x1b\r\x9b")


def test_turns_show_keeps_newlines_and_tabs_of_model_text(store_location: str) -> None:
    path = said(store_location, "one\n\ttwo")
    out = greenroom("turns", "show", "turn_1", "--store", str(path))
    assert "  assistant: one\n\ttwo\n" in out.stdout


def test_json_output_keeps_model_text_exact(store_location: str) -> None:
    path = said(store_location, RED)
    out = greenroom("turns", "show", "turn_1", "--store", str(path), "--json")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["messages"][-1]["content"] == RED
    assert shown["events"][-1]["text"] == RED


# -- a stale runtime file ------------------------------------------------------------------------------------


def dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait(30)
    return child.pid


@pytest.mark.parametrize("stale", ["dead pid", "free lock"])
def test_a_stale_runtime_file_is_ignored_and_the_command_is_written_to_the_store(tmp_path: Path, stale: str) -> None:
    path = store_with(tmp_path / "turns.db", paused_turn("turn_1"))
    pid = dead_pid() if stale == "dead pid" else os.getpid()  # this process lives but holds no lock
    write_runtime_file(str(path), {"pid": pid, "host": "127.0.0.1", "admin_port": 1, "key": "00" * 32})
    out = greenroom("approve", "turn_1", "call_1", "--store", str(path), "--timeout", "5")
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == (
        "approved: no runtime is running on the store: queued in the store's inbox, applied when a runtime "
        "loads the turn again\n"
    )
    ((_, queued),) = SQLiteStore(path).inbox.pending("turn_1")
    assert queued == RespondToApprovals(
        turn_id="turn_1",
        responses=[ToolApprovalResponse(call_id="call_1", approved=True)],
        request_id=queued.request_id,
        by=getpass.getuser(),  # sent as the OS user
    )
    assert (queued.request_id or "").startswith("cli-")  # its own: a turn that gets it twice applies it once
