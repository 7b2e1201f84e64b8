"""Issue 32, item 5: a turn's ``requires`` holds on takeover, with real nodes in network
namespaces (``tests.cluster_harness``) on one PostgreSQL store.

A ``gpu`` turn whose node is lost is taken over by no host without ``gpu``: it waits, and
``greenroom turns show`` says for what, until a node with ``gpu`` joins and takes it over.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.store.ownership import host_of
from actors.testing import call, say, use_tools
from actors.testing.netns import available
from actors.testing.postgres import binaries

from .cluster_harness import Cluster, leftovers
from .test_cluster_turns import boot, live_nodes, merged, netns, polled, start_member, stored

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(available() is not None, reason=str(available())),
    pytest.mark.skipif(binaries() is None, reason="PostgreSQL is not installed (initdb, pg_ctl)"),
]


RESTARTED = json.dumps(
    {
        "ok": False,
        "error": "Interrupted: the runtime stopped while the call ran (recovered after a restart)",
        "data": None,
    }
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(4, tmp_path) as c:
        yield c
    assert leftovers(c) == []


def shown(c: Cluster, turn_id: str) -> dict[str, object]:
    done = c.cli(0, "turns", "show", turn_id, "--store", c.store_url or "", "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.timeout(300)
def test_a_gpu_turn_whose_node_is_lost_waits_for_a_gpu_host_and_is_taken_over_by_the_first_that_comes(
    cluster: Cluster, tmp_path: Path
) -> None:
    boot(cluster, [1, 2], m1={"gpu": True})  # the leader and m2 have no gpu
    marker = str(tmp_path / "t_gpu")
    cluster.scripts.add("t_gpu", use_tools(call("side_effect", {"path": marker})), say("resumed on a gpu"))
    cluster.ask(op="run", turn_id="t_gpu", prompt="t_gpu", tools=["side_effect"], requires={"gpu": True})
    where = cluster.ask(op="wait_progress", turn_id="t_gpu", timeout=120)["data"]["netns"]
    assert where == netns(cluster, 1)
    lost = cluster.store().owners.route("t_gpu")
    assert lost is not None and cluster.node_of(lost.host_id or "") == 1

    cluster.kill(1)
    (tmp_path / "t_gpu.release").touch()  # were its call run again anywhere, it would return at once and show
    assert polled(lambda: shown(cluster, "t_gpu")["waiting_for_host"] is True, timeout=60), shown(cluster, "t_gpu")
    waiting = shown(cluster, "t_gpu")
    assert (waiting["status"], waiting["held"], waiting["requires"]) == ("tools", False, {"gpu": True})
    human = cluster.cli(0, "turns", "show", "t_gpu", "--store", cluster.store_url or "", timeout=60).stdout
    assert human.splitlines()[0] == (
        f"turn t_gpu: tools (no live host; waiting for a host with gpu=true; last held by host {host_of(lost.host_id or '')})"
    )
    # the live hosts (the leader's, m2's) renew and look for orphans every second: let each do so 3 times more
    store = cluster.store()
    seen = {h.host_id: h.lease_until for h in store.hosts.live()}
    assert {cluster.node_of(h) for h in seen} == {0, 2}
    assert polled(lambda: all(h.lease_until > seen.get(h.host_id, 0.0) + 3.0 for h in store.hosts.live()), timeout=30)
    still = store.owners.route("t_gpu")
    assert still is not None and (still.host_id, still.epoch) == (lost.host_id, lost.epoch)  # nobody took it

    start_member(cluster, 3, capabilities={"gpu": True})
    assert polled(lambda: 3 in live_nodes(cluster), timeout=60)
    result = cluster.ask(op="result", turn_id="t_gpu", timeout=120)
    assert merged(result["events"]) == [
        ["turn_started"],
        ["tool_call_started", "call_1"],
        ["tool_progress", "call_1"],
        ["tool_finished", "call_1", "interrupted"],
        ["text", "resumed on a gpu"],
        ["finish", "stop"],
    ]
    assert [e[0] for e in result["events"]] == list(range(len(result["events"])))  # no gap, no duplicate
    # m3 took it over as it started (its directory's recovery plan: the orphans it is the heir of)
    assert result["messages"][2]["content"] == RESTARTED
    assert Path(marker).read_text().splitlines() == ["t_gpu:0:call_1"]  # run once
    route = cluster.store().owners.route("t_gpu")
    assert route is not None and cluster.node_of(route.host_id or "") == 3 and route.epoch == lost.epoch + 1
    assert stored(cluster, "t_gpu") == result["events"]
    assert shown(cluster, "t_gpu")["waiting_for_host"] is False
