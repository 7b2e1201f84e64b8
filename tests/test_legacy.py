"""Names written by release 0.1.0 keep resolving: module paths, tool refs, a stored turn."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest

from actors import Runtime
from actors.legacy import MOVED
from actors.mcp import MCPTool
from actors.store.sqlite import SQLiteStore
from actors.tools.loading import load_tool, needs_approval
from messages import ToolFinished

RELEASE_STORE = Path(__file__).parent / "data" / "release-0.1.0.sqlite"
TURN = "turn_release_010"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_module_path_of_0_1_0_imports_the_module_that_replaced_it(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("actors.tools", "tool"),
        ("actors.tools", "error_result"),
        ("actors.tools", "load_tool"),
        ("actors.store", "SQLiteStore"),
        ("actors.store", "TurnSummary"),
        ("actors.mcp", "load_mcp_tool"),
        ("actors.mcp", "mcp_tools"),
        ("actors.telemetry", "RECORDER"),
        ("actors.telemetry", "SpanRecord"),
    ],
)
def test_a_module_of_0_1_0_that_became_a_package_keeps_its_names(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name)


def copy_of_release_store(tmp_path: Path) -> Path:
    store = tmp_path / "turns.db"
    shutil.copy(RELEASE_STORE, store)
    return store


def test_the_tools_of_a_turn_stored_by_0_1_0_load_by_their_stored_names(tmp_path: Path) -> None:
    state = SQLiteStore(copy_of_release_store(tmp_path)).log.load(TURN)
    assert state.phase == "awaiting_approval"
    specs = {t.name: t for t in state.tools}
    assert specs["lookup_city"].ref == "actors.mcp:load_mcp_tool"
    assert isinstance(load_tool(specs["lookup_city"]), MCPTool)
    assert load_tool(specs["delete_file"]).name == "delete_file"
    assert specs["write_file"].approval_ref == "tests.tools_for_tests:outside_sandbox"
    assert needs_approval(specs["write_file"], {"path": "/etc/x", "text": ""})
    assert not needs_approval(specs["write_file"], {"path": "/tmp/sandbox/x", "text": ""})


@pytest.mark.integration
def test_a_turn_stored_by_0_1_0_is_recovered_and_its_approved_call_runs(tmp_path: Path) -> None:
    with Runtime(store=copy_of_release_store(tmp_path), hosts=1, tool_processes=1) as rt:
        assert rt.recovered == [TURN]
        turn = rt.attach(TURN)
        assert [p.call_id for p in turn.result(30).pending_approvals] == ["call_del", "call_write", "call_mcp"]
        turn.deny("call_del", "not today")
        turn.deny("call_mcp", "no network")
        turn.approve("call_write")
        done = turn.wait_for(lambda e: isinstance(e, ToolFinished) and e.call_id == "call_write", 30)
        assert isinstance(done, ToolFinished) and done.outcome == "success"
        assert done.content == '{"ok": true, "data": "would write 1 bytes to /etc/x"}'
        turn.stop("the model of 0.1.0's run is gone")  # its next request would go to that run's port
        result = turn.result(30, final=True)
    assert result.finish_reason == "stopped"
    tool_messages = {m.tool_call_id: m.content for m in result.messages if m.role == "tool"}
    assert tool_messages == {
        "call_del": "Rejected: not today",
        "call_write": '{"ok": true, "data": "would write 1 bytes to /etc/x"}',
        "call_mcp": "Rejected: no network",
    }
