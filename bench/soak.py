"""Soak: N seeded fault scenarios (tests/faults.py), and K owners SIGKILLed mid-turn on a durable store.

Part one runs scenarios ``seed .. seed+n-1`` on a fresh ``Runtime(hosts=2)`` every
``--per-runtime`` scenarios (each closed, then checked for left processes), and counts
invalid histories, refused next requests, hangs, leaked processes, duplicate side effects,
every other violation, and how each scenario that killed a process ended. Part two
(``--kill-owner K``): K times, a child process owns a ``Runtime(store=...)``, brings a turn
to a side-effecting tool (or to a pause for approval), and is SIGKILLed there; a new
Runtime on the same store recovers the turn and drives it to its end. Duplicate side
effects of tools that are not ``retry_safe`` must be 0, and so must turns that did not finish.

    python bench/soak.py --n 1000 [--seed S] [--per-runtime 100] [--kill-owner K] [--no-kills]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actors import ControlRejected, Runtime, TurnTimeout
from actors.lifecycle.processes import alive, descendants, session_processes
from actors.store.files import store_in_use
from actors.testing import call, say, use_tools
from actors.turn.history import history_problems
from bench.common import pct, save, table
from messages import Finish, ProviderConfig, RetryPolicy, ToolProgress, TurnOptions
from tests import fault_tools as F
from tests.faults import (
    CALL_WEIGHTS,
    CONTROL_WEIGHTS,
    FAULT_WEIGHTS,
    KNOWN_BUGS,
    FaultProvider,
    Outcome,
    Scenario,
    check,
    explain,
    format_failure,
    json_safe,
    reap,
    reported_pids,
    run_scenario,
)
from tests.helpers import wait_until

EVENT_TIMEOUT = 10.0  # seconds without an event before a scenario counts as a hang
OWNER_KINDS = ("tool", "tool_safely", "paused", "approved", "approved_running")
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


# -- part one: seeded scenarios -------------------------------------------------------------------


def category(violation: str) -> str:
    """The table row a violation counts in."""
    if violation.startswith("invalid history"):
        return "invalid histories"
    if violation.startswith(("the strict provider refused", "the turn's own request")):
        return "refused by the strict provider"
    if violation.startswith("hang"):
        return "hangs"
    if violation.startswith("processes left"):
        return "leaked processes (after the turn)"
    if violation.startswith(("duplicate side effect", "a denied call had")):
        return "duplicate or unwanted side effects"
    return "other violations"


def run_block(seeds: list[int], kills: bool, failures: list[dict[str, Any]]) -> tuple[list[Outcome], list[str]]:
    """Run ``seeds`` on one fresh Runtime; return the outcomes and what was left after its close."""
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp, FaultProvider() as provider:
        rt = Runtime(provider.provider(), hosts=2).start()
        try:
            for seed in seeds:
                scenario = Scenario.generate(seed, kills=kills)
                outcome = run_scenario(rt, provider, scenario, Path(tmp), event_timeout=EVENT_TIMEOUT)
                violations = check(outcome)
                outcome.violations = violations
                outcomes.append(outcome)
                if violations:
                    bugs, unexplained = explain(outcome, violations)
                    failures.append({**json_safe(outcome, violations), "known_bugs": bugs, "unexplained": unexplained})
                    print(format_failure(outcome, violations), flush=True)
                    print(f"  known bugs: {bugs or 'none'}; unexplained: {len(unexplained)}", flush=True)
                reap(outcome.leaked)  # recorded above; they must not pile up over a long run
                provider.forget_requests()
        finally:
            started = time.monotonic()
            rt.close()
            closed_in = time.monotonic() - started
        left: list[str] = []
        if closed_in > 6.0:
            left.append(f"close() took {closed_in:.1f} s")
        sid = rt.admin_sid
        if sid is not None and not wait_until(lambda: session_processes(sid) == [], timeout=5):
            left.append(f"session {sid}: {session_processes(sid)}")
        pids = reported_pids(outcomes)
        if not wait_until(lambda: not [p for p in pids if alive(p)], timeout=5):
            left.append(f"reported by tools: {[p for p in pids if alive(p)]}")
            reap(pids)
    return outcomes, left


def scenarios_part(args: argparse.Namespace) -> dict[str, Any]:
    seeds = list(range(args.seed, args.seed + args.n))
    outcomes: list[Outcome] = []
    failures: list[dict[str, Any]] = []
    left_after_close: list[str] = []
    started = time.monotonic()
    for i in range(0, len(seeds), args.per_runtime):
        block, left = run_block(seeds[i : i + args.per_runtime], not args.no_kills, failures)
        outcomes.extend(block)
        left_after_close.extend(left)
        print(f"... {len(outcomes)}/{len(seeds)} scenarios, {len(failures)} with violations", flush=True)
    wall = time.monotonic() - started
    counts: Counter[str] = Counter()
    for o in outcomes:
        for cat in {category(v) for v in o.violations}:
            counts[cat] += 1
    bugs: Counter[str] = Counter()
    unexplained = 0
    for f in failures:
        bugs.update(f["known_bugs"])
        unexplained += bool(f["unexplained"])
    kills: Counter[tuple[str, str]] = Counter()
    for o in outcomes:
        if o.kill_result is not None:
            kills[(o.scenario.control.action, o.kill_result)] += 1
    elapsed = [o.elapsed for o in outcomes]
    return {
        "n": len(outcomes),
        "wall_s": wall,
        "scenario_p50_s": statistics.median(elapsed) if elapsed else 0.0,
        "scenario_p99_s": pct(elapsed, 99),
        "with_violations": sum(1 for o in outcomes if o.violations),
        "counts": dict(counts),
        "known_bugs": dict(bugs),
        "unexplained": unexplained,
        "left_after_close": left_after_close,
        "kills": {f"{a}/{r}": n for (a, r), n in sorted(kills.items())},
        "finish_reasons": dict(Counter(o.finish_reason for o in outcomes)),
        "controls_fired": dict(Counter((o.fired or "not fired").split(":")[0].split(" ")[0] for o in outcomes)),
        "failures": failures,
    }


# -- part two: the owner killed on a durable store ------------------------------------------------


def owner_child(argv: list[str]) -> None:
    """In the child: own a durable Runtime, bring the turn to ``kind``'s point, say so, wait to be killed."""
    store, base_url, kind, turn_id = argv
    provider = ProviderConfig(base_url=base_url, model="scripted-model", retry=RetryPolicy(max_attempts=1))
    rt = Runtime(provider, store=store, hosts=2).start()
    tool = {"tool": F.held_effect, "tool_safely": F.held_effect_safely}.get(kind, F.gated_held_effect)
    turn = rt.run(f"owner {turn_id}", tools=[tool], turn_id=turn_id, options=TurnOptions(stop_grace=0.2))
    if kind in ("tool", "tool_safely"):
        turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=60)
    else:
        assert turn.result(60).finish_reason == "awaiting_approval"
        if kind != "paused":
            turn.approve("c1")
        if kind == "approved_running":
            turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=60)
    print(json.dumps({"pid": os.getpid(), "sid": rt.admin_sid}), flush=True)
    sys.stdin.read()


def drive_recovered(rt: Runtime, turn_id: str, timeout: float = 30.0) -> Finish | None:
    """Attach to a recovered turn and drive it to its terminal Finish, approving what waits."""
    handle = rt.attach(turn_id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = None
        for event in handle.events(timeout=max(0.1, deadline - time.monotonic())):
            last = event
        if not isinstance(last, Finish):
            return None
        if last.terminal:
            return last
        for call_id in last.pending_approvals:
            try:
                handle.approve(call_id)
            except ControlRejected:
                pass  # decided before the owner died: the first decision stands
    return None


def one_owner_kill(i: int, rng: random.Random, provider: FaultProvider, tmp: Path) -> dict[str, Any]:
    kind = rng.choice(OWNER_KINDS)
    store, keys = tmp / f"owner{i}.db", tmp / f"owner{i}.keys"
    turn_id = f"turn_owner{i}"
    name = {"tool": "held_effect", "tool_safely": "held_effect_safely"}.get(kind, "gated_held_effect")
    provider.register(
        f"owner {turn_id}",
        [use_tools(call(name, {"path": str(keys)}, id="c1"))] + [say(f"done {j}") for j in range(4)],
    )
    Path(str(keys) + ".hold").write_text("hold")
    record: dict[str, Any] = {"i": i, "kind": kind, "finished": False, "duplicates": 0, "problems": []}
    child = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--owner-child",
            str(store),
            provider.base_url,
            kind,
            turn_id,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=ENV,
    )
    try:
        line = child.stdout.readline()  # type: ignore[union-attr]
        info = json.loads(line)
    except ValueError:
        child.kill()
        child.wait(10)
        record["problems"].append(f"the owner child did not reach its point: {line!r}")
        return record
    tree = [info["pid"], *session_processes(info["sid"])]
    tree += [d for p in list(tree) for d in descendants(p)]
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    if not wait_until(lambda: not [p for p in tree if alive(p)] and not store_in_use(str(store)), timeout=5):
        record["problems"].append(f"the dead owner's tree outlived it: {[p for p in tree if alive(p)]}")
    os.remove(str(keys) + ".hold")
    try:
        with Runtime(
            provider.provider(retry=RetryPolicy(max_attempts=2, initial_delay=0.01)), store=store, hosts=2
        ) as rt:
            if turn_id not in rt.recovered:
                record["problems"].append(f"not recovered: {rt.recovered} {rt.unrecoverable}")
            finish = None if turn_id in rt.unrecoverable else drive_recovered(rt, turn_id)
    except (TurnTimeout, ControlRejected) as exc:
        finish = None
        record["problems"].append(f"{type(exc).__name__}: {exc}")
    record["finished"] = finish is not None
    if finish is not None:
        record["finish"] = finish.finish_reason
        problems = history_problems(finish.messages)
        if problems:
            record["problems"].append(f"invalid history: {problems}")
        provider.unregister(f"owner {turn_id}")  # what the check posts is answered "ok", not from the script
        status, body = provider.accepts(list(finish.messages))
        if status != 200:
            record["problems"].append(f"the strict provider refused the next request: {status} {body}")
    written = keys.read_text().split() if keys.exists() else []
    record["keys"] = len(written)
    safe = kind == "tool_safely"
    record["duplicates"] = 0 if safe else sum(n - 1 for n in Counter(written).values() if n > 1)
    expected = 2 if safe else 1  # a retry_safe call runs again with the same key; any other runs once
    if record["finished"] and len(written) != expected:
        record["problems"].append(f"the side effect ran {len(written)} times, expected {expected}")
    provider.unregister(f"owner {turn_id}")
    return record


def owners_part(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    records = []
    with tempfile.TemporaryDirectory(prefix="soak-owner-") as tmp, FaultProvider() as provider:
        for i in range(args.kill_owner):
            record = one_owner_kill(i, rng, provider, Path(tmp))
            if record["problems"] or record["duplicates"] or not record["finished"]:
                print(f"owner kill {i} ({record['kind']}): {record}", flush=True)
            records.append(record)
    return {
        "k": len(records),
        "by_kind": dict(Counter(r["kind"] for r in records)),
        "duplicates": sum(r["duplicates"] for r in records),
        "not_finished": sum(1 for r in records if not r["finished"]),
        "with_problems": sum(1 for r in records if r["problems"]),
        "finish_reasons": dict(Counter(r.get("finish", "none") for r in records)),
        "records": records,
    }


# -- the report ---------------------------------------------------------------------------------------


def weights_line(weights: dict[str, float]) -> str:
    total = sum(weights.values())
    return ", ".join(f"{k} {v / total:.0%}" for k, v in weights.items())


def main() -> None:
    if sys.argv[1:2] == ["--owner-child"]:
        owner_child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000, help="seeded scenarios to run")
    parser.add_argument("--seed", type=int, default=1, help="the first seed")
    parser.add_argument("--per-runtime", type=int, default=100, help="scenarios per Runtime before a fresh one")
    parser.add_argument("--kill-owner", type=int, default=0, help="owners to SIGKILL mid-turn on a durable store")
    parser.add_argument("--no-kills", action="store_true", help="no scenario kills a TurnHost or a tool process")
    args = parser.parse_args()
    command = "python bench/soak.py " + " ".join(sys.argv[1:])
    results: dict[str, Any] = {"command": command, "args": vars(args)}
    if args.n:
        part = scenarios_part(args)
        results["scenarios"] = part
        counts = part["counts"]
        rows: list[list[Any]] = [
            ["scenarios", part["n"]],
            ["with any violation", part["with_violations"]],
            ["invalid histories", counts.get("invalid histories", 0)],
            ["refused by the strict provider", counts.get("refused by the strict provider", 0)],
            ["hangs", counts.get("hangs", 0)],
            ["leaked processes (after the turn)", counts.get("leaked processes (after the turn)", 0)],
            ["leaked processes (after close)", len(part["left_after_close"])],
            ["duplicate or unwanted side effects", counts.get("duplicate or unwanted side effects", 0)],
            ["other violations", counts.get("other violations", 0)],
        ]
        for bug in KNOWN_BUGS:
            rows.append([f"  explained by known bug {bug.id}", part["known_bugs"].get(bug.id, 0)])
        rows.append(["  with a violation no known bug explains", part["unexplained"]])
        for key, n in part["kills"].items():
            rows.append([f"killed: {key}", n])
        rows.append(["scenario time p50 / p99 (s)", f"{part['scenario_p50_s']:.2f} / {part['scenario_p99_s']:.2f}"])
        rows.append(["wall time (s)", f"{part['wall_s']:.0f}"])
        print()
        print(f"$ {command}")
        print(table(rows, ["seeded fault scenarios", "count"]))
        print("finish reasons:", dict(sorted(part["finish_reasons"].items())))
        print("controls fired:", dict(sorted(part["controls_fired"].items())))
        print("call kinds:", weights_line(CALL_WEIGHTS))
        print("reply faults:", weights_line(FAULT_WEIGHTS))
        print("controls:", weights_line(CONTROL_WEIGHTS))
        for left in part["left_after_close"]:
            print("left after close:", left)
    if args.kill_owner:
        part = owners_part(args)
        results["owners"] = part
        rows = [
            ["owners SIGKILLed mid-turn", part["k"]],
            ["  by moment", ", ".join(f"{k} {n}" for k, n in sorted(part["by_kind"].items()))],
            ["duplicate side effects (not retry_safe)", part["duplicates"]],
            ["turns that did not finish after recovery", part["not_finished"]],
            ["recoveries with another problem", part["with_problems"]],
            ["finish reasons", ", ".join(f"{k} {n}" for k, n in sorted(part["finish_reasons"].items()))],
        ]
        print()
        print(table(rows, ["durable: the owner killed", "count"]))
    print("saved", save("soak", results))


if __name__ == "__main__":
    main()
