"""Issue 34 across machines: what a newcomer runs on each machine of a cluster, in network
namespaces on one bridge (``tests.cluster_harness``), with PostgreSQL as the store.

- every ``greenroom`` command on any machine (a member's, one with no node at all) works or
  says in one line what is wrong, exit status 2, never a traceback; ``greenroom nodes``
  lists the leader beside the members;
- ``turns list``, ``turns show`` and the console say on which host and node each turn runs,
  and how many turns each node runs, before and after a node is lost.

Each test proves at its end that nothing of the cluster is left (``leftovers``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors.testing import call, say, use_tools
from actors.testing.netns import available
from actors.testing.postgres import binaries
from actors.placement import rendezvous
from actors.store.ownership import host_of

from .cluster_harness import PORT, ROOT, Cluster, _Lines, leftovers
from .test_cluster_turns import boot, polled, stored

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(available() is not None, reason=str(available())),
    pytest.mark.skipif(binaries() is None, reason="PostgreSQL is not installed (initdb, pg_ctl)"),
]

KEY = "a-console-key-of-this-test-" + secrets.token_hex(8)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(4, tmp_path) as c:
        yield c
    assert leftovers(c) == []


def one_line(done: Any) -> str:
    """The stderr of a command that failed as bad input must: exit status 2, one line, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.endswith("\n"), done.stderr
    return str(done.stderr.splitlines()[-1])


def test_greenroom_nodes_lists_the_leader_and_its_members_from_any_machine_and_bad_input_is_one_line(
    cluster: Cluster,
) -> None:
    c = cluster
    boot(c, [1])  # node 2 and node 3 run no node: machines on the network, nothing more
    leader, member = c.nodes[0].name, c.nodes[1].name
    expected = [
        {"node": leader, "capabilities": {}, "leader": True, "hosts": 1},
        {"node": member, "capabilities": {"name": "m1", "member": True}, "leader": False, "hosts": 1},
    ]
    assert [{k: v for k, v in n.items() if k != "kind"} for n in c.ask(op="nodes")["nodes"]] == expected
    for i in (0, 1, 2):  # the leader's machine, a member's, one with no node
        listed = c.cli(i, "nodes", "--admin", leader, "--json")
        assert (listed.returncode, listed.stderr) == (0, ""), listed.stderr
        assert json.loads(listed.stdout) == expected
    human = c.cli(2, "nodes", "--admin", member)  # a member's admin answers for the deployment too
    assert (human.returncode, human.stderr) == (0, "")
    assert human.stdout.splitlines() == [
        f"{'NODE':<{len(leader)}}  ROLE    HOSTS  CAPABILITIES",
        f"{leader}  leader      1  {{}}",
        f"{member}  member      1  {json.dumps(expected[1]['capabilities'])}",
    ]
    assert c.nodes[2].ns.processes() == []  # and nothing of it runs on after: no admin was started there
    nobody = f"{c.nodes[3].address}:{PORT}"
    assert one_line(c.cli(2, "nodes", "--admin", nobody)) == f"greenroom: nothing listens at {nobody} (connection refused)"
    wrong_key = subprocess.run(
        ["ip", "netns", "exec", c.nodes[2].ns.name, sys.executable, "-m", "actors.cli", "nodes", "--admin", leader,
         "--timeout", "3"],
        capture_output=True, text=True, cwd=ROOT, env={**c.env(), "GREENROOM_KEY": secrets.token_hex(32)}, timeout=60,
    )  # fmt: skip
    assert one_line(wrong_key) == (
        f"greenroom: the admin at {leader} did not answer within 3 s: another deployment key ($GREENROOM_KEY), "
        "not a greenroom runtime or node, or it cannot connect back to this machine"
    )
    assert c.nodes[2].ns.processes() == []
    elsewhere = c.cli(2, "node", "--leader", leader, "--listen", c.nodes[0].address, "--hosts", "0")
    assert one_line(elsewhere) == (
        f"greenroom node: --listen {c.nodes[0].address} is not an address of this machine (Cannot assign requested "
        "address): give the address of this machine that the other nodes reach"
    )
    taken = c.cli(1, "node", "--leader", leader, "--listen", c.nodes[1].address, "--hosts", "0")
    assert one_line(taken) == (
        f"greenroom node: {member} is in use (Address already in use): another node or runtime runs there, "
        "or give another --admin-port"
    )
    assert one_line(c.cli(2, "turns", "list", "--store", "/nonexistent.db")) == (
        "greenroom: no turn store at /nonexistent.db (use --store or $GREENROOM_STORE)"
    )
    stray = c.cli(2, "console", "--store", str(c.store_url), "--host", c.nodes[0].address, "--port", "0")
    assert one_line(stray).startswith(f"greenroom: the console cannot listen on {c.nodes[0].address}:0: ")
    assert c.nodes[2].ns.processes() == []


def turn_on_each(hosts: list[str]) -> dict[str, str]:
    """A turn id for each host: the first that rendezvous hashing sends there."""
    chosen: dict[str, str] = {}
    for n in range(1000):
        host = rendezvous(f"t_where{n}", hosts)
        assert host is not None
        chosen.setdefault(host, f"t_where{n}")
    return chosen


def console_listing(console: Any) -> dict[str, Any]:
    answer = httpx.get(f"http://127.0.0.1:{console.port}/api/turns", headers={"Authorization": f"Bearer {KEY}"})
    assert answer.status_code == 200
    data: dict[str, Any] = answer.json()
    return data


def where(data: dict[str, Any]) -> dict[str, tuple[str, str, bool]]:
    return {r["turn_id"]: (r["owner_host"], r["owner_node"], r["held"]) for r in data["turns"]}


@pytest.mark.heavy
@pytest.mark.timeout(400)
def test_turns_list_show_and_the_console_say_where_each_turn_runs_and_follow_a_lost_node(cluster: Cluster) -> None:
    from actors.console.server import Console

    c = cluster
    boot(c, [1, 2])
    url = c.store_url
    assert url is not None
    hosts = sorted(host_of(h.host_id) for h in c.store().hosts.live())
    chosen = turn_on_each(hosts)
    assert len(chosen) == 3
    for host, turn_id in chosen.items():
        c.scripts.add(turn_id, use_tools(call("delete_file", {"path": "/nonexistent"})), say(f"{turn_id} done"))
        c.ask(op="run", turn_id=turn_id, prompt=turn_id, tools=["delete_file"])
        c.ask(op="wait_event", turn_id=turn_id, kind="finish")  # paused, waiting for a decision
        assert c.ask(op="host", turn_id=turn_id)["host"] == host
    nodes = {n.name: n.index for n in c.nodes[:3]}
    rows = json.loads(c.cli(1, "turns", "list", "--store", url, "--json").stdout)
    assert {r["turn_id"]: (r["owner_host"], r["owner_node"], r["held"]) for r in rows} == {
        t: (h, h.split("/")[0], True) for h, t in chosen.items()
    }
    listed = c.cli(2, "turns", "list", "--store", url).stdout.splitlines()
    assert listed[-4:] == [f"{'NODE':<{len(c.nodes[0].name)}}  HOSTS  TURNS", *[f"{n}      1      1" for n in sorted(nodes)]]
    for host, turn_id in chosen.items():
        line = c.cli(2, "turns", "show", turn_id, "--store", url).stdout.splitlines()[0]
        assert line == f"turn {turn_id}: awaiting_approval, on host {host} (node {host.split('/')[0]})"
    console = Console(store=url, port=0, key=KEY).start()  # in this namespace: the bridge reaches the store
    try:
        data = console_listing(console)
        assert where(data) == {t: (h, h.split("/")[0], True) for h, t in chosen.items()}
        assert (data["nodes"], data["unheld"]) == ([{"node": n, "hosts": 1, "turns": 1} for n in sorted(nodes)], 0)
        assert data["where"].endswith("3 host(s) live")
        lost = next(h for h in chosen if c.node_of(h) == 2)
        moved = chosen[lost]
        c.kill(2)
        approved = c.cli(1, "approve", moved, "call_1", "--store", url, "--json")  # at once: its owner's lease holds
        assert (approved.returncode, approved.stderr) == (0, ""), approved.stderr
        assert json.loads(approved.stdout)["ok"] is True  # applied by the host that took it over, or queued for it
        assert polled(lambda: c.node_of(c.store().owners.route(moved).host_id) != 2, timeout=60)
        assert polled(lambda: stored(c, moved)[-1][1:] == ["finish", "stop"], timeout=60)
        started = [e for e in stored(c, moved) if e[1] == "tool_call_started"]
        assert len(started) == 1  # approved once, run once
        after = host_of(c.store().owners.route(moved).host_id)
        assert polled(lambda: console_listing(console)["where"].endswith("2 host(s) live"), timeout=30)
        data = console_listing(console)
        assert where(data)[moved] == (after, after.split("/")[0], None)  # finished, where it went on
        live = sorted(n for n, i in nodes.items() if i != 2)
        assert data["nodes"] == [
            {"node": n, "hosts": 1, "turns": sum(1 for h, t in chosen.items() if t != moved and h.startswith(n + "/"))}
            for n in live
        ]
        listed = c.cli(1, "turns", "list", "--store", url).stdout.splitlines()
        assert listed[-3:] == [f"{'NODE':<{len(live[0])}}  HOSTS  TURNS", *[f"{n}      1      1" for n in live]]
        line = c.cli(1, "turns", "show", moved, "--store", url).stdout.splitlines()[0]
        assert line == f"turn {moved}: finished (stop), ran on host {after} (node {after.split('/')[0]})"
    finally:
        console.close()


# -- the cluster page's walkthrough, as it is written ---------------------------------------------

WALKTHROUGH = "## Try it on two machines"
PAGE_URL = "postgresql://greenroom@10.0.0.9/greenroom"


def walkthrough() -> tuple[list[tuple[str, str]], str]:
    """The section's ``sh`` blocks as ``(who, code)`` (who: ``A``, ``B`` or ``A and B``, from
    each block's first line, ``# on ...``), and the command it ends with (in its text)."""
    text = (ROOT / "docs" / "cluster.md").read_text()
    section = text.split(WALKTHROUGH, 1)[1].split("\n## ", 1)[0]
    blocks = []
    for code in re.findall(r"^```sh\n(.*?)^```$", section, re.MULTILINE | re.DOTALL):
        who = re.match(r"# on (A and on B|A|B)\b", code)
        assert who is not None, f"a block of the walkthrough that does not say where it runs:\n{code}"
        blocks.append(("A and B" if who[1] == "A and on B" else who[1], code))
    end = re.search(r'`(kill "\$\(cat leader\.pid\)" "\$\(cat model\.pid\)")`', section)
    assert end is not None
    return blocks, end[1]


class Shell:
    """One person's shell on one machine: a bash in the node's namespace, fed commands, each
    answered with its output and exit status."""

    def __init__(self, c: Cluster, index: int, cwd: Path) -> None:
        node = c.nodes[index]
        env = {**c.env(), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # the venv, activated
        self.proc = node.ns.popen(
            ["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, cwd=cwd, env=env,
        )  # fmt: skip
        node.procs.append(self.proc)  # ended with the node's namespace, whatever happens
        assert self.proc.stdout is not None
        self.lines = _Lines(self.proc.stdout.fileno())

    def run(self, command: str, timeout: float = 120) -> tuple[int, str]:
        marker = f"__done_{secrets.token_hex(6)}__"
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{command}\necho {marker} $?\n".encode())
        self.proc.stdin.flush()
        out = []
        while (line := self.lines.readline(timeout)) is not None:
            if line.startswith(marker):
                return int(line.split()[1]), "\n".join(out)
            out.append(line)
        raise AssertionError(f"the shell ended during {command!r}:\n" + "\n".join(out))


def commands(code: str) -> list[str]:
    """A block as the commands a person pastes: the whole block when it holds a heredoc, else
    each line that is not a comment."""
    if "<<'EOF'" in code:
        return [code]
    return [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def lines_of(path: Path, prefix: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if prefix in line] if path.exists() else []


@pytest.mark.heavy
@pytest.mark.timeout(400)
def test_the_cluster_pages_walkthrough_runs_as_written_from_the_model_to_a_failover(
    cluster: Cluster, tmp_path: Path
) -> None:
    c = cluster
    blocks, end = walkthrough()
    url = c.store_url
    assert url is not None
    a, b = c.nodes[0], c.nodes[1]

    def local(code: str) -> str:  # the page's addresses are these machines'
        return code.replace(PAGE_URL, url).replace("10.0.0.1", a.address).replace("10.0.0.2", b.address)

    homes = {"A": tmp_path / "A", "B": tmp_path / "B"}
    for home in homes.values():
        home.mkdir()
    shells = {"A": Shell(c, 0, homes["A"]), "B": Shell(c, 1, homes["B"])}
    install, *steps = blocks
    assert install[0] == "A and B" and "pip install -e '.[postgres]'" in install[1]  # done: this checkout's venv
    outputs: list[tuple[str, str, str]] = []
    on_b: list[str] = []
    for who, code in steps:
        if "kill -9" in code:  # B fails: which turns it held
            on_b = sorted(s.turn_id for s in c.store().log.summaries() if c.node_of(s.owner) == 1)
            assert {"try-0", "try-1", "try-2", "try-3"} <= set(on_b)  # those that require B's capability
        if "greenroom approve TURN" in code:
            code = code.replace("TURN", on_b[0])
        for machine in ("A", "B") if who == "A and B" else (who,):
            for command in commands(local(code)):
                status, out = shells[machine].run(command)
                assert status == 0, f"on {machine}: {command}\n{out}"
                outputs.append((machine, command, out))
        if "greenroom node " in code:  # the leader places its turns once the node has joined
            log = homes["A"] / "leader.log"
            node_log = homes["B"] / "node.log"
            assert polled(lambda: len(lines_of(log, " runs on ")) == 8, timeout=120), (
                f"leader.log:\n{log.read_text()}\nB's node.log:\n{node_log.read_text() if node_log.exists() else ''}"
            )
            assert polled(lambda: {s.status for s in c.store().log.summaries()} == {"awaiting_approval"}, timeout=60)
    looked = {cmd: out for machine, cmd, out in outputs if machine == "B" and cmd.startswith("greenroom ")}
    nodes = looked[f"greenroom nodes --admin {a.name}"].splitlines()
    assert nodes == [
        f"{'NODE':<{len(a.name)}}  ROLE    HOSTS  CAPABILITIES",
        f"{a.name}  leader      2  {{}}",
        f"{b.name}  member      2  {{\"machine\": \"b\"}}",
    ]
    listed = looked["greenroom turns list"].splitlines()
    assert sorted(line.split()[0] for line in listed[1:9]) == [f"try-{n}" for n in range(8)]
    assert {line.split()[1] for line in listed[1:9]} == {"awaiting_approval"}
    counts = {line.split()[0]: line.split()[1:] for line in listed[-2:]}
    assert set(counts) == {a.name, b.name} and {v[0] for v in counts.values()} == {"2"}
    assert sum(int(v[1]) for v in counts.values()) == 8 and int(counts[b.name][1]) == len(on_b)
    approved = next(out for machine, cmd, out in outputs if cmd.startswith("greenroom approve"))
    assert re.fullmatch(
        rf"approved: (done by host {re.escape(b.name)}/[01]|no host answered within 10 s: queued in the store's inbox, "
        r"applied when the turn's host takes it \(a lost host's turns are taken over by a live host once its lease "
        r"runs out\))",
        approved,
    ), approved
    moved = on_b[0]
    assert polled(lambda: c.store().owners.route(moved).status == "finished", timeout=120)
    assert [e[1:] for e in stored(c, moved) if e[1] == "tool_call_started"] == [
        ["tool_call_started", "call_1"], ["tool_call_started", "call_2"], ["tool_call_started", "call_3"],
    ]  # fmt: skip
    required = {"try-0", "try-1", "try-2", "try-3"}  # require machine=b: only B's new hosts take them
    assert polled(lambda: all(c.node_of(c.store().owners.route(t).host_id) == 1 for t in required), timeout=60)
    status, shown = shells["A"].run(f"greenroom turns show {moved}")
    after = host_of(c.store().owners.route(moved).host_id)
    assert (status, shown.splitlines()[0]) == (0, f"turn {moved}: finished (stop), ran on host {after} (node {b.name})")
    status, listed_after = shells["A"].run("greenroom turns list")
    counts = {line.split()[0]: line.split()[1:] for line in listed_after.splitlines()[-2:]}
    assert set(counts) == {a.name, b.name} and sum(int(v[1]) for v in counts.values()) == 7  # the 8 but the one finished
    status, out = shells["A"].run(end)  # the page's last step: SIGTERM closes the leader and the model
    assert status == 0, out
    assert polled(lambda: a.ns.processes() == [shells["A"].proc.pid], timeout=30)  # all gone but the shell
    assert "Traceback" not in (homes["A"] / "leader.log").read_text()
