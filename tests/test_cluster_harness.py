"""The multi-node harness itself (``tests.cluster_harness``), with the nodes of today: a leader
that hosts the turns and members that lend tool processes.

Each test builds a cluster of network namespaces on a bridge, PostgreSQL on the bridge's
address, the scripted provider beside it, and proves after the end, by scanning ``/proc``
and the links, that nothing of it is left.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.testing import Request, call, say, use_tools
from actors.testing.netns import available
from actors.testing.postgres import binaries

from .cluster_harness import PORT, Cluster, Scripts, leftovers
from .conftest import group_members
from .helpers import wait_until

needs_netns = pytest.mark.skipif(available() is not None, reason=str(available()))
needs_postgres = pytest.mark.skipif(binaries() is None, reason="PostgreSQL is not installed (initdb, pg_ctl)")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three nodes: the leader, and two members that only lend tool processes (``sandbox``, ``--hosts 0``)."""
    with Cluster(3, tmp_path) as c:
        c.start_leader(hosts=1, store=False)
        for i in c.members:
            c.start_member(i, hosts=0, capabilities={"sandbox": True, "name": f"m{i}"})
            c.ask(op="wait_node", caps={"name": f"m{i}"})
        yield c
    assert leftovers(c) == []


def running(pid: int) -> bool:
    """Not exited (a zombie has exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def request(*messages: dict[str, str]) -> Request:
    return Request(api="openai", path="/v1/chat/completions", headers={}, body={"messages": list(messages)})


def test_the_scripts_answer_by_prompt_and_round_and_refuse_what_was_not_scripted() -> None:
    scripts = Scripts()
    first, second = use_tools(call("add", {"a": 1, "b": 2})), say("three")
    scripts.add("sum", first, lambda r: second)
    user, assistant = {"role": "user", "content": "sum"}, {"role": "assistant", "content": ""}
    assert scripts(request(user)) is first
    assert scripts(request({"role": "system", "content": "be brief"}, user, assistant, {"role": "tool"})) is second
    refused = scripts(request(user, assistant, assistant))
    assert (refused.status, refused.error) == (400, "no reply scripted for round 2 of 'sum'")
    assert scripts(request({"role": "user", "content": "other"})).error == "no reply scripted for round 0 of 'other'"
    assert scripts.asked == {("sum", 0): 1, ("sum", 1): 1, ("sum", 2): 1, ("other", 0): 1}


@pytest.mark.integration
@needs_netns
@needs_postgres
def test_every_node_reaches_the_shared_servers_and_a_placed_tool_runs_on_its_member(cluster: Cluster) -> None:
    assert [n.announced["node"] for n in cluster.nodes[1:]] == [n.name for n in cluster.nodes[1:]]
    nodes = cluster.ask(op="nodes")["nodes"]
    assert [n["node"] for n in nodes] == [n.name for n in cluster.nodes]  # the leader first, then its members
    for node in cluster.nodes:  # the store, from every namespace
        url = cluster.store_url
        code = f"import psycopg; print(psycopg.connect({url!r}).execute('select 1').fetchone()[0])"
        done = cluster.run_in(node.index, ["-c", code])
        assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    cluster.scripts.add("where?", use_tools(call("where_am_i", {})), say("there"))
    cluster.ask(op="run", turn_id="t_where", prompt="where?", tools=["where_am_i"])
    result = cluster.ask(op="result", turn_id="t_where")
    assert result["finish_reason"] == "stop"
    netns = json.loads(result["messages"][2]["content"])["data"]["netns"]
    members = {f"net:[{i}]" for i in cluster.inodes} - {cluster.leader.announced["netns"]}
    assert netns in members
    assert [e[1:] for e in result["events"]] == [
        ["turn_started"],
        ["tool_call_started", "call_1"],
        ["tool_finished", "call_1", "success"],
        ["text", "there"],
        ["finish", "stop"],
    ]
    assert [e[0] for e in result["events"]] == [0, 1, 2, 3, 4]
    assert cluster.scripts.asked == {("where?", 0): 1, ("where?", 1): 1}


@pytest.mark.integration
@needs_netns
@needs_postgres
def test_a_supervisor_on_a_member_stops_a_turn_by_id_through_its_own_directory(cluster: Cluster, tmp_path: Path) -> None:
    marker = tmp_path / "stopped"
    cluster.scripts.add("build", use_tools(call("shell", {"command": "sleep 300", "marker": str(marker)})))
    cluster.ask(op="run", turn_id="t_sup", prompt="build", tools=["shell"])
    pgid = cluster.ask(op="wait_progress", turn_id="t_sup")["data"]["pgid"]
    answer = cluster.supervise(2, "stop", "t_sup", "over budget")
    assert answer["ok"] is True
    member = f"net:[{os.stat(f'/run/netns/{cluster.nodes[2].ns.name}').st_ino}]"
    assert answer["where"]["netns"] == member  # the supervisor ran on node 2
    assert answer["where"]["pid"] not in cluster.nodes[2].ns.processes()  # and has left
    result = cluster.ask(op="result", turn_id="t_sup")
    assert result["finish_reason"] == "stopped"
    assert [e[1:] for e in result["events"]] == [
        ["turn_started"],
        ["tool_call_started", "call_1"],
        ["tool_progress", "call_1"],
        ["tool_finished", "call_1", "interrupted"],
        ["error", "stopped", "Agent run stopped"],
        ["finish", "stopped"],
    ]
    assert wait_until(lambda: group_members(pgid) == [])
    assert marker.read_text() == "stopped\n"


@pytest.mark.integration
@needs_netns
@needs_postgres
def test_a_killed_node_is_gone_with_all_its_processes_and_the_leader_sees_it_leave(cluster: Cluster) -> None:
    victim = cluster.nodes[1]
    pids = victim.ns.processes()
    assert victim.proc is not None and victim.proc.pid in pids
    cluster.kill(1)
    assert [pid for pid in pids if running(pid)] == []  # dead; PID 1 reaps the orphans
    assert victim.proc.returncode == -9
    assert not Path(f"/run/netns/{victim.ns.name}").exists()
    assert wait_until(lambda: [victim.name, False] in cluster.ask(op="membership")["membership"], timeout=30)
    assert [n["node"] for n in cluster.ask(op="nodes")["nodes"]] == [cluster.nodes[0].name, cluster.nodes[2].name]


@pytest.mark.integration
@needs_netns
@needs_postgres
def test_a_partitioned_node_answers_nothing_until_healed(cluster: Cluster) -> None:
    node = cluster.nodes[1]
    with socket.create_connection((node.address, PORT), timeout=30):
        pass
    cluster.partition(1)
    with pytest.raises(TimeoutError):  # dropped, not refused: nothing at all comes back
        socket.create_connection((node.address, PORT), timeout=1)
    code = f"import socket; socket.create_connection(({cluster.bridge.address!r}, {cluster.pg.port}), 1)"  # type: ignore[union-attr]
    out = cluster.run_in(1, ["-c", code])
    assert out.returncode == 1 and out.stderr.strip().endswith("TimeoutError: timed out")
    assert node.proc is not None and node.proc.poll() is None  # alive, only cut off
    cluster.heal(1)
    with socket.create_connection((node.address, PORT), timeout=30):
        pass
    assert cluster.run_in(1, ["-c", code]).returncode == 0


@pytest.mark.integration
@needs_netns
@needs_postgres
def test_the_leader_killed_and_started_again_in_its_namespace(cluster: Cluster) -> None:
    first = cluster.leader.announced
    cluster.kill(0, keep=True)
    assert cluster.leader.ns.processes() == []
    assert all(n.proc is not None and n.proc.poll() is None for n in cluster.nodes[1:])  # the members go on
    again = cluster.start_leader(hosts=1, store=False)
    assert again["netns"] == first["netns"] and again["pid"] != first["pid"]
    cluster.scripts.add("hello", say("hi"))
    cluster.ask(op="run", turn_id="t_again", prompt="hello")
    assert cluster.ask(op="result", turn_id="t_again")["finish_reason"] == "stop"


@pytest.mark.integration
@needs_netns
def test_leftovers_names_what_is_still_there(tmp_path: Path) -> None:
    with Cluster(2, tmp_path, store=False) as c:
        stray = c.nodes[1].ns.popen(["sleep", "300"], env=c.env())
        # Until `ip netns exec` has become `sleep`, the process is in the namespace but its
        # environment reads empty for a moment (the exec replaces its memory): wait for sleep.
        assert wait_until(lambda: Path(f"/proc/{stray.pid}/cmdline").read_bytes().startswith(b"sleep\0"), 30)
        inside = leftovers(c)
        assert f"process {stray.pid} tagged {c.tag}" in inside
        assert f"process {stray.pid} in a namespace of the cluster" in inside
        assert {f"namespace {n.ns.name}" for n in c.nodes} <= set(inside)
        assert f"bridge {c.bridge.name}" in inside  # type: ignore[union-attr]
    assert stray.wait(10) == -9
    assert leftovers(c) == []


@pytest.mark.integration
@needs_netns
def test_a_cluster_that_fails_to_start_a_node_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="node 1 did not start"):
        with Cluster(2, tmp_path, store=False) as c:
            c.start_member(1, "--no-such-option", timeout=60)
    assert "unrecognized arguments: --no-such-option" in c.log_tail(1)
    assert leftovers(c) == []
