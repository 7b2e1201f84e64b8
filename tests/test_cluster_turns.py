"""Issue 24: turns on every node of a cluster, in network namespaces on one bridge
(``tests.cluster_harness``), with PostgreSQL as the store every node reaches.

Node 0 is the leader (a Runtime on the store); the others run ``greenroom node --hosts 1
--store URL``. The provider runs in this process on the bridge, answering by prompt and
round, so a turn gets the same replies on whichever node it runs or resumes. Each test
proves at its end that nothing of the cluster is left (``leftovers``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.testing import call, say, use_tools
from actors.testing.netns import available
from actors.testing.postgres import binaries
from actors.store.ownership import host_of

from .cluster_harness import Cluster, leftovers
from .conftest import group_members
from .helpers import summary, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(available() is not None, reason=str(available())),
    pytest.mark.skipif(binaries() is None, reason="PostgreSQL is not installed (initdb, pg_ctl)"),
]

INTERRUPTED = json.dumps(
    {"ok": False, "error": "Interrupted: its host was lost while the call ran (another host took the turn over)", "data": None}
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(4, tmp_path) as c:
        yield c
    assert leftovers(c) == []


def boot(c: Cluster, members: list[int], store: bool = True, **capabilities: dict[str, Any]) -> None:
    """The leader with one host, then each member with one host and its capabilities
    (``name=m<i>`` and ``member`` always), each seen by the leader (and live in the store)."""
    c.start_leader(hosts=1, store=store)
    for i in members:
        start_member(c, i, store, capabilities.get(f"m{i}", {}))
    if store:
        assert polled(lambda: live_nodes(c) == {0, *members}, timeout=60), live_nodes(c)


def polled(predicate: Callable[[], bool], timeout: float) -> bool:
    """``wait_until`` for conditions read from the store or the leader: looked at 5 times a second."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)  # polling a database: no event to wait on
    return True


def start_member(c: Cluster, i: int, store: bool = True, capabilities: dict[str, Any] | None = None) -> None:
    """Member ``i`` started, joined, and its host in the leader's table (turns can go there)."""
    caps = {"name": f"m{i}", "member": True, **(capabilities or {})}
    c.start_member(i, hosts=1, store=store, tool_processes=1, capabilities=caps)
    c.ask(op="wait_node", caps={"name": f"m{i}"}, timeout=60)
    assert c.ask(op="placeable", caps={"name": f"m{i}"})["hosts"] == [f"{c.nodes[i].name}/0"]


def live_nodes(c: Cluster) -> set[int]:
    return {c.node_of(h.host_id) for h in c.store().hosts.live()}


def netns(c: Cluster, i: int) -> str:
    return f"net:[{Path(f'/run/netns/{c.nodes[i].ns.name}').stat().st_ino}]"


def merged(events: list[list[Any]]) -> list[list[Any]]:
    """Events without their seq, consecutive text deltas merged (their batching varies)."""
    out: list[list[Any]] = []
    for _, *event in events:
        if event[0] == "text" and out and out[-1][0] == "text":
            out[-1] = ["text", out[-1][1] + event[1]]
        else:
            out.append(event)
    return out


def stored(c: Cluster, turn_id: str) -> list[list[Any]]:
    """The turn's events in the store, as the leader gives them: ``[seq, kind, ...]``."""
    return [[e.seq, *summary([e])[0]] for e in c.store().log.events(turn_id)]


def provider_peers(c: Cluster) -> set[str]:
    """The addresses with a connection established to the provider (this namespace's TCP table)."""
    assert c.provider is not None
    port, peers = c.provider.port, set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if state == "01" and int(local.split(":")[1], 16) == port:
            raw = bytes.fromhex(remote.split(":")[0])[::-1]
            peers.add(".".join(str(b) for b in raw))
    return peers


def test_turns_are_placed_on_every_node_by_rendezvous_over_the_live_hosts_and_stream_from_there(
    cluster: Cluster,
) -> None:
    from actors.placement import rendezvous

    boot(cluster, [1, 2, 3])
    hosts = sorted(host_of(h.host_id) for h in cluster.store().hosts.live())
    assert len(hosts) == 4
    chosen: dict[str, str] = {}  # a turn id for each host: the first that rendezvous hashing sends there
    for n in range(1000):
        host = rendezvous(f"t_place{n}", hosts)
        assert host is not None
        chosen.setdefault(host, f"t_place{n}")
    held = threading.Event()
    for host, turn_id in chosen.items():
        cluster.scripts.add(turn_id, say(f"hello from {turn_id}").but(hold=held, hold_after=1))
        cluster.ask(op="run", turn_id=turn_id, prompt=turn_id)
    cluster.provider.wait_for_requests(4, timeout=60)  # type: ignore[union-attr]
    assert provider_peers(cluster) == {n.address for n in cluster.nodes}  # each stream from its turn's node
    held.set()
    for host, turn_id in chosen.items():
        result = cluster.ask(op="result", turn_id=turn_id)
        assert merged(result["events"]) == [["turn_started"], ["text", f"hello from {turn_id}"], ["finish", "stop"]]
        assert [e[0] for e in result["events"]] == list(range(len(result["events"])))
        assert cluster.ask(op="host", turn_id=turn_id)["host"] == host
        assert host_of(cluster.store().owners.route(turn_id).host_id) == host
    assert {cluster.node_of(h) for h in chosen} == {0, 1, 2, 3}


def test_a_supervisor_on_one_member_stops_a_turn_running_on_another(cluster: Cluster, tmp_path: Path) -> None:
    boot(cluster, [1, 2, 3])
    marker = tmp_path / "stopped"
    cluster.scripts.add("build", use_tools(call("shell", {"command": "sleep 300", "marker": str(marker)})))
    cluster.ask(op="run", turn_id="t_far", prompt="build", tools=["shell"], requires={"name": "m3"})
    pgid = cluster.ask(op="wait_progress", turn_id="t_far")["data"]["pgid"]
    assert cluster.node_of(cluster.ask(op="host", turn_id="t_far")["host"]) == 3
    assert wait_until(lambda: group_members(pgid) != [])
    assert set(group_members(pgid)) <= set(cluster.nodes[3].ns.processes())
    answer = cluster.supervise(1, "stop", "t_far", "over budget")
    assert (answer["ok"], answer["where"]["netns"]) == (True, netns(cluster, 1))
    result = cluster.ask(op="result", turn_id="t_far")
    assert merged(result["events"]) == [
        ["turn_started"],
        ["tool_call_started", "call_1"],
        ["tool_progress", "call_1"],
        ["tool_finished", "call_1", "interrupted"],
        ["error", "stopped", "Agent run stopped"],
        ["finish", "stopped"],
    ]
    assert wait_until(lambda: group_members(pgid) == [])
    assert marker.read_text() == "stopped\n"
    assert stored(cluster, "t_far") == result["events"]


@pytest.mark.heavy
@pytest.mark.timeout(400)
def test_a_node_killed_mid_turn_with_ten_durable_turns_each_resumed_elsewhere_no_call_twice(
    cluster: Cluster, tmp_path: Path
) -> None:
    boot(cluster, [1, 2], m2={"doomed": True})
    turns = [f"t_doomed{i}" for i in range(10)]
    for turn_id in turns:
        cluster.scripts.add(turn_id, use_tools(call("side_effect", {"path": str(tmp_path / turn_id)})), say("resumed"))
        cluster.ask(op="run", turn_id=turn_id, prompt=turn_id, tools=["side_effect"], requires={"doomed": True})
    for turn_id in turns:
        where = cluster.ask(op="wait_progress", turn_id=turn_id, timeout=120)["data"]["netns"]
        assert (where, cluster.node_of(cluster.ask(op="host", turn_id=turn_id)["host"])) == (netns(cluster, 2), 2)
    start_member(cluster, 3, capabilities={"doomed": True})  # somewhere for them to go that can run them
    assert polled(lambda: 3 in live_nodes(cluster), timeout=60)
    cluster.kill(2)
    for turn_id in turns:  # were any call run again, it would return at once and show
        (tmp_path / f"{turn_id}.release").touch()
    for turn_id in turns:
        result = cluster.ask(op="result", turn_id=turn_id, timeout=120)
        assert merged(result["events"]) == [
            ["turn_started"],
            ["tool_call_started", "call_1"],
            ["tool_progress", "call_1"],
            ["tool_finished", "call_1", "interrupted"],
            ["text", "resumed"],
            ["finish", "stop"],
        ], turn_id
        assert [e[0] for e in result["events"]] == list(range(len(result["events"])))  # no gap, no duplicate
        assert result["messages"][2]["content"] == INTERRUPTED
        assert (tmp_path / turn_id).read_text().splitlines() == [f"{turn_id}:0:call_1"]  # run once
        assert not (tmp_path / f"{turn_id}.stopped").exists()
        route = cluster.store().owners.route(turn_id)
        assert cluster.node_of(route.host_id) != 2 and route.epoch >= 2
        assert stored(cluster, turn_id) == result["events"]
        assert (cluster.scripts.asked[(turn_id, 0)], cluster.scripts.asked[(turn_id, 1)]) == (1, 1)


@pytest.mark.heavy
@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "heal",
    [
        "after_its_host_stopped",
        "once_taken_over",  # failed before the fix: back before the host found out, its call went on
    ],
)
def test_a_partitioned_host_is_fenced_its_call_stopped_and_it_never_writes_the_turn_again(
    cluster: Cluster, tmp_path: Path, heal: str
) -> None:
    boot(cluster, [1, 2])
    effect = tmp_path / "t_cut"
    cluster.scripts.add("t_cut", use_tools(call("side_effect", {"path": str(effect)})), say("resumed"))
    cluster.ask(op="run", turn_id="t_cut", prompt="t_cut", tools=["side_effect"], requires={"member": True})
    cluster.ask(op="wait_progress", turn_id="t_cut", timeout=60)
    first = cluster.ask(op="host", turn_id="t_cut")["host"]
    cut = cluster.node_of(first)
    assert cut in (1, 2)
    cluster.partition(cut)
    if heal == "once_taken_over":  # back as soon as another host has it: before the cut-off one may find out
        assert polled(lambda: host_of(cluster.store().owners.route("t_cut").host_id) != first, timeout=60)
        cluster.heal(cut)
    # its host finds out that it lost its lease (cut off from the store, or back) and stops the call
    stopped = Path(f"{effect}.stopped")
    assert wait_until(lambda: stopped.exists() and stopped.read_text().endswith("\n"), timeout=60)
    assert Path(f"{effect}.stopped").read_text() == "t_cut:0:call_1\n"
    result = cluster.ask(op="result", turn_id="t_cut", timeout=120)  # meanwhile a live host took it over
    if heal == "after_its_host_stopped":
        cluster.heal(cut)
    expected = [
        ["turn_started"],
        ["tool_call_started", "call_1"],
        ["tool_progress", "call_1"],
        ["tool_finished", "call_1", "interrupted"],
        ["text", "resumed"],
        ["finish", "stop"],
    ]
    assert merged(result["events"]) == expected
    assert [e[0] for e in result["events"]] == list(range(len(result["events"])))
    owner = cluster.store().owners.route("t_cut")
    assert cluster.node_of(owner.host_id) != cut
    effect.with_suffix(".release").touch()  # were the call still running there, it would return now
    assert polled(lambda: cut in live_nodes(cluster), timeout=60)  # back, with a lease again
    assert cluster.ask(op="placeable", caps={"name": f"m{cut}"})["hosts"] == [f"{cluster.nodes[cut].name}/0"]
    cluster.scripts.add("t_back", say("back"))  # and running turns: its host has handled what came meanwhile
    cluster.ask(op="run", turn_id="t_back", prompt="t_back", requires={"name": f"m{cut}"})
    assert merged(cluster.ask(op="result", turn_id="t_back")["events"])[-1] == ["finish", "stop"]
    assert stored(cluster, "t_cut") == result["events"]  # nothing written by the fenced host
    assert cluster.store().owners.route("t_cut") == owner
    assert effect.read_text().splitlines() == ["t_cut:0:call_1"]
    assert (cluster.scripts.asked[("t_cut", 0)], cluster.scripts.asked[("t_cut", 1)]) == (1, 1)


@pytest.mark.heavy
@pytest.mark.timeout(400)
def test_a_host_cut_off_from_the_database_alone_stops_its_call_before_another_host_may_claim_the_turn(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Issue 30: only the host's route to PostgreSQL is cut; it still reaches the leader and
    the provider. Its call has ended (its on_stop ran, its code returned) before the other
    host's claim, whose time is the database's own."""
    boot(cluster, [1, 2])
    effect = tmp_path / "t_db"
    cluster.scripts.add("t_db", use_tools(call("side_effect_timed", {"path": str(effect)})), say("resumed"))
    cluster.ask(op="run", turn_id="t_db", prompt="t_db", tools=["side_effect_timed"], requires={"member": True})
    cluster.ask(op="wait_progress", turn_id="t_db", timeout=60)
    first = cluster.ask(op="host", turn_id="t_db")["host"]
    cut = cluster.node_of(first)
    cluster.cut_store(cut)
    result = cluster.ask(op="result", turn_id="t_db", timeout=120)  # a host of the other member took it over
    route = cluster.store().owners.route("t_db")
    assert cluster.node_of(route.host_id) != cut
    (_, started), (_, stopped), (_, ended) = (line.split() for f in ("", ".stopped", ".ended")
                                              for line in Path(f"{effect}{f}").read_text().splitlines())
    assert float(started) < float(stopped) <= float(ended) < route.claimed_at, (started, stopped, ended, route)
    assert merged(result["events"]) == [
        ["turn_started"],
        ["tool_call_started", "call_1"],
        ["tool_progress", "call_1"],
        ["tool_finished", "call_1", "interrupted"],
        ["text", "resumed"],
        ["finish", "stop"],
    ]
    assert [e[0] for e in result["events"]] == list(range(len(result["events"])))
    cluster.heal(cut)
    assert stored(cluster, "t_db") == result["events"]  # nothing written by the cut-off host
    assert len(effect.read_text().splitlines()) == 1  # the call ran once


@pytest.mark.heavy
@pytest.mark.timeout(400)
def test_with_the_leader_killed_turns_on_members_go_on_the_cli_reaches_them_and_members_rejoin_a_new_leader(
    cluster: Cluster, tmp_path: Path
) -> None:
    boot(cluster, [1, 2])
    held, later_held, marker = threading.Event(), threading.Event(), tmp_path / "stopped"
    cluster.scripts.add("t_on", say("still here").but(hold=held, hold_after=1))
    cluster.scripts.add("t_wait", use_tools(call("delete_file", {"path": "/nonexistent"})), say("done"))
    cluster.scripts.add("t_halt", use_tools(call("shell", {"command": "sleep 300", "marker": str(marker)})))
    cluster.scripts.add("t_later", say("attached").but(hold=later_held, hold_after=1))
    cluster.ask(op="run", turn_id="t_on", prompt="t_on", requires={"name": "m1"})
    cluster.ask(op="run", turn_id="t_wait", prompt="t_wait", tools=["delete_file"], requires={"name": "m2"})
    cluster.ask(op="run", turn_id="t_halt", prompt="t_halt", tools=["shell"], requires={"name": "m1"})
    cluster.ask(op="run", turn_id="t_later", prompt="t_later", requires={"name": "m2"})
    cluster.ask(op="wait_event", turn_id="t_wait", kind="tool_approval_request")
    pgid = cluster.ask(op="wait_progress", turn_id="t_halt")["data"]["pgid"]
    cluster.provider.wait_for_requests(4, timeout=60)  # type: ignore[union-attr]
    cluster.kill(0, keep=True)
    held.set()  # the stream goes on with no leader
    assert polled(lambda: cluster.store().owners.route("t_on").status == "finished", timeout=60)
    assert merged(stored(cluster, "t_on")) == [["turn_started"], ["text", "still here"], ["finish", "stop"]]
    url = cluster.store_url
    assert url is not None
    approved = cluster.cli(1, "approve", "t_wait", "call_1", "--store", url, "--json")  # from a member: m1
    assert approved.returncode == 0, approved.stderr
    assert {k: json.loads(approved.stdout)[k] for k in ("turn_id", "ok")} == {"turn_id": "t_wait", "ok": True}
    assert polled(lambda: cluster.store().owners.route("t_wait").status == "finished", timeout=60)
    assert merged(stored(cluster, "t_wait"))[-4:] == [
        ["tool_call_started", "call_1"],
        ["tool_finished", "call_1", "failed"],
        ["text", "done"],
        ["finish", "stop"],
    ]
    shown = cluster.cli(2, "turns", "show", "t_wait", "--store", url, "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert (data["status"], data["finish_reason"]) == ("finished", "stop")
    assert data["events"] == [e.model_dump(mode="json") for e in cluster.store().log.events("t_wait")]
    halted = cluster.cli(2, "stop", "t_halt", "--store", url, "--reason", "no leader", "--json")
    assert halted.returncode == 0, halted.stderr
    assert polled(lambda: cluster.store().owners.route("t_halt").status == "finished", timeout=60)
    assert merged(stored(cluster, "t_halt"))[-3:] == [
        ["tool_finished", "call_1", "interrupted"],
        ["error", "stopped", "Agent run stopped"],
        ["finish", "stopped"],
    ]
    assert wait_until(lambda: group_members(pgid) == [])
    assert marker.read_text() == "stopped\n"
    cluster.start_leader(hosts=1)  # a new leader: the members join it again
    nodes = [cluster.nodes[0].name, cluster.nodes[1].name, cluster.nodes[2].name]  # the new leader, its members
    assert polled(lambda: [n["node"] for n in cluster.ask(op="nodes")["nodes"]] == nodes, timeout=60)
    cluster.ask(op="attach", turn_id="t_later")  # a turn still running on a member, found from the new leader
    later_held.set()
    later = cluster.ask(op="result", turn_id="t_later")
    assert merged(later["events"]) == [["turn_started"], ["text", "attached"], ["finish", "stop"]]
    assert [e[0] for e in later["events"]] == list(range(len(later["events"])))


def test_a_turn_without_a_store_on_a_lost_node_ends_host_lost_at_its_caller(tmp_path: Path) -> None:
    with Cluster(3, tmp_path, store=False) as c:
        boot(c, [1, 2], store=False)
        held = threading.Event()
        c.scripts.add("t_gone", say("never ends").but(hold=held, hold_after=1))
        c.ask(op="run", turn_id="t_gone", prompt="t_gone", requires={"name": "m2"})
        c.provider.wait_for_requests(1, timeout=60)  # type: ignore[union-attr]
        assert c.node_of(c.ask(op="host", turn_id="t_gone")["host"]) == 2
        c.kill(2)
        result = c.ask(op="result", turn_id="t_gone", timeout=60)
        held.set()
        events = merged(result["events"])
        assert events[0] == ["turn_started"] and events[-2:] == [["error", "host_lost", "Agent run lost"], ["finish", "error"]]
        assert [e[0] for e in result["events"]] == list(range(len(result["events"])))
    assert leftovers(c) == []
