"""Issue 23, the bugs that need no network: sizes, memory, reading cost, ``on_stop`` callbacks, attach.

Each test asserts what a correct runtime does; each was written against the code before the
fix of issue 23 and failed there (the comment above each names the bug it caught). Those
marked ``heavy`` move tens of MB (``-m "not heavy"`` leaves them out).

(The cancel of a call that waits for a tool process is in ``test_lossy_network``: a relay
holds the pool's answer there, so that the cancel certainly comes while the call waits.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from actors import Runtime, TurnTimeout
from actors.client.handle import TurnHandle
from actors.lifecycle.processes import alive
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import RetryPolicy, ToolProgress, TurnEvent

from . import reliability_tools as R
from . import tools_for_tests as T
from .helpers import summary, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
FAST = RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.05)



def events_of(turn: TurnHandle, timeout: float = 5.0) -> list[TurnEvent]:
    """The turn's events up to its next Finish, or those that came before a wait of more
    than ``timeout`` for the next one."""
    out: list[TurnEvent] = []
    try:
        out.extend(turn.events(timeout=timeout))
    except TurnTimeout:
        pass
    return out


def attempt(command: Callable[[], None]) -> str | None:
    try:
        command()
    except TurnTimeout as exc:
        return f"TurnTimeout: {exc}"
    return None


# -- sizes and memory ---------------------------------------------------------------------------


@pytest.mark.heavy
# issue 23 fixed: a tool result over the 64 MiB frame limit hangs its turn: no ToolFinished, no timeout
def test_a_tool_result_over_the_frame_limit_fails_its_call_and_the_turn_goes_on(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("huge_result", {"mib": 65})), say("Too big."))
    turn = runtime.run("big", tools=[R.huge_result])
    seen = summary(events_of(turn, timeout=10))
    assert seen[-3:] == [("tool_finished", "call_1", "failed"), ("text", "Too big."), ("finish", "stop")]


@pytest.mark.heavy
# issue 23 fixed: a caller that never reads makes the owner hold every event: ~1.5 KiB each, no bound
def test_an_owner_whose_caller_never_reads_holds_a_bounded_amount_of_memory() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.unread_owner", "2", "25000"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    out = json.loads(done.stdout)
    grown_mib = (out["after"] - out["before"]) / 1024
    assert grown_mib < 20, f"the owner grew {grown_mib:.0f} MiB while {out['received']} events waited unread"
    assert out["received"] <= 2 * 1100, "each unread handle holds about its window (1,024 events), no more"
    assert out["dropped"] == 2, "each host let go of its unread reader once the grace had passed, and said so"


# issue 23 fixed: TurnHandle.events() rescans the whole stream for every event it yields (quadratic)
def test_reading_events_costs_in_proportion_to_their_number(runtime: Runtime, provider: ScriptedProvider) -> None:
    """Python calls made by ``events()`` reading a finished turn of n events, n = 300 and
    1,200: linear reading makes about 4 times as many for 4 times the events (quadratic: 16)."""
    calls: dict[int, int] = {}
    for count in (300, 1200):
        provider.add(use_tools(call("progress_burst", {"count": count})), say("done"))
        turn = runtime.run("burst", tools=[R.progress_burst])
        turn.result(timeout=30, final=True)  # every event is here; reading waits for nothing
        made = 0

        def profile(frame: object, event: str, arg: object) -> None:
            nonlocal made
            made += event == "call"

        sys.setprofile(profile)
        try:
            read = sum(1 for _ in turn.events(timeout=5))
        finally:
            sys.setprofile(None)
        assert read == count + 5
        calls[count] = made
    ratio = calls[1200] / calls[300]
    assert ratio < 8, f"reading 4 times the events made {ratio:.1f} times the calls: {calls}"


# -- on_stop callbacks ----------------------------------------------------------------------------


@pytest.mark.heavy
# issue 23 fixed: a blocking on_stop callback in a tool process holds back the SIGTERM and SIGKILL of the tool's children
def test_a_blocking_on_stop_callback_does_not_delay_the_end_of_the_tools_children(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("child_and_blocking_on_stop", {"seconds": 30})))
    turn = runtime.run("go", tools=[R.child_and_blocking_on_stop])
    progress = turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=10)
    child = progress.data["child"]  # type: ignore[attr-defined]
    assert attempt(lambda: turn.stop("now")) is None
    grace = 2.0  # TurnOptions.stop_grace
    assert wait_until(lambda: not alive(child), timeout=grace + 3), "the tool's child outlived its stop grace"


@pytest.mark.heavy
# issue 23 fixed: a blocking inline on_stop callback blocks the TurnHost: stop() times out, every other turn is silent
def test_a_blocking_inline_on_stop_callback_blocks_neither_the_stop_nor_other_turns(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("inline_blocking_on_stop", {"seconds": 30})))
    blocked = runtime.run("block", tools=[R.inline_blocking_on_stop])
    blocked.wait_for(lambda e: isinstance(e, ToolProgress), timeout=10)
    raised = attempt(lambda: blocked.stop("now", timeout=3))
    provider.add(say("still here"))
    other = runtime.run("hello")  # the same host (the runtime fixture has one)
    assert (raised, summary(events_of(other, timeout=3))) == (
        None,
        [("turn_started",), ("text", "still here"), ("finish", "stop")],
    )


# issue 23 fixed: an inline on_stop callback that raises SystemExit ends the TurnHost and an unrelated turn with it
def test_an_inline_on_stop_callback_that_raises_system_exit_fails_that_callback_alone(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    provider.add(use_tools(call("wait_for_file", {"path": str(release)})))
    other = runtime.run("wait", tools=[T.wait_for_file])
    other.wait_for(lambda e: isinstance(e, ToolProgress), timeout=10)
    provider.add(use_tools(call("inline_exit_on_stop", {})))
    exiting = runtime.run("exit", tools=[R.inline_exit_on_stop])
    exiting.wait_for(lambda e: isinstance(e, ToolProgress), timeout=10)
    raised = attempt(lambda: exiting.stop("now", timeout=3))
    stopped = summary(events_of(exiting))
    provider.add(say("released"))
    release.touch()
    assert (raised, stopped[-1], summary(events_of(other))[-3:]) == (
        None,
        ("finish", "stopped"),
        [("tool_finished", "call_1", "success"), ("text", "released"), ("finish", "stop")],
    )


# -- attach ---------------------------------------------------------------------------------------


def greenroom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


# issue 23 fixed: attach() after an approval from another process: result() is the stale Finish(awaiting_approval)
def test_attach_after_an_approval_from_the_command_line_does_not_report_the_call_as_pending(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    store, release = tmp_path / "turns.db", tmp_path / "release"
    provider.add(use_tools(call("gated_wait", {"path": str(release)})), say("Done."))
    with Runtime(provider.provider(retry=FAST), store=store, hosts=1, tool_processes=1) as rt:
        paused = rt.run("go", tools=[R.gated_wait], turn_id="turn_attach")
        if paused.result(timeout=30).finish_reason != "awaiting_approval":
            raise RuntimeError("the turn did not pause for approval")
    approved = greenroom("approve", "turn_attach", "call_1", "--store", str(store), "--json")
    if approved.returncode != 0 or json.loads(approved.stdout)["sent_to"] != "store":
        raise RuntimeError(approved.stderr)
    with Runtime(provider.provider(retry=FAST), store=store, hosts=1, tool_processes=1) as rt:
        turn = rt.attach("turn_attach")
        turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=10)  # the approved call runs
        try:
            now = turn.result(timeout=2)
            described = (now.finish_reason, [r.call_id for r in now.pending_approvals])
        except TurnTimeout:
            described = ("running", [])  # no Finish describes the turn yet: true
        release.touch()
        final = turn.result(timeout=30, final=True)
        assert (described, final.finish_reason) == (("running", []), "stop")
