"""What a new user meets first: mistakes refused at once with the fix in the message, the
history handed back in the provider's own format, small promises of the seeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from actors import (
    Cancellation,
    ConfigurationError,
    Runtime,
    ToolDefinitionError,
    TurnOptions,
    tool,
    tool_specs,
)
from actors.lifecycle.processes import free_port
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import ChatMessage, ProviderConfig, RetryPolicy, StartTurn

from . import tools_for_tests as T

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.integration  # the runtime fixture starts a real actor system
def test_a_lambda_or_a_closure_is_refused_when_the_turn_starts(runtime: Runtime) -> None:
    def local(x: int) -> int:
        return x

    for fn in (lambda x: x, local):
        with pytest.raises(ToolDefinitionError, match="has no import path: define it at module level"):
            runtime.run("go", tools=[fn])


@pytest.mark.integration
def test_a_tool_defined_in_main_after_the_runtime_started_is_refused_with_the_fix() -> None:
    script = """
import sys
from actors import Runtime, ToolDefinitionError, tool
from actors.testing import ScriptedProvider

@tool
def early(x: int) -> int:
    return x

with ScriptedProvider() as p, Runtime(p.provider(), hosts=1, tool_processes=1) as rt:
    @tool
    def late(x: int) -> int:
        return x
    rt.run("fine", tools=[early])
    try:
        rt.run("not fine", tools=[late])
    except ToolDefinitionError as exc:
        print(exc)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert out.stdout.strip() == (
        "tool 'late' was defined in __main__ after the Runtime started, so its processes cannot import it: "
        "define it before starting the Runtime, or in a module (a .py file)"
    )


@pytest.mark.integration
def test_a_run_under_python_dev_mode_and_warnings_as_errors_prints_no_warning() -> None:
    """A user's ``-W error`` suite must not fail on greenroom: no unclosed socket or file,
    in the caller or in any process of the runtime (their stderr is the caller's)."""
    script = """
import asyncio
from actors import AsyncRuntime, Runtime
from actors.testing import ScriptedProvider, call, say, use_tools
from tests.tools_for_tests import add

with ScriptedProvider() as p:
    p.add(use_tools(call("add", {"a": 2, "b": 3})), say("5."), say("async."))
    with Runtime(p.provider()) as rt:
        print(rt.run("add", tools=[add]).result(60).text)

    async def main() -> None:
        async with AsyncRuntime(p.provider()) as art:
            print((await (await art.run("hi")).result(60)).text)

    asyncio.run(main())
"""
    out = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", script],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert (out.returncode, out.stdout, out.stderr) == (0, "5.\nasync.\n", "")


@pytest.mark.integration  # the runtime fixture starts a real actor system
def test_a_provider_whose_key_variable_is_unset_is_refused_at_run(runtime: Runtime) -> None:
    config = ProviderConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key_env="GREENROOM_NO_SUCH_KEY")
    with pytest.raises(ConfigurationError) as refused:
        runtime.run("hi", provider=config)
    assert str(refused.value) == (
        "the provider's key variable $GREENROOM_NO_SUCH_KEY is not set in this process; set it, or pass "
        "api_key_env=None for a server that needs no key"
    )


@pytest.mark.integration
def test_a_connection_error_names_the_url(runtime: Runtime) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    config = ProviderConfig(base_url=url, model="m", retry=RetryPolicy(max_attempts=1))
    result = runtime.run("hi", provider=config).result(30)
    assert result.finish_reason == "error" and result.error is not None
    assert result.error.message.startswith(f"connection to the provider at {url}/chat/completions failed: ConnectError")


@pytest.mark.integration
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_history_in_the_providers_format_starts_a_new_turn(
    runtime: Runtime, provider: ScriptedProvider, api: str
) -> None:
    provider.add(use_tools(call("add", {"a": 2, "b": 2})), say("Four."), say("Still four."))
    first = runtime.run("2+2?", tools=[T.add], system="Be brief.").result(30)
    wire = first.messages_as(api)  # type: ignore[arg-type]
    assert json.loads(json.dumps(wire)) == wire  # plain JSON data
    again = runtime.run(wire, tools=[T.add]).result(30)
    assert again.messages[: len(first.messages)] == first.messages
    assert again.text == "Still four."


@pytest.mark.integration
def test_stop_tool_of_the_last_call_awaiting_approval_makes_result_wait_for_the_real_end(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("delete_file", {"path": str(tmp_path / "x")})), say("I will not delete it."))
    turn = runtime.run("clean", tools=[T.delete_file])
    assert turn.result(30).finish_reason == "awaiting_approval"
    turn.stop_tool("call_1", reason="not this one")
    result = turn.result(30)
    assert (result.finish_reason, result.text) == ("stop", "I will not delete it.")


def test_a_start_turn_takes_tools_and_specs_and_refuses_a_bare_function_saying_how() -> None:
    start = StartTurn(
        messages=[ChatMessage.user("x")],
        tools=[T.add, *tool_specs([T.timed_echo.fn])],
        provider=ProviderConfig(base_url="http://x", model="m"),
        options=TurnOptions(),
    )
    assert [(t.name, t.ref) for t in start.tools] == [
        ("add", "tests.tools_for_tests:add"),
        ("timed_echo", "tests.tools_for_tests:timed_echo"),
    ]
    with pytest.raises(ValueError) as refused:
        StartTurn(messages=[ChatMessage.user("x")], tools=[T.timed_echo.fn], provider=start.provider)
    assert (
        "timed_echo is a plain function: StartTurn takes ToolSpecs or tools; wrap it with actors.tool(...) "
        "or convert with actors.tool_specs([...])"
    ) in str(refused.value)


def test_cancellation_wait_blocks_until_a_stop_or_cancel() -> None:
    cancellation = Cancellation()
    assert cancellation.wait(0.01) is False
    threading.Timer(0.05, cancellation._request, args=("cancel", "enough")).start()
    assert cancellation.wait(10) is True
    assert (cancellation.mode, cancellation.reason) == ("cancel", "enough")


def test_an_inline_tool_must_be_async() -> None:
    with pytest.raises(ToolDefinitionError, match="inline=True is for async def tools only"):

        @tool(inline=True)
        def sync_tool() -> None: ...


def _takes_a_callback(callback: Callable[[], int]) -> int:
    return callback()


def test_a_parameter_with_no_json_schema_is_refused_when_the_tool_is_defined() -> None:
    with pytest.raises(ToolDefinitionError, match="'_takes_a_callback': its parameters have no JSON schema"):
        tool(_takes_a_callback)
