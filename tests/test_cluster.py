"""Across hosts: two network namespaces joined by a veth pair, created and removed here.

The leader (a Runtime bound to the first namespace's address) is driven over stdin/stdout
by ``tests.cluster_leader``; the member is ``greenroom node`` in the second namespace.
Every process started in a namespace is ended by PID before the namespace is removed.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from actors.turn.history import history_problems
from messages import ChatMessage

from .conftest import group_members
from .helpers import wait_until

ROOT = Path(__file__).resolve().parents[1]
PORT = 1900
LEADER_HOSTS = max(1, os.cpu_count() or 1)  # the leader's Runtime's default: one TurnHost per core

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 to create network namespaces"
    ),
]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def netns_inode(name: str) -> int:
    return os.stat(f"/run/netns/{name}").st_ino


def processes_in(name: str) -> list[int]:
    inode = netns_inode(name)
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def kill_namespace(name: str) -> None:
    """SIGKILL, by PID, every process in a namespace this test created."""
    for pid in processes_in(name):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@dataclass
class Cluster:
    leader_ns: str
    member_ns: str
    leader_ip: str
    member_ip: str
    key: str
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    leader: subprocess.Popen[str] | None = None

    def env(self, key: str | None = None) -> dict[str, str]:
        return dict(os.environ, PYTHONPATH=str(ROOT), GREENROOM_KEY=key or self.key)

    def start_leader(self, *extra: str) -> dict[str, Any]:
        self.leader = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.leader_ns,
                sys.executable,
                "-m",
                "tests.cluster_leader",
                self.leader_ip,
                str(PORT),
                *extra,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=self.env(),
        )
        self.procs.append(self.leader)
        return self.read()

    def start_member(self, *extra: str, key: str | None = None) -> subprocess.Popen[str]:
        cmd = [
            "ip",
            "netns",
            "exec",
            self.member_ns,
            sys.executable,
            "-m",
            "actors.cli",
            "node",
            "--leader",
            f"{self.leader_ip}:{PORT}",
            "--listen",
            self.member_ip,
            "--admin-port",
            str(PORT),
            *extra,
        ]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=self.env(key)
        )
        self.procs.append(proc)
        return proc

    def read(self) -> dict[str, Any]:
        assert self.leader is not None and self.leader.stdout is not None
        line = self.leader.stdout.readline()
        assert line, "the leader exited"
        out = json.loads(line)
        assert "error" not in out, out["error"]
        return out

    def ask(self, **cmd: Any) -> dict[str, Any]:
        assert self.leader is not None and self.leader.stdin is not None
        self.leader.stdin.write(json.dumps(cmd) + "\n")
        self.leader.stdin.flush()
        return self.read()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    tag = f"{os.getpid() % 100000}"
    net = 10 + os.getpid() % 240
    c = Cluster(f"gra{tag}", f"grb{tag}", f"10.231.{net}.1", f"10.231.{net}.2", secrets.token_hex(32))
    ip("netns", "add", c.leader_ns)
    ip("netns", "add", c.member_ns)
    try:
        ip("link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}")
        for ns, dev, addr in ((c.leader_ns, f"va{tag}", c.leader_ip), (c.member_ns, f"vb{tag}", c.member_ip)):
            ip("link", "set", dev, "netns", ns)
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield c
    finally:
        if c.leader is not None and c.leader.poll() is None and c.leader.stdin is not None:
            try:
                c.leader.stdin.write(json.dumps({"op": "quit"}) + "\n")
                c.leader.stdin.flush()
                c.leader.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for p in c.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in c.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        for ns in (c.leader_ns, c.member_ns):
            kill_namespace(ns)
            wait_until(lambda ns=ns: processes_in(ns) == [])
            ip("netns", "del", ns)


def joined(c: Cluster, *leader: str) -> str:
    c.start_leader(*leader)
    member = c.start_member("--capability", "sandbox", "--capability", "gpu=false", "--hosts", "0")  # tools only
    assert member.stdout is not None
    announced = json.loads(member.stdout.readline())
    assert announced["capabilities"] == {"sandbox": True, "gpu": False}
    return str(c.ask(op="wait_node", caps={"sandbox": True})["node"])


def test_a_tool_that_needs_sandbox_runs_in_the_member_namespace(cluster: Cluster) -> None:
    node = joined(cluster)
    assert node == f"{cluster.member_ip}:{PORT}"
    leader = {"node": f"{cluster.leader_ip}:{PORT}", "capabilities": {}, "leader": True, "hosts": LEADER_HOSTS}
    member = {"node": node, "capabilities": {"sandbox": True, "gpu": False}, "leader": False, "hosts": 0}
    assert cluster.ask(op="nodes")["nodes"] == [{"kind": "node_info", **leader}, {"kind": "node_info", **member}]
    cluster.ask(
        op="run",
        turn_id="t_place",
        prompt="where?",
        tools=["where_am_i"],
        replies=[{"tools": [["where_am_i", {}]]}, {"say": "done"}],
    )
    result = cluster.ask(op="result", turn_id="t_place")
    assert result["finish_reason"] == "stop"
    data = json.loads(result["messages"][2]["content"])["data"]
    assert data["netns"] == f"net:[{netns_inode(cluster.member_ns)}]"
    assert data["netns"] != f"net:[{netns_inode(cluster.leader_ns)}]"
    listed = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            cluster.leader_ns,
            sys.executable,
            "-m",
            "actors.cli",
            "nodes",
            "--admin",
            f"{cluster.leader_ip}:{PORT}",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=cluster.env(),
        timeout=60,
    )
    assert json.loads(listed.stdout) == [leader, member], listed.stderr
    member = cluster.procs[-1]
    member.send_signal(signal.SIGTERM)  # a graceful leave is seen at once
    member.wait(30)
    assert wait_until(lambda: cluster.ask(op="membership")["membership"] == [[node, True], [node, False]])


def test_a_stop_by_turn_id_from_the_leader_ends_the_tool_process_group_on_the_member(cluster: Cluster) -> None:
    joined(cluster)
    cluster.ask(
        op="run",
        turn_id="t_stop",
        prompt="build",
        tools=["sandbox_shell"],
        replies=[{"tools": [["sandbox_shell", {"command": "sleep 300 & sleep 300"}]]}],
    )
    progress = cluster.ask(op="wait_progress", turn_id="t_stop")["data"]
    pgid = progress["pgid"]
    assert progress["netns"] == f"net:[{netns_inode(cluster.member_ns)}]"
    assert wait_until(lambda: len(group_members(pgid)) >= 2)
    assert all(pid in processes_in(cluster.member_ns) for pid in group_members(pgid))
    assert cluster.ask(op="stop", turn_id="t_stop", reason="from the leader")["ok"]
    assert wait_until(lambda: group_members(pgid) == []), "the tool's processes survived on the member"
    result = cluster.ask(op="result", turn_id="t_stop")
    assert result["finish_reason"] == "stopped"
    messages = [ChatMessage.model_validate(m) for m in result["messages"]]
    assert history_problems(messages) == []
    assert messages[-1].role == "tool"


def test_losing_the_member_mid_call_fails_the_call_and_the_turn_goes_on(cluster: Cluster) -> None:
    joined(cluster)
    cluster.ask(
        op="run",
        turn_id="t_lost",
        prompt="build",
        tools=["sandbox_shell"],
        replies=[{"tools": [["sandbox_shell", {"command": "sleep 300"}]]}, {"say": "The sandbox host is gone."}],
    )
    cluster.ask(op="wait_progress", turn_id="t_lost")
    kill_namespace(cluster.member_ns)  # the whole host dies: its admin, its actors, its tools
    result = cluster.ask(op="result", turn_id="t_lost", timeout=30)
    assert result["finish_reason"] == "stop"
    content = json.loads(result["messages"][2]["content"])
    assert content["ok"] is False
    assert content["error"].startswith("Tool 'sandbox_shell' failed: its node ")
    assert content["error"].endswith("stopped answering for 5 s (host lost)")
    assert result["messages"][-1]["content"] == "The sandbox host is gone."


def test_a_node_with_the_wrong_key_cannot_join(cluster: Cluster) -> None:
    cluster.start_leader()
    intruder = cluster.start_member("--capability", "sandbox", "--timeout", "5", key=secrets.token_hex(32))
    _, err = intruder.communicate(timeout=60)
    assert intruder.returncode == 2
    assert f"could not join the leader at {cluster.leader_ip}:{PORT} within 5 s (wrong key, or unreachable)" in err
    assert [n["node"] for n in cluster.ask(op="nodes")["nodes"]] == [f"{cluster.leader_ip}:{PORT}"]  # the leader alone
    cluster.ask(
        op="run",
        turn_id="t_nowhere",
        prompt="where?",
        tools=["where_am_i"],
        replies=[{"tools": [["where_am_i", {}]]}, {"say": "no sandbox"}],
    )
    result = cluster.ask(op="result", turn_id="t_nowhere")
    assert json.loads(result["messages"][2]["content"]) == {
        "ok": False,
        "error": "Tool 'where_am_i' cannot run: no node advertises the capabilities it needs (sandbox=true)",
        "data": None,
    }


def test_a_call_placed_on_a_member_is_a_span_of_its_turns_trace_and_runs_under_it(cluster: Cluster) -> None:
    joined(cluster, "--trace")
    cluster.ask(
        op="run",
        turn_id="t_traced",
        prompt="where?",
        tools=["seen_context_placed"],
        replies=[{"tools": [["seen_context_placed", {}]]}, {"say": "done"}],
    )
    result = cluster.ask(op="result", turn_id="t_traced")
    assert result["finish_reason"] == "stop"
    seen = json.loads(result["messages"][2]["content"])["data"]
    assert seen["netns"] == f"net:[{netns_inode(cluster.member_ns)}]"
    names = ["invoke_agent", "chat scripted-model", "chat scripted-model", "execute_tool seen_context_placed"]
    assert wait_until(lambda: sorted(s["name"] for s in cluster.ask(op="spans")["spans"]) == sorted(names))
    spans = {s["name"]: s for s in cluster.ask(op="spans")["spans"]}
    agent, tool = spans["invoke_agent"], spans["execute_tool seen_context_placed"]
    assert {s["trace_id"] for s in spans.values()} == {agent["trace_id"]}
    assert (tool["parent_id"], tool["attributes"]["greenroom.tool.outcome"]) == (agent["span_id"], "success")
    assert seen["carrier"] == {"traceparent": f"00-{tool['trace_id']}-{tool['span_id']}-01"}
    assert seen["current"] == [tool["trace_id"], tool["span_id"]]  # the tool's own spans are its children
