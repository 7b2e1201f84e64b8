"""Soak: N seeded fault scenarios (tests/faults.py), over a lossy network if asked, and K owners SIGKILLed.

Part one runs scenarios ``seed .. seed+n-1`` on a fresh ``Runtime(hosts=2)`` every
``--per-runtime`` scenarios (each closed, then checked for left processes), and counts
invalid histories, refused next requests, hangs, leaked processes, duplicate side effects,
callers left waiting (a command that got no answer, events the turn produced that never
reached its reader, a request of the owner still unanswered once its scenario ended), every
other violation, and how each scenario that killed a process ended. After each block it
records the owner's (this process's) resident memory, after ``gc.collect()``.

``--network``: each block's Runtime runs in a fresh network namespace whose every TCP
connection (between its processes, and to the scripted provider) goes through a
``FaultRelay`` (``bench/soak_network.py``) drawing, per frame, beside the scenarios' own
faults: a cut (the frame delivered, its ACK lost) 0.5 %, a duplicate (the same bytes
delivered again) 0.5 %, a delay of 10-1000 ms of that connection (others overtake it) 1 %, a
reset before delivery 0.2 % (``--rates`` changes them). No stall: a connection held until
the end is a partition, which Thespian reports only after 30 s, past the 10 s hang
threshold. The relay's policy is seeded per block (``seed`` of the block's first scenario),
but which frame a draw falls on depends on timing: a scenario replays, its network faults
do not. Needs root, ``ip`` and ``nft``.

``--store-faults``: each block's Runtime is durable, on a database of its own on a throwaway
PostgreSQL behind a relay (``bench/soak_store.py``), while every 2-6 s the server is
restarted, paused, or cut off from one process of the Runtime (a host or the directory),
for 0.3-4 s; scenarios kill no process then (the store is the fault), a scenario counts as
a hang after 30 s without an event, and a turn that ends in error for want of its store
(``store_error``, ``store_unavailable``, ``host_lost``) counts as ended by a store fault.

Part two (``--kill-owner K``, never over the relay): K times, a child process owns a
``Runtime(store=...)``, brings a turn to a side-effecting tool (or to a pause for approval),
and is SIGKILLed there; a new Runtime on the same store recovers the turn and drives it to
its end. Duplicate side effects of tools that are not ``retry_safe`` must be 0, and so must
turns that did not finish.

    python bench/soak.py --n 1000 [--seed S] [--per-runtime 100] [--network [--rates cut=0.005,...]]
                         [--store-faults] [--kill-owner K] [--no-kills]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actors import Runtime
from actors.lifecycle.processes import alive, session_processes
from bench.common import pct, save, table
from bench.soak_network import DEFAULT_RATES, NotingPolicy, available, network, owner_rss_kib, parse_rates, relay_line
from bench.soak_owners import owners_part
from bench.soak_store import store_faults, through
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
STORE_EVENT_TIMEOUT = 30.0  # the same while the store fails: an outage of 4 s, a fence, a recovery


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
    if violation.startswith(("events withheld", WAITING)) or "TurnTimeout" in violation or "got no answer" in violation:
        return "callers left waiting"
    if violation.startswith(STORE_ENDED):
        return STORE_ENDED
    return "other violations"


STORE_ENDED = "ended by a store fault"


WAITING = "callers left waiting"


def unanswered(rt: Runtime) -> set[str]:
    """The owner's requests still waiting for an answer: the Runtime's open futures and the
    commands it holds for a turn (its private state, read here for the soak)."""
    inbound = rt._inbound
    with inbound._lock:
        waiting = {key for key, future in inbound._futures.items() if not future.done()}
    hosts = rt._hosts
    if hosts is not None:
        with hosts._lock:
            waiting |= {f"{type(c).__name__} held for {tid}" for tid, held in hosts._held.items() for c, _ in held}
    return waiting


@dataclass(frozen=True)
class Kept:
    """What the soak keeps of a checked scenario: an ``Outcome`` holds every event of its
    turn, and 1,000 of them kept would grow the owner's memory that the soak measures."""

    elapsed: float
    violations: list[str]
    finish_reason: str
    kill_result: str | None
    action: str
    fired: str | None

    @classmethod
    def of(cls, o: Outcome) -> Kept:
        return cls(o.elapsed, o.violations, o.finish_reason, o.kill_result, o.scenario.control.action, o.fired)


class Block:
    """One Runtime's scenarios: what they did, and what was left or noticed around them."""

    def __init__(self) -> None:
        self.outcomes: list[Kept] = []
        self.pids: set[int] = set()  # every pid the tools reported
        self.left: list[str] = []  # processes left, a slow close
        self.waiting: list[str] = []  # the owner's requests still open at the block's end
        self.relay: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()  # "cut EventBatch" -> n
        self.rss_during: list[int] = []  # KiB, every MEMORY_EVERY scenarios, the Runtime running
        self.start_failed: str | None = None


MEMORY_EVERY = 25
START_ATTEMPTS = 3  # a block whose Runtime did not start is run again (counted), on a fresh network


def run_block(seeds: list[int], args: argparse.Namespace, failures: list[dict[str, Any]], attempt: int = 0) -> Block:
    """Run ``seeds`` on one fresh Runtime (behind a lossy network with ``--network``, its
    faults seeded by the first seed and ``attempt``); none if the Runtime did not start."""
    block = Block()
    with contextlib.ExitStack() as stack:
        policy: NotingPolicy | None = None
        if args.network:
            relay, policy = stack.enter_context(network(seeds[0] + 1_000_000 * attempt, args.rates))
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="soak-"))
        provider = stack.enter_context(FaultProvider())
        store = None
        if args.store_faults:
            args.faulty_store[2].calm()  # a restart drawn in the block before may not have ended
            store = through(*args.faulty_store[:2], f"soak_{seeds[0]}_{attempt}")
        rt = Runtime(provider.provider(), hosts=2, store=store)
        try:
            try:
                rt.start()
            except Exception as exc:  # noqa: BLE001 - a finding: reported, and the block is run again
                noted = policy.drain() if policy is not None else []
                block.start_failed = f"{type(exc).__name__}: {exc}; network faults meanwhile: {noted}"
                print(f"the Runtime of seeds {seeds[0]}.. did not start: {block.start_failed}", flush=True)
                seeds = []
            injected: list[str] = []  # the network faults drawn during the scenario just run
            if args.store_faults:
                args.faulty_store[2].running.set()
            for seed in seeds:
                scenario = Scenario.generate(seed, kills=not (args.no_kills or args.store_faults))
                before = unanswered(rt)
                timeout = STORE_EVENT_TIMEOUT if args.store_faults else EVENT_TIMEOUT
                outcome = run_scenario(rt, provider, scenario, Path(tmp), event_timeout=timeout, command_timeout=timeout)
                violations = check(outcome)
                if args.store_faults and outcome.error_type in ("store_error", "store_unavailable", "host_lost"):
                    violations.append(f"{STORE_ENDED}: Error({outcome.error_type}) then Finish(error)")
                left_waiting = sorted(unanswered(rt) - before)
                if left_waiting:
                    violations.append(f"{WAITING}: {len(left_waiting)} request(s) never answered: {left_waiting}")
                outcome.violations = violations
                block.outcomes.append(Kept.of(outcome))
                block.pids.update(reported_pids([outcome]))
                before_it, injected = injected, policy.drain() if policy is not None else []
                if violations:
                    bugs, unexplained = explain(outcome, violations)
                    record = {**json_safe(outcome, violations), "known_bugs": bugs, "unexplained": unexplained}
                    failures.append({**record, "network": {"previous scenario": before_it, "this scenario": injected}})
                    print(format_failure(outcome, violations), flush=True)
                    for line in before_it:
                        print(f"  network, in the previous scenario: {line}", flush=True)
                    for line in injected:
                        print(f"  network: {line}", flush=True)
                    print(f"  known bugs: {bugs or 'none'}; unexplained: {len(unexplained)}", flush=True)
                reap(outcome.leaked)  # recorded above; they must not pile up over a long run
                provider.forget_requests()
                if len(block.outcomes) % MEMORY_EVERY == 0:
                    block.rss_during.append(owner_rss_kib())
            still = unanswered(rt)
            if still:
                block.waiting.append(f"{WAITING} at the block's end: {sorted(still)}")
        finally:
            if args.store_faults:
                args.faulty_store[2].running.clear()
            started = time.monotonic()
            rt.close()
            closed_in = time.monotonic() - started
        if closed_in > 6.0:
            block.left.append(f"close() took {closed_in:.1f} s")
        sid = rt.admin_sid
        if sid is not None and not wait_until(lambda: session_processes(sid) == [], timeout=5):
            block.left.append(f"session {sid}: {session_processes(sid)}")
        pids = sorted(block.pids)
        if not wait_until(lambda: not [p for p in pids if alive(p)], timeout=5):
            block.left.append(f"reported by tools: {[p for p in pids if alive(p)]}")
            reap(pids)
        if policy is not None:
            if not wait_until(lambda: relay.namespace.processes() == [], timeout=5):
                block.left.append(f"in the block's network namespace: {relay.namespace.processes()}")
            block.relay, block.faults = relay.counts, policy.by_message
    return block


def scenarios_part(args: argparse.Namespace) -> dict[str, Any]:
    seeds = list(range(args.seed, args.seed + args.n))
    outcomes: list[Kept] = []
    failures: list[dict[str, Any]] = []
    left_after_close: list[str] = []
    waiting_at_end: list[str] = []
    start_failures: list[str] = []
    relay: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    rss_after: list[int] = [owner_rss_kib()]  # KiB: before the first block, then after each
    rss_during: list[list[int]] = []
    started = time.monotonic()
    for i in range(0, len(seeds), args.per_runtime):
        for attempt in range(START_ATTEMPTS):
            block = run_block(seeds[i : i + args.per_runtime], args, failures, attempt)
            if block.start_failed is None:
                break
            start_failures.append(block.start_failed)
        outcomes.extend(block.outcomes)
        left_after_close.extend(block.left)
        waiting_at_end.extend(block.waiting)
        relay.update(block.relay)
        faults.update(block.faults)
        rss_after.append(owner_rss_kib())
        rss_during.append(block.rss_during)
        print(
            f"... {len(outcomes)}/{len(seeds)} scenarios, {len(failures)} with violations, "
            f"{time.monotonic() - started:.0f} s; owner RSS {rss_after[-1] / 1024:.1f} MiB"
            + (f"; relay: {relay_line(block.relay)}" if args.network else ""),
            flush=True,
        )
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
            kills[(o.action, o.kill_result)] += 1
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
        "waiting_at_block_end": waiting_at_end,
        "start_failures": start_failures,
        "kills": {f"{a}/{r}": n for (a, r), n in sorted(kills.items())},
        "finish_reasons": dict(Counter(o.finish_reason for o in outcomes)),
        "controls_fired": dict(Counter((o.fired or "not fired").split(":")[0].split(" ")[0] for o in outcomes)),
        "network": {"rates": args.rates, "relay": dict(relay), "faults_by_message": dict(faults.most_common())}
        if args.network
        else None,
        "owner_rss_kib": {"after_each_block": rss_after, "during_each_block": rss_during},
        "failures": failures,
    }


# -- the report ---------------------------------------------------------------------------------------


def memory_line(rss: dict[str, Any]) -> str:
    """The owner's memory after each block (MiB): the series, then first, last and max."""
    after = [kib / 1024 for kib in rss["after_each_block"]]
    during = [kib / 1024 for block in rss["during_each_block"] for kib in block]
    line = (
        f"owner RSS after gc, MiB: before the first block {after[0]:.1f}, after each block "
        f"{', '.join(f'{m:.1f}' for m in after[1:])}; "
        f"first {after[1]:.1f}, last {after[-1]:.1f}, max {max(after[1:]):.1f}"
        if len(after) > 1
        else "owner RSS: no block ran"
    )
    if during:
        line += f"; while a Runtime ran (every {MEMORY_EVERY} scenarios) min {min(during):.1f}, max {max(during):.1f}"
    return line


def weights_line(weights: dict[str, float]) -> str:
    total = sum(weights.values())
    return ", ".join(f"{k} {v / total:.0%}" for k, v in weights.items())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000, help="seeded scenarios to run")
    parser.add_argument("--seed", type=int, default=1, help="the first seed")
    parser.add_argument("--per-runtime", type=int, default=100, help="scenarios per Runtime before a fresh one")
    parser.add_argument("--kill-owner", type=int, default=0, help="owners to SIGKILL mid-turn on a durable store")
    parser.add_argument("--no-kills", action="store_true", help="no scenario kills a TurnHost or a tool process")
    parser.add_argument("--network", action="store_true", help="every connection through a relay drawing faults")
    parser.add_argument("--store-faults", action="store_true", help="durable turns on a PostgreSQL that fails")
    parser.add_argument(
        "--rates",
        type=parse_rates,
        default=DEFAULT_RATES,
        help="with --network, faults per frame: " + ",".join(f"{k}={v:g}" for k, v in DEFAULT_RATES.items()),
    )
    args = parser.parse_args()
    if args.network and (why := available()) is not None:
        parser.error(f"--network: {why}")
    command = "python bench/soak.py " + " ".join(sys.argv[1:])
    results: dict[str, Any] = {"command": command, "args": dict(vars(args))}
    if args.n:
        with contextlib.ExitStack() as faulty:
            args.faulty_store = faulty.enter_context(store_faults(args.seed)) if args.store_faults else None
            part = scenarios_part(args)
            if args.store_faults:
                part["store_faults"] = dict(args.faulty_store[2].counts)
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
            ["callers left waiting", counts.get(WAITING, 0)],
            [STORE_ENDED, counts.get(STORE_ENDED, 0)],
            [f"  {WAITING} at a block's end", len(part["waiting_at_block_end"])],
            ["other violations", counts.get("other violations", 0)],
            ["Runtime starts that failed (the block run again)", len(part["start_failures"])],
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
        for left in part["left_after_close"] + part["waiting_at_block_end"]:
            print("left after close:", left)
        for failed in part["start_failures"]:
            print("did not start:", failed)
        if part["network"] is not None:
            net = part["network"]
            print("network faults per frame:", ", ".join(f"{k} {v:.2%}" for k, v in net["rates"].items()))
            print("relay:", relay_line(net["relay"]))
            print("faults by message:", ", ".join(f"{k} {n}" for k, n in net["faults_by_message"].items()))
        if "store_faults" in part:
            print("store faults:", ", ".join(f"{k} {n}" for k, n in sorted(part["store_faults"].items())))
        print(memory_line(part["owner_rss_kib"]))
    if args.kill_owner:
        part = owners_part(args.seed, args.kill_owner)
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
