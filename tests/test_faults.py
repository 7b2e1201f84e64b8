"""Seeded fault injection: whatever goes wrong, a turn ends once, with a valid history, no process left, no hang.

Each seed draws a whole scenario (tests/faults.py): parallel calls of every kind, gated
calls, provider faults, lone surrogates, deep arguments, repeated call ids, non-stream 200
answers, and a stop, cancel or stop_tool at an event-defined moment. Kill scenarios
SIGKILL a TurnHost (where a turn's TurnActor and LLMActor live) or a tool process mid-turn.
A violation explained by an open product bug this suite found is reported as an xfail
naming the bug (``faults.KNOWN_BUGS``); each open bug also has a minimal reproduction below,
marked ``xfail`` with its description: XFAIL while the bug is there, XPASS (in the ``-ra``
summary) once it is fixed, the cue to remove the mark and the bug's ``KNOWN_BUGS`` entry.
The bugs found and fixed since keep their reproduction as a plain test. ``bench/soak.py``
runs the same scenarios by the thousand.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import CommandResult, Runtime, TurnTimeout, run_command
from actors.lifecycle.processes import alive, group_processes, session_processes
from actors.store import open_store
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.turn.history import history_problems
from messages import Error, Finish, ToolApprovalRequest, ToolFinished, ToolProgress, TurnOptions

from . import fault_tools as F
from . import tools_for_tests as T
from .faults import (
    KILL_HOST_MOMENTS,
    KILL_TOOL_TARGETS,
    KNOWN_BUGS,
    PROCESS_EXITED,
    FaultProvider,
    Outcome,
    Scenario,
    check,
    explain,
    format_failure,
    kill_scenario,
    reap,
    reported_pids,
    run_scenario,
)
from .helpers import summary, wait_until
from .test_durable import greenroom

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SEEDS = list(range(1, 17))
EVENT_TIMEOUT = 30.0  # no legitimate pause in a scenario comes near it, even on a loaded machine
KILLS = [("host", m) for m in KILL_HOST_MOMENTS] + [("tool", t) for t in KILL_TOOL_TARGETS]
BUGS = {b.id: b.summary for b in KNOWN_BUGS}


def report(outcome: Outcome, violations: list[str]) -> None:
    """Fail on any violation no known bug explains; report the known ones as an xfail naming them."""
    bugs, left = explain(outcome, violations)
    assert left == [], f"seed {outcome.scenario.seed}:\n" + format_failure(outcome, left)
    if bugs:
        pytest.xfail(
            f"seed {outcome.scenario.seed}: known product bug(s): " + "; ".join(f"{b}: {BUGS[b]}" for b in bugs)
        )


def left_after_close(rt: Runtime, outcomes: list[Outcome]) -> list[int]:
    """Processes of ``rt``'s session, or reported by its tools, still alive after its close
    (and also every one a scenario found left behind); all of them are then killed."""
    sid = rt.admin_sid
    assert sid is not None
    pids = reported_pids(outcomes) + [p for o in outcomes for p in o.leaked]
    wait_until(lambda: session_processes(sid) == [] and not [p for p in pids if alive(p)])
    left = sorted(set(session_processes(sid)) | {p for p in pids if alive(p)})
    reap(left)
    return left


# -- seeded scenarios on one runtime -------------------------------------------------------------


@pytest.fixture(scope="module")
def faults_env(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Runtime, FaultProvider, Path, list[Outcome]]]:
    workdir = tmp_path_factory.mktemp("faults")
    outcomes: list[Outcome] = []
    with FaultProvider() as provider:
        rt = Runtime(provider.provider(), hosts=2).start()
        try:
            yield rt, provider, workdir, outcomes
        finally:
            rt.close()
    assert left_after_close(rt, outcomes) == [], "the runtime's tree or a tool's process outlived close()"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_seeded_scenario_ends_once_with_a_valid_history_and_leaves_nothing(
    seed: int, faults_env: tuple[Runtime, FaultProvider, Path, list[Outcome]]
) -> None:
    rt, provider, workdir, outcomes = faults_env
    scenario = Scenario.generate(seed, kills=False)
    outcome = run_scenario(rt, provider, scenario, workdir, event_timeout=EVENT_TIMEOUT)
    outcomes.append(outcome)
    report(outcome, check(outcome))


def test_the_same_seed_draws_the_same_scenario() -> None:
    assert [Scenario.generate(s) for s in SEEDS] == [Scenario.generate(s) for s in SEEDS]
    assert len({Scenario.generate(s).describe() for s in SEEDS}) == len(SEEDS)


# -- a process of the runtime killed mid-turn ----------------------------------------------------


@pytest.mark.parametrize(("what", "moment"), KILLS)
def test_a_process_killed_mid_turn_ends_the_turn_clearly_or_the_turn_recovers(
    what: str, moment: str, tmp_path: Path
) -> None:
    seed = 1000 + KILLS.index((what, moment))
    with FaultProvider() as provider:
        rt = Runtime(provider.provider(), hosts=2).start()
        try:
            outcome = run_scenario(
                rt, provider, kill_scenario(seed, what, moment), tmp_path, event_timeout=EVENT_TIMEOUT
            )
            after = rt.run("the next turn after the kill").result(30)  # the runtime still serves turns
        finally:
            rt.close()
        left = left_after_close(rt, [outcome])
    assert outcome.killed_pid is not None, format_failure(outcome, ["nothing was killed"])
    assert not alive(outcome.killed_pid)
    assert after.text == "ok"
    violations = check(outcome)
    if left:
        violations.append(f"processes left after the turn ended (and after close): {left}")
    if what == "host":  # no store: the turn is lost, and says so
        assert outcome.kill_result == "error", format_failure(outcome, violations)
        assert summary(outcome.events)[-2:] == [("error", "host_lost", "Agent run lost"), ("finish", "error")]
    else:  # the call fails, saying why, and the turn goes on
        assert outcome.kill_result == "recovered", format_failure(outcome, violations)
        finish = outcome.finish
        assert finish is not None
        killed = [m for m in finish.messages if m.role == "tool" and m.tool_call_id == outcome.control_call]
        assert [json.loads(m.content or "")["error"] for m in killed] == [
            f"Tool '{'block' if moment == 'long_block' else 'spawn_naive'}' failed: {PROCESS_EXITED}"
        ]
    report(outcome, violations)


# -- minimal reproductions of the product bugs this suite found -----------------------------------


def _bug(bug_id: str) -> pytest.MarkDecorator:
    """An open bug: the test shows XFAIL while it is there and XPASS once it is fixed
    (none is open today; the mark is kept for the next one this suite finds)."""
    return pytest.mark.xfail(raises=AssertionError, reason=f"product bug {bug_id}: {BUGS[bug_id]}")


# found by this suite on 63fcb1e, fixed in 085d1fc: the events of a running turn stopped reaching
# its caller (TurnStarted included) until the caller sent the turn a command


def test_every_event_of_a_turn_reaches_its_caller_while_the_turn_waits_on_a_tool(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    for i in range(40):  # on 63fcb1e the stall came within a few turns; one turn alone rarely showed it
        cooperative = call("cooperative", {"marker": str(tmp_path / f"m{i}"), "steps": 1200}, id=f"c{i}")
        provider.add(use_tools(call("add", {"a": 1, "b": 2}, id=f"a{i}"), cooperative))
        turn = runtime.run(f"turn {i}", tools=[T.add, T.cooperative], options=TurnOptions(stop_grace=0.2))
        try:
            turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30)
        except TurnTimeout:
            raise AssertionError(
                f"turn {i}: its progress never reached the caller: {summary(turn.all_events)}"
            ) from None
        finally:
            turn.stop("next turn")
            turn.result(30, final=True)


# found by this suite, fixed in 63fcb1e: a reason with a lone surrogate made every event that
# carried it unencodable, and the caller waited for ever for a Finish that had been dropped


@pytest.mark.parametrize("how", ["stop", "deny"])
def test_a_reason_with_a_lone_surrogate_still_ends_the_turn_for_its_caller(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path, how: str
) -> None:
    keys = str(tmp_path / "keys.txt")
    if how == "stop":
        provider.add(use_tools(call("block", {"seconds": 30})))
        turn = runtime.run("go", tools=[F.block], options=TurnOptions(stop_grace=0.2))
        turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30)
        turn.stop("odd \ud800 reason")
    else:
        provider.add(use_tools(call("gated_effect", {"path": keys})), say("fine"))
        turn = runtime.run("go", tools=[F.gated_effect])
        paused = list(turn.events(timeout=30))[-1]
        assert isinstance(paused, Finish) and paused.finish_reason == "awaiting_approval"
        turn.deny("call_1", reason="bad \ud800 reason")
    try:
        events = list(turn.events(timeout=30))
    except TurnTimeout:
        raise AssertionError(f"no terminal Finish reached the caller: {summary(turn.all_events)}") from None
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.finish_reason == ("stopped" if how == "stop" else "stop")
    assert not [e for e in turn.all_events if isinstance(e, Error) and e.error_type == "event_lost"]
    history = turn.result().messages
    assert history_problems(history) == []
    expected = "odd \ufffd reason" if how == "stop" else "Rejected: bad \ufffd reason"
    assert expected in json.dumps([m.content for m in history], ensure_ascii=False)


# found by this suite, fixed in 63fcb1e: a host lost while its turn was paused left the calls of
# the paused batch without tool messages in the caller's history (the next request got a 400)


def test_a_host_lost_while_its_turn_is_paused_ends_with_a_history_the_provider_accepts(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("host_pid", {}), call("gated_effect", {"path": str(tmp_path / "keys.txt")})))
    turn = runtime.run("go", tools=[T.host_pid, F.gated_effect])
    assert turn.result(30).finish_reason == "awaiting_approval"
    host = next(e.data["pid"] for e in turn.all_events if isinstance(e, ToolProgress))
    assert [e.call_id for e in turn.all_events if isinstance(e, ToolApprovalRequest)] == ["call_2"]
    os.kill(host, signal.SIGKILL)
    result = turn.result(30, final=True)
    assert summary(turn.all_events)[-2:] == [("error", "host_lost", "Agent run lost"), ("finish", "error")]
    assert history_problems(result.messages) == []
    with FaultProvider() as strict:
        assert strict.accepts(result.messages)[0] == 200


# found by this suite on 63fcb1e, fixed since: the caller's Finish(error) closed every call
# of the paused batch as interrupted, also those whose ToolFinished it had received


def test_a_host_lost_while_its_turn_is_paused_keeps_the_results_its_caller_was_given(
    runtime: Runtime, provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("host_pid", {}), call("gated_effect", {"path": str(tmp_path / "keys.txt")})))
    turn = runtime.run("go", tools=[T.host_pid, F.gated_effect])
    assert turn.result(30).finish_reason == "awaiting_approval"
    reported = {e.call_id: e.content for e in turn.all_events if isinstance(e, ToolFinished)}
    host = next(e.data["pid"] for e in turn.all_events if isinstance(e, ToolProgress))
    os.kill(host, signal.SIGKILL)
    result = turn.result(30, final=True)
    kept = {m.tool_call_id: m.content for m in result.messages if m.role == "tool"}
    assert kept["call_1"] == reported["call_1"] == json.dumps({"ok": True, "data": host})


# found by this suite, fixed in 63fcb1e: a tool process SIGKILLed mid-call orphaned what its call
# had started; those in a session of their own even outlived Runtime.close()


def test_a_tool_process_killed_mid_call_takes_the_processes_its_call_started_with_it(
    runtime: Runtime, provider: ScriptedProvider
) -> None:
    provider.add(use_tools(call("spawn_naive", {})), say("done"))
    turn = runtime.run("go", tools=[T.spawn_naive], options=TurnOptions(stop_grace=0.2))
    progress = turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=30)
    assert isinstance(progress, ToolProgress)
    data = progress.data
    os.kill(data["worker"], signal.SIGKILL)
    try:
        assert turn.result(30).finish_reason == "stop"
        assert wait_until(lambda: not [p for p in data["pids"] if alive(p)]), [
            p for p in data["pids"] if alive(p)
        ]
    finally:
        reap(data["pids"])  # what the bug leaves must not outlive the test


# found by this suite (kill-tool-unnoticed, seed 479 of the soak): a tool process that had started
# children was SIGKILLed while its pool forked another; the children it left became the pool's in
# the middle of that fork, so the pool could not tell which new child was the process it forked,
# took that process for an orphan at its next clean-up, killed it and collected its exit itself,
# and Thespian (which learns of an exit by collecting it) never reported it: the pool went on
# lending a dead process and nobody ever failed the call sent to it


def test_a_tool_process_forked_while_another_dies_with_children_is_not_taken_for_their_orphan(
    runtime: Runtime,
) -> None:
    from actors.tools.definition import tool_specs
    from actors.wire.protocol import PoolConfig
    from messages import RunTool, ToolCall

    from .actors_for_tests import RaceFork, RaceHost

    def run(tool: object, arguments: dict[str, object]) -> RunTool:
        spec = tool_specs([tool])[0]
        call_ = ToolCall(id="c1", name=spec.name, arguments=json.dumps(arguments))
        return RunTool(
            turn_id="t", root_turn_id="t", call=call_, spec=spec, arguments=arguments, idempotency_key="t:c1"
        )

    config = PoolConfig(spares=1, recycle_after=0, directory=runtime.directory, node="race")
    race = RaceFork(config, run(T.spawn_naive, {"stubborn": True}), run(T.add, {"a": 2, "b": 3}))
    asys = runtime.actor_system
    answer = asys.ask(asys.createActor(RaceHost), race, 20)
    assert answer is not None, "a process lent after the kill neither answered nor was reported exited"
    exited, answers, children = answer
    try:
        assert exited == 1  # the killed process, reported to its lessee
        assert answers == [json.dumps({"ok": True, "data": 5})] * len(answers)
        assert wait_until(lambda: not [p for p in children if alive(p)]), "its children outlived it"
    finally:
        reap(children)


# found by this suite, fixed in 63fcb1e: run_command read its command's output to EOF, so a
# background child holding the pipes kept it waiting until that child ended on its own


def test_run_command_returns_when_its_command_exits_and_ends_what_it_left_in_its_group() -> None:
    started: list[int] = []
    results: list[CommandResult] = []
    worker = threading.Thread(
        target=lambda: results.append(
            run_command(["sh", "-c", "sleep 300 & echo started"], on_start=lambda p: started.append(p.pid))
        ),
        daemon=True,
    )
    worker.start()
    assert wait_until(lambda: bool(started))
    shell = started[0]
    try:
        assert wait_until(lambda: not alive(shell)), "the shell itself did not exit"
        worker.join(30)  # the shell has exited: run_command has nothing left to wait for but its pipes (the bug: 300 s)
        assert [(r.returncode, r.stdout) for r in results] == [(0, "started\n")], (
            "still waiting for the background sleep"
        )
        assert group_processes(shell) == [], "what the command left in its group is still running"
    finally:
        reap([shell])  # the shell's group (the background sleep), so that the thread ends


# found by the soak over a lossy network (seed 490 at 5x rates, seed 119 at 1x: a killed call's
# turn hung after the tool process of the call before it had exited): Thespian learns that a
# child died on SIGCHLD, but after its actor handles one child's exit it also collects every
# other child it then finds dead and drops it from its list without reporting it; a tool
# process that dies while its pool handles another's exit is never reported, its lessee never
# told, and the call sent to it never ends (fixed in thespian_compat.report_child_exits)


def test_a_tool_process_killed_while_its_pool_handles_another_exit_is_reported(runtime: Runtime) -> None:
    from actors.tools.definition import tool_specs
    from actors.wire.protocol import PoolConfig
    from messages import RunTool, ToolCall

    from .actors_for_tests import ExitRaceHost, RaceExits

    spec = tool_specs([F.block])[0]
    calls = tuple(
        RunTool(
            turn_id="t",
            root_turn_id="t",
            call=ToolCall(id=cid, name=spec.name, arguments=json.dumps({"seconds": 60})),
            spec=spec,
            arguments={"seconds": 60},
            idempotency_key=f"t:{cid}",
        )
        for cid in ("c1", "c2")
    )
    config = PoolConfig(spares=0, recycle_after=0, directory=runtime.directory, node="race")
    asys = runtime.actor_system
    exited = asys.ask(asys.createActor(ExitRaceHost), RaceExits(config, (calls[0], calls[1]), within=5.0), 30)
    assert exited == 2  # both killed processes reported to their lessee


# -- a durable turn's host killed (both stores) ----------------------------------------------------


@pytest.mark.parametrize("approver", ["command_line", "handle_at_once"])
def test_a_host_killed_under_a_paused_durable_turn_is_replaced_and_the_turn_runs_its_call_once(
    provider: ScriptedProvider, store_location: str, tmp_path: Path, approver: str
) -> None:
    """With a store, the replacement host claims the turn (one epoch up) and carries it on from
    its last record: still paused, it takes an approval (from the command line once it has the
    turn, or from the caller's handle right after the kill, which waits for the replacement) and
    runs the approved call once; the caller's stream follows the turn onto the new host."""
    keys = tmp_path / "keys.txt"
    provider.add(use_tools(call("host_pid", {}), call("gated_effect", {"path": str(keys)})), say("Done."))
    with Runtime(provider.provider(), store=store_location, hosts=1, tool_processes=1) as rt:
        turn = rt.run("go", tools=[T.host_pid, F.gated_effect], turn_id="turn_host_killed")
        assert turn.result(30).finish_reason == "awaiting_approval"
        host = next(e.data["pid"] for e in turn.all_events if isinstance(e, ToolProgress))
        store = open_store(store_location)
        epoch = lambda: store.owners.route("turn_host_killed").epoch  # type: ignore[union-attr]  # noqa: E731
        before = epoch()
        os.kill(host, signal.SIGKILL)
        if approver == "handle_at_once":  # sent to the dead host: held until the turn is found again
            turn.approve("call_2", timeout=60)
            assert epoch() == before + 1
        else:
            assert wait_until(lambda: epoch() == before + 1, timeout=20)
            approved = greenroom("approve", "turn_host_killed", "call_2", "--store", store_location)
            assert approved.returncode == 0, approved.stderr
        result = turn.result(30, final=True)
    assert (result.finish_reason, result.text) == ("stop", "Done.")
    assert keys.read_text().splitlines() == ["turn_host_killed:0:call_2"]
    assert history_problems(result.messages) == []
