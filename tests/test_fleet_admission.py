"""Issue 32: admission across real nodes. A member node in a network namespace of its own
(``greenroom node --max-running 50 --max-queued 500``) takes 2,000 turns started at once by
the leader: 50 run, 500 queue, the other 1,450 are refused at once with ``Overloaded``; the
queued ones start by priority, then tenants in turn (round-robin), so a tenant with 5 turns
is not starved by one with 1,000.

The order is read at the provider (in this process): every turn's reply is held until the
test lets it go, so one turn ended frees exactly one slot and exactly one queued turn starts,
whose request is the next the provider sees.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from actors.testing import say
from actors.testing.netns import available

from .cluster_harness import Cluster, leftovers
from .test_start_answer import frames

pytestmark = [
    pytest.mark.integration,
    pytest.mark.heavy,
    pytest.mark.timeout(400),
    pytest.mark.skipif(available() is not None, reason=str(available())),
]

RUNNING, QUEUED = 50, 500


def _prompt_of(request: object) -> str:
    return next(m["content"] for m in request.messages if m["role"] == "user")  # type: ignore[attr-defined]


def test_two_thousand_turns_at_once_fifty_run_five_hundred_queue_by_priority_and_tenant_the_rest_refused(
    tmp_path: Path,
) -> None:
    fill = [[f"fill{n}", "fill", 0] for n in range(RUNNING)]  # take every slot
    big = [[f"big{n}", "big", 0] for n in range(1_000)]
    small = [[f"small{n}", "small", 0] for n in range(5)]
    urgent = [["urgent", "big", 5]]
    # queued: big 0-299, then small's 5, then urgent, then big 300-493; refused: big 494-999 and the rest
    more = [[f"more{n}", "big", 0] for n in range(2_000 - RUNNING - 1_000 - 5 - 1)]
    turns = fill + big[:300] + small + urgent + big[300:] + more
    assert len(turns) == 2_000
    gates = {prompt: threading.Event() for prompt, _, _ in turns}
    with Cluster(2, tmp_path, store=False) as c:
        for prompt, _, _ in turns:
            c.scripts.add(prompt, say(f"done {prompt}").but(hold=gates[prompt], hold_after=1))
        c.start_leader(hosts=1, store=False)
        caps = {"name": "m1"}
        c.start_member(1, "--max-running", str(RUNNING), "--max-queued", str(QUEUED), hosts=1, capabilities=caps)
        c.ask(op="wait_node", caps=caps, timeout=60)
        provider = c.provider
        assert provider is not None

        out = c.ask(op="flood", turns=turns, requires=caps, timeout=300)
        accepted = [p for p, _, _ in turns if p not in set(out["refused"])]
        assert len(out["refused"]) == 2_000 - RUNNING - QUEUED
        assert out["refused"] == [p for p, _, _ in turns][RUNNING + QUEUED :]  # those that came last, each at once
        assert out["words"].startswith("host ") and out["words"].endswith(
            f"is full: {RUNNING} turns running (max_running={RUNNING}) and {QUEUED} queued "
            f"(max_queued={QUEUED}); try later, or run(..., wait=True)"
        )
        assert out["slowest"] < 5.0  # refused at once: one answer from the member, not a wait for room
        provider.wait_for_requests(RUNNING, timeout=120)
        assert sorted(out["statuses"].values()) == ["queued"] * QUEUED + ["running"] * RUNNING

        started: list[str] = []
        held = [_prompt_of(r) for r in provider.requests]
        assert sorted(held) == sorted(p for p, _, _ in fill)
        for n in range(QUEUED):  # one turn ends: one slot, one queued turn starts
            gates[held.pop(0)].set()
            request = provider.wait_for_requests(RUNNING + n + 1, timeout=60)[RUNNING + n]
            started.append(_prompt_of(request))
            held.append(started[-1])
        for gate in gates.values():
            gate.set()
        finishes = c.ask(op="finishes", prompts=accepted, timeout=120)
        assert set(finishes.values()) == {"stop"}

        round_robin = [p for pair in zip(big[:5], small) for p in (pair[0][0], pair[1][0])]
        assert started[:11] == ["urgent", *round_robin]  # the 5 small ones within the first 11
        assert started[11:] == [p for p, _, _ in big[5:494]]  # then big's, in the order they came
        assert len(provider.requests) == RUNNING + QUEUED  # a refused turn never reached the model
    assert leftovers(c) == []


def _answered_alone(c: Cluster, traces: Path, prompt: str, caps: dict[str, Any]) -> bool:
    """Run one turn onto the member: whether its start's answer crossed as a ``ControlReply``."""
    c.scripts.add(prompt, say(f"done {prompt}"))
    before = frames(traces)
    out = c.ask(op="flood", turns=[[prompt, "", 0]], requires=caps, timeout=60)
    assert out["refused"] == []
    assert c.ask(op="finishes", prompts=[prompt], timeout=60) == {prompt: "stop"}
    return (frames(traces) - before)["ControlReply"] > 0


def test_a_start_onto_a_member_is_answered_in_the_first_batch_of_its_events_to_the_leader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The member's host answers the leader's Runtime, its owner, as a node's own: the answer
    of each start rides ahead of its turn's first events, and no ``ControlReply`` crosses."""
    traces = tmp_path / "traces"
    traces.mkdir()
    monkeypatch.setenv("GREENROOM_TRACE_DIR", str(traces))  # in every process of both nodes
    prompts = [f"turn{n}" for n in range(3)]
    with Cluster(2, tmp_path, store=False) as c:
        for prompt in prompts:
            c.scripts.add(prompt, say(f"done {prompt}"))
        c.start_leader(hosts=1, store=False)
        caps = {"name": "m1"}
        c.start_member(1, hosts=1, capabilities=caps)
        c.ask(op="wait_node", caps=caps, timeout=60)
        # The member's host learns the leader's Runtime from its directory, which learns it from the
        # leader's, while the Runtime, told by the leader's directory too, may start a turn there at
        # once: a start that comes first is answered on its own. The host keeps what it learned, so
        # once one start is folded, every later one is.
        deadline, n = time.monotonic() + 60, 0
        while _answered_alone(c, traces, f"warm{n}", caps):
            assert time.monotonic() < deadline, f"{n + 1} starts onto the member in 60 s, each answered on its own"
            n += 1
        before = frames(traces)
        out = c.ask(op="flood", turns=[[p, "", 0] for p in prompts], requires=caps, timeout=60)
        assert (out["refused"], sorted(out["statuses"].values())) == ([], ["running"] * 3)
        assert set(c.ask(op="finishes", prompts=prompts, timeout=60).values()) == {"stop"}
        sent = frames(traces) - before
        assert (sent["StartTurn"], sent["ControlReply"]) == (3, 0), sent
    assert leftovers(c) == []
