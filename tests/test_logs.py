"""What the logs say: one INFO line per turn event a person follows; third parties stay quiet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from actors import Runtime
from actors.testing import ScriptedProvider, call, say, use_tools

from . import tools_for_tests as T
from .helpers import wait_until

pytestmark = pytest.mark.integration


def turn_lines(log: Path) -> list[str]:
    return [line.split(": ", 1)[1] for line in log.read_text().splitlines() if " greenroom.turn: " in line]


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_logs_follow_a_turn_with_its_id_and_keep_third_parties_quiet(
    provider: ScriptedProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str
) -> None:
    log = tmp_path / "greenroom.log"
    monkeypatch.setenv("GREENROOM_LOG_LEVEL", level)
    monkeypatch.setenv("GREENROOM_LOG_FILE", str(log))
    provider.add(use_tools(call("delete_file", {"path": str(tmp_path / "nothing")})), say("left alone"))
    with Runtime(provider.provider()) as rt:
        turn = rt.run("clean up", tools=[T.delete_file])
        assert turn.result(30).finish_reason == "awaiting_approval"
        turn.deny("call_1", reason="not now")
        assert turn.result(30).finish_reason == "stop"
        tid = turn.turn_id
        assert wait_until(lambda: log.exists() and any("finished: stop" in x for x in turn_lines(log)))
        lines = turn_lines(log)
    info = [x for x in lines if not x.startswith(f"turn {tid} handles ")]
    assert [re.sub(r"\d+\.\d\d s$", "T s", x) for x in info] == [
        f"turn {tid} started (1 message(s), 1 tool(s))",
        f"turn {tid}: call call_1 (delete_file) waits for approval",
        f"turn {tid} paused for approval after 0 round(s), 19 tokens, T s",
        f"turn {tid}: call call_1 denied (not now)",
        f"turn {tid} finished: stop after 1 round(s), 38 tokens, T s",
    ]
    handled = [x for x in lines if x.startswith(f"turn {tid} handles ")]
    assert (handled[0] if handled else None) == (f"turn {tid} handles start_turn" if level == "DEBUG" else None)
    assert "httpcore" not in log.read_text() and "httpx" not in log.read_text()
