"""Issue 32, item 4: a node that drains, with real nodes in network namespaces
(``tests.cluster_harness``) on one PostgreSQL store.

SIGTERM on ``greenroom node``: it leaves placement, lets the calls under way finish where
they started, hands each durable turn on at its next step (the heir claims it one epoch
up), and exits 0; callers follow each turn with no gap and no duplicate.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.store.ownership import DRAINED
from actors.testing import call, say, use_tools
from actors.testing.netns import available
from actors.testing.postgres import binaries

from .cluster_harness import Cluster, leftovers
from .test_cluster_turns import live_nodes, merged, netns, polled, stored

ROOT = Path(__file__).resolve().parents[1]
NETNS = pytest.mark.skipif(available() is not None, reason=str(available()))
POSTGRES = pytest.mark.skipif(binaries() is None, reason="PostgreSQL is not installed (initdb, pg_ctl)")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(3, tmp_path) as c:
        yield c
    assert leftovers(c) == []


@pytest.fixture
def storeless(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(2, tmp_path, store=False) as c:
        yield c
    assert leftovers(c) == []


def start_wide_member(c: Cluster, i: int) -> None:
    """Member ``i`` with one host and room for 24 calls at once (``member`` and ``name=m<i>``)."""
    caps = {"name": f"m{i}", "member": True}
    c.start_member(i, "--max-tool-processes", "24", hosts=1, store=True, tool_processes=1, capabilities=caps)
    c.ask(op="wait_node", caps={"name": f"m{i}"}, timeout=60)


@pytest.mark.integration
@NETNS
@POSTGRES
@pytest.mark.timeout(400)
def test_a_node_drained_with_twenty_durable_turns_in_calls_hands_each_on_and_no_call_runs_twice(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.start_leader(hosts=1, store=True)  # the leader's host is no ``member``: it takes none of them
    start_wide_member(cluster, 1)
    turns = [f"t_drain{i}" for i in range(20)]
    for turn_id in turns:
        marker = str(tmp_path / turn_id)
        cluster.scripts.add(turn_id, use_tools(call("side_effect", {"path": marker})), say("finished elsewhere"))
        cluster.ask(op="run", turn_id=turn_id, prompt=turn_id, tools=["side_effect"], requires={"member": True})
    for turn_id in turns:  # each in its call, on m1
        assert cluster.ask(op="wait_progress", turn_id=turn_id, timeout=120)["data"]["netns"] == netns(cluster, 1)
    before = {t: cluster.store().owners.route(t) for t in turns}
    assert {cluster.node_of(r.host_id or "") for r in before.values() if r is not None} == {1}
    start_wide_member(cluster, 2)
    assert polled(lambda: live_nodes(cluster) == {0, 1, 2}, timeout=60)

    node = cluster.nodes[1].proc
    assert node is not None
    node.send_signal(signal.SIGTERM)
    store = cluster.store()
    assert polled(lambda: any(h.draining for h in store.hosts.live() if cluster.node_of(h.host_id) == 1), 30)
    assert cluster.ask(op="placeable", caps={"member": True})["hosts"] == [f"{cluster.nodes[2].name}/0"]
    for turn_id in turns:  # the calls end where they started, now
        (tmp_path / f"{turn_id}.release").touch()
    assert node.wait(120) == 0
    for turn_id in turns:
        result = cluster.ask(op="result", turn_id=turn_id, timeout=120)
        assert merged(result["events"]) == [
            ["turn_started"],
            ["tool_call_started", "call_1"],
            ["tool_progress", "call_1"],
            ["tool_finished", "call_1", "success"],
            ["text", "finished elsewhere"],
            ["finish", "stop"],
        ], turn_id
        assert [e[0] for e in result["events"]] == list(range(len(result["events"])))  # no gap, no duplicate
        assert '"released"' in result["messages"][2]["content"]  # its result, kept
        assert (tmp_path / turn_id).read_text().splitlines() == [f"{turn_id}:0:call_1"]  # run once
        assert not (tmp_path / f"{turn_id}.stopped").exists()  # never interrupted
        route, was = store.owners.route(turn_id), before[turn_id]
        assert route is not None and was is not None
        assert (cluster.node_of(route.host_id or ""), route.epoch) == (2, was.epoch + 1)  # handed on: one claim
        assert stored(cluster, turn_id) == result["events"]


@pytest.mark.integration
@NETNS
@POSTGRES
@pytest.mark.timeout(300)
def test_a_turn_waiting_for_approval_on_a_node_that_drains_is_handed_on_at_once_and_approved_where_it_went(
    cluster: Cluster,
) -> None:
    cluster.start_leader(hosts=1, store=True)
    start_wide_member(cluster, 1)
    cluster.scripts.add("t_wait", use_tools(call("delete_file", {"path": "/nonexistent"})), say("approved elsewhere"))
    cluster.ask(op="run", turn_id="t_wait", prompt="t_wait", tools=["delete_file"], requires={"member": True})
    cluster.ask(op="wait_event", turn_id="t_wait", kind="tool_approval_request", timeout=120)
    was = cluster.store().owners.route("t_wait")
    assert was is not None and cluster.node_of(was.host_id or "") == 1
    start_wide_member(cluster, 2)
    assert polled(lambda: live_nodes(cluster) == {0, 1, 2}, timeout=60)
    node = cluster.nodes[1].proc
    assert node is not None
    node.send_signal(signal.SIGTERM)
    assert node.wait(60) == 0  # nothing in flight: handed on at once

    def moved() -> bool:
        route = cluster.store().owners.route("t_wait")
        return route is not None and route.host_id is not None and cluster.node_of(route.host_id) == 2

    assert polled(moved, timeout=30)
    route = cluster.store().owners.route("t_wait")
    assert route is not None and (route.status, route.epoch) == ("awaiting_approval", was.epoch + 1)
    cluster.ask(op="approve", turn_id="t_wait", call_id="call_1")
    result = cluster.ask(op="result", turn_id="t_wait", timeout=120)
    assert merged(result["events"])[-4:] == [
        ["tool_call_started", "call_1"],
        ["tool_finished", "call_1", "failed"],
        ["text", "approved elsewhere"],
        ["finish", "stop"],
    ]
    assert [e[0] for e in result["events"]] == list(range(len(result["events"])))  # no gap, no duplicate
    assert stored(cluster, "t_wait") == result["events"]


@pytest.mark.integration
@NETNS
@pytest.mark.timeout(300)
def test_a_turn_that_is_not_durable_still_in_its_call_at_the_drains_bound_ends_saying_the_node_drained(
    storeless: Cluster, tmp_path: Path
) -> None:
    c = storeless
    c.start_leader(hosts=1, store=False)
    caps = {"name": "m1", "member": True}
    c.start_member(1, "--drain-within", "1", hosts=1, store=False, tool_processes=1, capabilities=caps)
    c.ask(op="wait_node", caps={"name": "m1"}, timeout=60)
    marker = str(tmp_path / "t_bound")
    c.scripts.add("t_bound", use_tools(call("side_effect", {"path": marker})), say("never"))
    c.ask(op="run", turn_id="t_bound", prompt="t_bound", tools=["side_effect"], requires={"member": True})
    assert c.ask(op="wait_progress", turn_id="t_bound", timeout=120)["data"]["netns"] == netns(c, 1)
    node = c.nodes[1].proc
    assert node is not None
    node.send_signal(signal.SIGTERM)  # its call never returns by itself: the bound ends it
    assert node.wait(60) == 0
    result = c.ask(op="result", turn_id="t_bound", timeout=60)
    assert result["finish_reason"] == "stopped"
    assert merged(result["events"]) == [
        ["turn_started"],
        ["tool_call_started", "call_1"],
        ["tool_progress", "call_1"],
        ["tool_finished", "call_1", "success"],  # its on_stop let it return: "stopped"
        ["error", "stopped", "Agent run stopped"],
        ["finish", "stopped"],
    ]
    assert c.ask(op="errors", turn_id="t_bound")["errors"] == [["stopped", "Agent run stopped", DRAINED]]
    assert Path(marker + ".stopped").read_text().splitlines() == ["t_bound:0:call_1"]  # stopped, once


@pytest.mark.parametrize("value", ["-1", "-0.5", "nan", "soon"])
def test_greenroom_node_refuses_a_drain_bound_that_is_not_a_number_of_seconds(value: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "actors.cluster.node", "--leader", "127.0.0.1:1900", "--listen", "127.0.0.1",
         "--drain-within", value],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == (
        f"greenroom node: error: argument --drain-within: must be a number of seconds >= 0, not '{value}'"
    )
