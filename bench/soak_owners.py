"""The soak's part two: an owner SIGKILLed mid-turn on a durable store, and its turn recovered.

``owners_part(seed, k)`` runs ``one_owner_kill`` K times: a child process (this module, run
with ``--owner-child``) owns a ``Runtime(store=...)``, brings a turn to a side-effecting tool
(or to a pause for approval), says so and is SIGKILLed there; a new Runtime on the same store
recovers the turn and drives it to its end. ``bench/soak.py --kill-owner K`` reports it.
"""

from __future__ import annotations

import json
import os
import random
import signal
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
from messages import Finish, ProviderConfig, RetryPolicy, ToolProgress, TurnOptions, whole_history
from tests import fault_tools as F
from tests.faults import FaultProvider
from tests.helpers import wait_until

__all__ = ["owners_part"]

OWNER_KINDS = ("tool", "tool_safely", "paused", "approved", "approved_running")
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


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
    """Attach to a recovered turn and drive it to its terminal Finish (with the whole history),
    approving what waits."""
    handle = rt.attach(turn_id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = None
        for event in handle.events(timeout=max(0.1, deadline - time.monotonic())):
            last = event
        if not isinstance(last, Finish):
            return None
        if last.terminal:  # a Finish carries the history's new part: the whole, from the events since 0
            return last.model_copy(update={"messages": whole_history(handle.all_events), "history_from": 0})
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


def owners_part(seed: int, k: int) -> dict[str, Any]:
    """K owners killed and recovered (see the module docstring), counted."""
    rng = random.Random(seed)
    records = []
    with tempfile.TemporaryDirectory(prefix="soak-owner-") as tmp, FaultProvider() as provider:
        for i in range(k):
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


if __name__ == "__main__":
    if sys.argv[1:2] != ["--owner-child"]:
        raise SystemExit("run by bench/soak.py --kill-owner K, not alone")
    owner_child(sys.argv[2:])
