"""Issue 35 across nodes: a supervisor actor on one member sends new input to, pauses and
resumes a durable turn that runs on another member (``tests.cluster_harness``: nodes in
network namespaces on one bridge, PostgreSQL as the store every node reaches)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.testing import say
from actors.testing.netns import available
from actors.testing.postgres import binaries

from .cluster_harness import Cluster, leftovers
from .test_cluster_turns import boot, merged

pytestmark = [
    pytest.mark.integration,
    pytest.mark.postgres,
    pytest.mark.skipif(available() is not None, reason=str(available())),
    pytest.mark.skipif(binaries() is None, reason="PostgreSQL is not installed (initdb, pg_ctl)"),
]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(3, tmp_path) as c:
        yield c
    assert leftovers(c) == []


def test_a_supervisor_on_one_member_sends_input_to_pauses_and_resumes_a_turn_on_another(cluster: Cluster) -> None:
    boot(cluster, [1, 2])
    cluster.scripts.add(
        "write",
        say("Writing a very long text for you", hold_after=2, hold=threading.Event()),  # round 0
        say("Short version, and then some", hold_after=2, hold=threading.Event()),  # round 1, after the input
        say("Done."),  # round 2, after the resume
    )
    cluster.ask(op="run", turn_id="t_steer", prompt="write", requires={"name": "m2"})
    cluster.ask(op="wait_event", turn_id="t_steer", kind="text_delta")
    assert cluster.node_of(cluster.ask(op="host", turn_id="t_steer")["host"]) == 2
    sent = cluster.supervise(1, "input", "t_steer", "make it short", "now")
    assert (sent["ok"], sent["message"]) == (True, "accepted: it enters before the next model call")
    cluster.ask(op="wait_event", turn_id="t_steer", kind="input_accepted")
    paused = cluster.supervise(1, "pause", "t_steer", "now")
    assert paused["ok"], paused
    finish = cluster.ask(op="wait_event", turn_id="t_steer", kind="finish")["event"]
    assert finish[1:] == ["finish", "paused"], cluster.ask(op="events", turn_id="t_steer")
    resumed = cluster.supervise(1, "resume", "t_steer")
    assert resumed["ok"], resumed
    result = cluster.ask(op="result", turn_id="t_steer")
    assert result["finish_reason"] == "stop"
    roles = [m["role"] for m in result["messages"]]
    assert roles[:3] == ["user", "assistant", "user"] and roles[-1] == "assistant"
    assert result["messages"][2]["content"] == "make it short" and result["messages"][-1]["content"] == "Done."
    kinds = [e[0] for e in merged(result["events"])]
    assert kinds.count("input_accepted") == 1 and kinds[-1] == "finish"
    assert cluster.scripts.asked[("write", 0)] == cluster.scripts.asked[("write", 1)] == 1
