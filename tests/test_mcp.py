"""Tools from MCP servers, against real servers (tests/mcp_servers.py) over stdio and
Streamable HTTP: list, call, error, progress, stop reaching the server, a crash mid-call,
one session per host shared across turns, approval, secrets, and no server left behind."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors import Runtime, ToolDefinitionError, history_problems, mcp_tools, requires_approval
from actors.errors import ConfigurationError
from actors.lifecycle.processes import session_processes
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.turn.results import interrupted_content
from messages import ToolApprovalRequest, ToolFinished, ToolProgress

from . import tools_for_tests as T
from .helpers import err, ok, pid_alive, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
SERVER = Path(__file__).with_name("mcp_servers.py")
NAMES = [
    "add", "fail", "steps", "slow", "gate", "crash", "pid", "stubborn", "env_value", "env_digest", "complain", "header"
]  # fmt: skip


def stdio_command(marks: Path) -> list[str]:
    return [sys.executable, str(SERVER), "stdio", str(marks)]


@contextlib.contextmanager
def running(provider: ScriptedProvider, store: Path | None = None) -> Iterator[Runtime]:
    """A Runtime as the ``runtime`` fixture starts it, for tests that set things up first."""
    rt = Runtime(provider.provider(), store=store, hosts=1, tool_processes=1).start()
    try:
        yield rt
    finally:
        rt.close()
        assert rt.admin_sid is not None and session_processes(rt.admin_sid) == []


def tool_messages(messages: list[Any]) -> list[str | None]:
    return [m.content for m in messages if m.role == "tool"]


def data_of(content: str | None) -> Any:
    """What a successful MCP call returned (its structured content's ``result``)."""
    return json.loads(content or "null")["data"]["result"]


class HttpServer:
    """The test server over Streamable HTTP, in a subprocess, ended by PID. It picks a free
    port itself the first time and says which; a restart listens on the same one. ``mode``
    ``http-legacy`` plays a server of the 2025 spec (sessions by id)."""

    def __init__(self, marks: Path, mode: str = "http") -> None:
        self.port = 0
        self.marks = marks
        self.mode = mode
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> HttpServer:
        cmd = [sys.executable, str(SERVER), self.mode, str(self.port), str(self.marks)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""  # type: ignore[union-attr]
        assert line.strip().isdigit(), "the MCP server did not start listening"
        self.port = int(line)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(10)
            self.proc.stdout.close()  # type: ignore[union-attr]


@pytest.fixture(params=["http", "http-legacy"])
def http_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path, request.param).start()
    try:
        yield server
    finally:
        server.stop()


# -- listing and plain calls ------------------------------------------------------------------


def test_mcp_tools_offers_the_servers_tools_with_their_names_descriptions_and_schemas(tmp_path: Path) -> None:
    tools = mcp_tools(stdio_command(tmp_path), prefix="t_")
    assert [t.name for t in tools] == ["t_" + n for n in NAMES]
    spec = tools[0].spec
    assert (spec.name, spec.description, spec.is_async, spec.inline, spec.approval) == (
        "t_add", "Add two integers.", True, True, "never"
    )  # fmt: skip
    assert spec.parameters["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }
    assert spec.parameters["required"] == ["a", "b"]
    assert spec.config is not None and spec.config["tool"] == "add"
    assert spec.config["server"]["label"] == "greenroom-tests"  # the name the server gives itself


def test_a_call_returns_the_servers_result_and_an_error_result_fails_the_call(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("add", {"a": 2, "b": 3}), call("fail", {"why": "no disk"})), say("Done."))
    turn = runtime.run("go", tools=mcp_tools(stdio_command(tmp_path)))
    result = turn.result(60)
    assert result.finish_reason == "stop"
    assert tool_messages(result.messages) == [ok({"result": 5}), err("Error executing tool fail: cannot: no disk")]
    finished = {e.call_id: e.outcome for e in turn.all_events if isinstance(e, ToolFinished)}
    assert finished == {"call_1": "success", "call_2": "failed"}


def test_progress_notifications_become_tool_progress_events(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("steps", {"n": 3})), say("Done."))
    turn = runtime.run("go", tools=mcp_tools(stdio_command(tmp_path)))
    assert turn.result(60).finish_reason == "stop"
    progress = [e.data for e in turn.all_events if isinstance(e, ToolProgress)]
    assert progress == [{"progress": float(i), "total": 3.0, "message": f"step {i}"} for i in (1, 2, 3)]


def test_one_session_per_server_serves_parallel_calls_and_later_turns(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    tools = mcp_tools(stdio_command(tmp_path))
    provider.add(use_tools(call("pid"), call("pid")), say("Once."), use_tools(call("pid")), say("Twice."))
    first = runtime.run("go", tools=tools).result(60)
    second = runtime.run("again", tools=tools).result(60)
    pids = {data_of(c) for c in tool_messages(first.messages) + tool_messages(second.messages)}
    assert len(pids) == 1


def test_what_a_stdio_server_writes_to_its_stderr_goes_to_greenrooms_log_not_to_the_applications_stderr(
    provider: ScriptedProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "greenroom.log"
    monkeypatch.setenv("GREENROOM_LOG_LEVEL", "INFO")
    monkeypatch.setenv("GREENROOM_LOG_FILE", str(log))
    provider.add(use_tools(call("complain", {"text": "the disk is full"})), say("ok"))

    def server_lines() -> list[str]:
        text = log.read_text() if log.exists() else ""
        return [x.split(" greenroom.mcp: ", 1)[1] for x in text.splitlines() if " greenroom.mcp: " in x]

    with running(provider) as rt:  # its processes write to this test's stderr (captured)
        result = rt.run("go", tools=mcp_tools(stdio_command(tmp_path))).result(60)
        assert tool_messages(result.messages) == [ok({"result": "complained"})]
        assert wait_until(lambda: len(server_lines()) == 3), server_lines()
    where = "MCP server 'greenroom-tests' stderr: "
    assert server_lines() == [
        where + "Traceback (most recent call last):",
        where + '  File "tool.py", line 1, in complain',
        where + "ValueError: the disk is full",
    ]
    assert "the disk is full" not in capfd.readouterr().err


# -- stop and cancel ----------------------------------------------------------------------------


def test_stop_sends_the_cancellation_to_the_server_and_the_call_ends_interrupted(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("slow", {"tag": "s"})))
    turn = runtime.run("go", tools=mcp_tools(stdio_command(tmp_path)))
    assert wait_until(lambda: (tmp_path / "s.started").exists(), timeout=30)
    turn.stop("user pressed stop")
    assert wait_until(lambda: (tmp_path / "s.cancelled").exists()), "the server never saw the cancel"
    result = turn.result(30)
    assert result.finish_reason == "stopped"
    assert tool_messages(result.messages) == [interrupted_content("the call was stopped", "user pressed stop")]
    assert history_problems(result.messages) == []


def test_stop_tool_cancels_one_call_on_the_server_and_the_turn_goes_on(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("slow", {"tag": "s"}), call("add", {"a": 1, "b": 2})), say("One was stopped."))
    turn = runtime.run("go", tools=mcp_tools(stdio_command(tmp_path)))
    turn.wait_for(lambda e: isinstance(e, ToolFinished) and e.call_id == "call_2", timeout=30)
    assert wait_until(lambda: (tmp_path / "s.started").exists(), timeout=30)
    turn.stop_tool("call_1", reason="too slow")
    assert wait_until(lambda: (tmp_path / "s.cancelled").exists()), "the server never saw the cancel"
    result = turn.result(30)
    assert result.finish_reason == "stop"
    assert tool_messages(result.messages) == [
        interrupted_content("the call was stopped", "too slow"),
        ok({"result": 3}),
    ]


def test_cancel_is_cooperative_a_call_in_flight_runs_to_its_end(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("gate", {"tag": "g"})))
    turn = runtime.run("go", tools=mcp_tools(stdio_command(tmp_path)))
    assert wait_until(lambda: (tmp_path / "g.started").exists(), timeout=30)
    turn.cancel("wind down")
    (tmp_path / "g.release").touch()  # the call ends only once the cancel was accepted
    result = turn.result(30)
    assert result.finish_reason == "cancelled"
    assert tool_messages(result.messages) == [ok({"result": "released"})]


# -- a server that dies -------------------------------------------------------------------------


def test_a_stdio_server_that_crashes_mid_call_fails_the_call_and_the_next_call_starts_it_again(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("pid")), use_tools(call("crash")), use_tools(call("pid")), say("Back."))
    result = runtime.run("go", tools=mcp_tools(stdio_command(tmp_path))).result(60)
    before, crashed, after = tool_messages(result.messages)
    assert crashed == err(
        "MCP server 'greenroom-tests' exited during the call (Connection closed); the next call starts it again"
    )
    first, second = data_of(before), data_of(after)
    assert first != second and not pid_alive(first) and pid_alive(second)
    assert result.finish_reason == "stop" and history_problems(result.messages) == []


# -- Streamable HTTP ----------------------------------------------------------------------------


def test_a_streamable_http_server_lists_answers_fails_and_reports_progress(
    runtime: Runtime, provider: ScriptedProvider, http_server: HttpServer
) -> None:
    tools = mcp_tools(url=http_server.url)
    assert [t.name for t in tools] == NAMES
    provider.add(
        use_tools(call("add", {"a": 2, "b": 3}), call("fail", {"why": "x"}), call("steps", {"n": 2})), say("ok")
    )
    turn = runtime.run("go", tools=tools)
    result = turn.result(60)
    assert tool_messages(result.messages) == [
        ok({"result": 5}), err("Error executing tool fail: cannot: x"), ok({"result": "done"})
    ]  # fmt: skip
    assert [e.data["message"] for e in turn.all_events if isinstance(e, ToolProgress)] == ["step 1", "step 2"]


def test_stop_reaches_a_streamable_http_server(
    runtime: Runtime, provider: ScriptedProvider, http_server: HttpServer, tmp_path: Path
) -> None:
    provider.add(use_tools(call("slow", {"tag": "h"})))
    turn = runtime.run("go", tools=mcp_tools(url=http_server.url))
    assert wait_until(lambda: (tmp_path / "h.started").exists(), timeout=30)
    turn.stop("user pressed stop")
    assert wait_until(lambda: (tmp_path / "h.cancelled").exists()), "the server never saw the cancel"
    result = turn.result(30)
    assert tool_messages(result.messages) == [interrupted_content("the call was stopped", "user pressed stop")]


def test_an_http_server_that_crashes_mid_call_fails_the_call_and_answers_again_once_restarted(
    runtime: Runtime, provider: ScriptedProvider, http_server: HttpServer
) -> None:
    tools = mcp_tools(url=http_server.url)
    add = use_tools(call("add", {"a": 1, "b": 1}))
    provider.add(use_tools(call("crash")), say("It crashed."), add, say("Still down."), add, say("Back."))
    crashed = runtime.run("go", tools=tools).result(60)
    lost = "MCP server 'greenroom-tests' dropped the connection during the call ({}); the next call connects again"
    # the mcp client's words for it: no response at all, or a response stream cut short
    details = ["Connection closed", "SSE stream ended without a response"]
    assert tool_messages(crashed.messages)[0] in [err(lost.format(d)) for d in details]
    http_server.stop()
    down = runtime.run("meanwhile", tools=tools).result(60)
    message = json.loads(tool_messages(down.messages)[0])["error"]  # type: ignore[arg-type]
    assert message.startswith("MCP server 'greenroom-tests' could not be reached: ConnectError: "), message
    http_server.start()  # the same port: a new process, a new MCP session
    again = runtime.run("again", tools=tools).result(60)
    assert tool_messages(again.messages) == [ok({"result": 2})]


def test_an_http_server_restarted_between_calls_answers_the_next_call_on_a_new_session(
    runtime: Runtime, provider: ScriptedProvider, http_server: HttpServer
) -> None:
    tools = mcp_tools(url=http_server.url)
    add = use_tools(call("add", {"a": 1, "b": 1}))
    provider.add(add, say("Once."), add, say("Twice."))
    first = runtime.run("go", tools=tools).result(60)
    http_server.stop()
    http_server.start()  # a deploy: the old session is unknown to the new process
    second = runtime.run("again", tools=tools).result(60)
    assert tool_messages(first.messages) == tool_messages(second.messages) == [ok({"result": 2})]


def test_headers_from_variables_reach_an_http_server_and_never_travel(
    provider: ScriptedProvider, http_server: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREENROOM_MCP_TEST_TOKEN", "Bearer s3cret")
    tools = mcp_tools(url=http_server.url, headers_env={"Authorization": "GREENROOM_MCP_TEST_TOKEN"})
    assert all("s3cret" not in json.dumps(t.spec.model_dump()) for t in tools)
    provider.add(use_tools(call("header", {"name": "Authorization"})), say("ok"))
    with running(provider) as rt:
        result = rt.run("go", tools=tools).result(60)
    assert tool_messages(result.messages) == [ok({"result": "Bearer s3cret"})]


# -- approval, secrets, misuse ----------------------------------------------------------------


def test_approval_gates_the_named_tools_only(runtime: Runtime, provider: ScriptedProvider, tmp_path: Path) -> None:
    tools = mcp_tools(stdio_command(tmp_path), requires_approval={"add"})
    provider.add(use_tools(call("add", {"a": 1, "b": 2}), call("env_value", {"name": "HOME"})), say("Done."))
    turn = runtime.run("go", tools=tools)
    assert turn.result(60).finish_reason == "awaiting_approval"
    asked = [e for e in turn.all_events if isinstance(e, ToolApprovalRequest)]
    assert [(e.call_id, e.name, e.arguments) for e in asked] == [("call_1", "add", {"a": 1, "b": 2})]
    turn.approve("call_1")
    result = turn.result(60, final=True)
    assert tool_messages(result.messages) == [ok({"result": 3}), ok({"result": os.environ.get("HOME", "")})]


def test_one_tool_of_a_server_can_be_gated_like_any_tool(tmp_path: Path) -> None:
    tools = {t.name: t for t in mcp_tools(stdio_command(tmp_path))}
    gated = requires_approval(tools["crash"])
    assert (gated.spec.approval, gated.spec.config) == ("always", tools["crash"].spec.config)
    with pytest.raises(
        ToolDefinitionError, match="requires_approval names tools MCP server 'greenroom-tests' does not list: nope"
    ):
        mcp_tools(stdio_command(tmp_path), requires_approval={"add", "nope"})


def test_secrets_come_from_the_hosts_environment_and_are_never_stored(
    provider: ScriptedProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREENROOM_MCP_TEST_SECRET", "s3cret")
    monkeypatch.setenv("GREENROOM_MCP_TEST_OTHER", "not passed")
    tools = mcp_tools(stdio_command(tmp_path), env={"MODE": "test"}, env_from=["GREENROOM_MCP_TEST_SECRET"])
    assert all("s3cret" not in json.dumps(t.spec.model_dump()) for t in tools)
    names = ["GREENROOM_MCP_TEST_OTHER", "MODE"]
    calls = [
        call("env_digest", {"name": "GREENROOM_MCP_TEST_SECRET"}),
        *[call("env_value", {"name": n}) for n in names],
    ]
    provider.add(use_tools(*calls), say("ok"))
    store = tmp_path / "turns.db"
    with running(provider, store) as rt:
        result = rt.run("go", tools=tools).result(60)
    digest = hashlib.sha256(b"s3cret").hexdigest()
    assert tool_messages(result.messages) == [ok({"result": digest}), ok({"result": ""}), ok({"result": "test"})]
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("turns.db*") if p.is_file())
    assert b"GREENROOM_MCP_TEST_SECRET" in stored and digest.encode() in stored  # the turn is there
    assert b"s3cret" not in stored


def test_misuse_is_refused_before_anything_starts() -> None:
    with pytest.raises(ConfigurationError, match="needs a command .* or a url"):
        mcp_tools(["x"], url="http://127.0.0.1:1/mcp")
    with pytest.raises(ConfigurationError, match=r"header 'Authorization' carries a secret"):
        mcp_tools(url="http://127.0.0.1:1/mcp", headers={"Authorization": "Bearer x"})
    with pytest.raises(
        ToolDefinitionError, match=r"MCP server 'missing' cannot be reached: \$GREENROOM_UNSET_X is not set"
    ):
        mcp_tools(["true"], name="missing", env_from=["GREENROOM_UNSET_X"])


# -- nothing outlives its owner -----------------------------------------------------------------


def test_closing_the_runtime_ends_the_stdio_server_even_one_that_ignores_sigterm_and_its_input(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("stubborn")), say("ok"))
    with running(provider) as rt:
        result = rt.run("go", tools=mcp_tools(stdio_command(tmp_path))).result(60)
        server_pid = data_of(tool_messages(result.messages)[0])
        assert pid_alive(server_pid)
    assert not pid_alive(server_pid)


def test_a_turnhost_killed_alone_takes_its_stdio_server_with_it_even_one_that_ignores_sigterm_and_its_input(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("host_pid"), call("stubborn")), say("ok"))
    with running(provider) as rt:
        result = rt.run("go", tools=[T.host_pid, *mcp_tools(stdio_command(tmp_path))]).result(60)
        host = json.loads(tool_messages(result.messages)[0] or "null")["data"]
        server_pid = data_of(tool_messages(result.messages)[1])
        assert pid_alive(server_pid)
        os.kill(host, signal.SIGKILL)  # the owner lives on; the host is replaced
        assert wait_until(lambda: not pid_alive(server_pid)), "the MCP server outlived its TurnHost"


def test_when_the_owner_dies_the_stdio_server_ends_with_it_even_one_that_ignores_sigterm_and_its_input(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("stubborn")), say("ok"))
    cmd = [sys.executable, "-m", "tests.mcp_owner_child", provider.base_url, str(tmp_path)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        server_pid = json.loads(child.stdout.readline())["server_pid"]  # type: ignore[union-attr]
        assert pid_alive(server_pid)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    assert wait_until(lambda: not pid_alive(server_pid)), "the MCP server outlived its owner"
