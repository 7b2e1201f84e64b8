"""The demo turn: streamed text, parallel tools, a human approval, then a stop.

Runs on the built-in scripted provider unless ``OPENAI_API_KEY`` is set, in which case
``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``) and ``GREENROOM_MODEL``
(default ``gpt-4o-mini``) select a real OpenAI-compatible model. ``make demo`` and
``greenroom demo`` run it; ``--yes``/``--no`` answer the approval without asking.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from messages import (
    Error,
    Finish,
    ProviderConfig,
    TextDelta,
    ToolApprovalRequest,
    ToolCallStarted,
    ToolFinished,
    ToolProgress,
    TurnEvent,
    TurnRetrying,
)

from ..client.runtime import Runtime, TurnHandle
from ..tools.commands import run_command
from ..tools.context import ToolContext
from ..tools.definition import tool
from . import Reply, Request, ScriptedProvider, call, say, use_tools

__all__ = ["demo_responder", "get_weather", "main", "print_event", "remove_file", "run_shell"]

WEATHER = {"paris": (18, "light rain"), "oslo": (4, "clear"), "lima": (22, "overcast")}


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name, e.g. "Paris".
    """
    temp, sky = WEATHER.get(city.lower(), (15, "unknown"))
    return {"city": city, "temp_c": temp, "sky": sky}


@tool(requires_approval=True)
def remove_file(path: str) -> str:
    """Delete a file. A human must approve every call.

    Args:
        path: The file to delete.
    """
    Path(path).unlink()
    return f"removed {path}"


SAFE_COMMANDS = ("sleep 30; echo built", "date", "uname -a", "uptime", "echo hello")


@tool
def run_shell(command: str) -> dict[str, Any]:
    """Run a shell command and return its output (the demo runs only a few harmless ones).

    Args:
        command: The command line, run with sh -c.
    """
    if command not in SAFE_COMMANDS:
        raise PermissionError(f"the demo runs only these commands: {', '.join(SAFE_COMMANDS)}")
    ctx = ToolContext.current()
    result = run_command(
        ["sh", "-c", command], on_start=lambda p: ctx.report_progress({"pid": p.pid, "command": command})
    )
    return {"returncode": result.returncode, "stdout": result.stdout.strip()}


def demo_responder(request: Request) -> Reply:
    """What the scripted model says, from the conversation so far (stateless, so replayable)."""
    messages = request.messages
    last = messages[-1]
    if last["role"] == "user" and "build" in str(last.get("content")):
        return use_tools(call("run_shell", {"command": "sleep 30; echo built"}), text="Starting the build.", delay=0.02)
    if last["role"] == "user":
        path = str(last.get("content")).rsplit(" ", 1)[-1].rstrip("?.")
        return use_tools(
            call("get_weather", {"city": "Paris"}),
            call("get_weather", {"city": "Oslo"}),
            call("remove_file", {"path": path}),
            text="Let me check the weather in both cities, and clean up that file.",
            delay=0.02,
        )
    results = [m for m in messages if m["role"] == "tool"]
    lines = []
    for m in results:
        content = m.get("content") or ""
        try:
            data = json.loads(content).get("data")
        except ValueError:
            data = None
        if isinstance(data, dict) and "city" in data:
            lines.append(f"{data['city']} is {data['temp_c']}°C with {data['sky']}.")
        elif content.startswith("Rejected"):
            lines.append(f"I left the file alone ({content}).")
        elif isinstance(data, str):
            lines.append(f"Done: {data}.")
    return say(" ".join(lines) or "All done.", delay=0.02)


_in_text = False


def print_event(event: TurnEvent, out: TextIO = sys.stdout) -> None:
    """One line (or a stream of text) per event, for people."""
    global _in_text
    if isinstance(event, TextDelta):
        if not _in_text:
            out.write("\n")
        out.write(event.text)
        _in_text = True
        out.flush()
        return
    _in_text = False
    if isinstance(event, ToolCallStarted):
        out.write(f"\n  -> {event.name}({json.dumps(event.arguments)})  [{event.call_id}]")
    elif isinstance(event, ToolProgress):
        out.write(f"\n  .. {event.call_id}: {json.dumps(event.data)}")
    elif isinstance(event, ToolFinished):
        out.write(f"\n  <- {event.call_id} {event.outcome}: {event.content[:100]}")
    elif isinstance(event, ToolApprovalRequest):
        out.write(f"\n  ?? {event.name}({json.dumps(event.arguments)}) needs approval  [{event.call_id}]")
    elif isinstance(event, TurnRetrying):
        out.write(f"\n  (retry {event.attempt} in {event.delay:.1f} s: {event.reason})")
    elif isinstance(event, Error):
        out.write(f"\n  !! {event.message}" + (f" ({event.detail})" if event.detail else ""))
    elif isinstance(event, Finish):
        out.write(f"\n== finish: {event.finish_reason} (round {event.round}, {event.usage.total_tokens} tokens)\n")
    out.flush()


NO_TERMINAL = "no person could be asked (stdin is not a terminal), and a real model's calls never run unasked"


def _ask(prompt: str, answer: bool | None, real_model: bool) -> tuple[bool, str | None]:
    """Whether a person approves, and the reason for a denial. Against the scripted model
    an unattended run approves by itself; against a real one it denies and says why."""
    if answer is not None:
        print(f"{prompt} {'y' if answer else 'n'} (from the command line)")
        return answer, None if answer else "the user said no"
    if not sys.stdin.isatty():
        if real_model:
            print(f"{prompt} n ({NO_TERMINAL})")
            return False, NO_TERMINAL
        print(f"{prompt} y (stdin is not a terminal; the scripted model asked)")
        return True, None
    yes = input(f"{prompt} [y/n] ").strip().lower().startswith("y")
    return yes, None if yes else "the user said no"


def _follow(turn: TurnHandle) -> Finish:
    finish = None
    for event in turn.events(timeout=120):
        print_event(event)
        if isinstance(event, Finish):
            finish = event
    assert finish is not None
    return finish


def run_demo(provider: ProviderConfig, approve: bool | None, real_model: bool = False) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="greenroom-demo-"))
    target = scratch / "old.log"
    target.write_text("stale\n")
    with Runtime(provider) as rt:
        print("== turn 1: streamed text, two tools in parallel, one that needs approval\n")
        turn = rt.run(f"What's the weather in Paris and Oslo? Also delete {target}", tools=[get_weather, remove_file])
        finish = _follow(turn)
        while finish.finish_reason == "awaiting_approval":
            for request in turn.result().pending_approvals:
                yes, why = _ask(f"\nApprove {request.name}({json.dumps(request.arguments)})?", approve, real_model)
                if yes:
                    turn.approve(request.call_id)
                else:
                    turn.deny(request.call_id, reason=why)
            finish = _follow(turn)
        print(f"\nfile still there: {target.exists()}")

        print("\n== turn 2: a long shell command, stopped while it runs\n")
        turn = rt.run("Run the build", tools=[run_shell])
        for event in turn.events(timeout=120):
            print_event(event)
            if isinstance(event, ToolProgress):
                print("\n  (pressing stop)")
                turn.stop("the user pressed stop")
        history = turn.result().messages
        print(f"history ends with a tool message for every call: {history[-1].role} -> {history[-1].content}")
    return 0


def provider_from_env() -> tuple[ProviderConfig | None, str]:
    if os.environ.get("OPENAI_API_KEY"):
        config = ProviderConfig(
            base_url=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
            model=os.environ.get("GREENROOM_MODEL", "gpt-4o-mini"),
            api_key_env="OPENAI_API_KEY",
        )
        return config, f"a real model: {config.model} at {config.base_url}"
    return None, "the built-in scripted provider (set OPENAI_API_KEY for a real model)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="greenroom demo", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--yes", action="store_const", const=True, dest="approve", help="approve without asking")
    group.add_argument("--no", action="store_const", const=False, dest="approve", help="deny without asking")
    args = parser.parse_args(argv)
    provider, where = provider_from_env()
    print(f"greenroom demo on {where}\n")
    if provider is not None:
        return run_demo(provider, args.approve, real_model=True)
    with ScriptedProvider(responder=demo_responder) as scripted:
        return run_demo(scripted.provider(), args.approve)


if __name__ == "__main__":
    raise SystemExit(main())
