"""Sized for where it runs: hosts from the CPUs the process may use, and tools or approval
predicates in ``__main__`` refused when the turn may be placed on another node."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.lifecycle.cpus import cgroup_quota, usable_cpus

ROOT = Path(__file__).resolve().parents[1]


def _cgroup(tmp: Path, limits: dict[str, str]) -> tuple[str, str]:
    """A cgroup v2 tree under ``tmp``: the process in ``/a/b``, ``cpu.max`` as ``limits`` say."""
    root = tmp / "cgroup"
    for path, value in limits.items():
        folder = root / path.strip("/")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpu.max").write_text(value + "\n")
    (root / "a" / "b").mkdir(parents=True, exist_ok=True)
    proc = tmp / "proc-cgroup"
    proc.write_text("1:cpu:/\n0::/a/b\n")
    return str(root), str(proc)


@pytest.mark.parametrize(
    "limits, quota",
    [
        ({"/a/b": "200000 100000"}, 2),
        ({"/a/b": "150000 100000"}, 2),  # 1.5 CPUs: rounded up
        ({"/a/b": "max 100000"}, None),
        ({"/a/b": "max 100000", "/a": "300000 100000"}, 3),  # an ancestor's quota holds too
        ({"/a/b": "800000 100000", "/a": "100000 100000", "/": "max 100000"}, 1),
        ({}, None),
    ],
)
def test_the_cgroup_quota_is_the_tightest_cpu_max_on_the_path_to_the_root(
    tmp_path: Path, limits: dict[str, str], quota: int | None
) -> None:
    root, proc = _cgroup(tmp_path, limits)
    assert cgroup_quota(root, proc) == quota


def test_a_two_cpu_quota_sizes_a_process_on_a_bigger_machine_to_two(tmp_path: Path) -> None:
    root, proc = _cgroup(tmp_path, {"/a/b": "200000 100000"})
    assert usable_cpus(root, proc) == min(2, len(os.sched_getaffinity(0)))


def test_without_cgroup_v2_the_affinity_decides(tmp_path: Path) -> None:
    (tmp_path / "v1").write_text("4:memory:/x\n1:cpu:/\n")
    assert usable_cpus(str(tmp_path / "none"), str(tmp_path / "v1")) == len(os.sched_getaffinity(0))


def test_a_process_pinned_to_one_cpu_gets_one_host_by_default() -> None:
    script = (
        "import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n"
        "from actors import Runtime\nprint(Runtime().hosts)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert (out.stdout, out.returncode) == ("1\n", 0), out.stderr


MAIN_TOOLS = """
import os, subprocess, sys
from actors import Runtime, ToolDefinitionError, tool
from actors.lifecycle.processes import free_port
from actors.testing import ScriptedProvider, say

def outside(arguments):
    return True

@tool
def here(x: int) -> int:
    return x

@tool(requires_approval=outside)
def gated(x: int) -> int:
    return x

key = b"a-key-for-the-main-tools-test-0123"
leader_port, member_port = free_port("127.0.0.1"), free_port("127.0.0.1")
with ScriptedProvider() as p, Runtime(p.provider(), host="127.0.0.1", admin_port=leader_port, key=key, hosts=1,
                                     tool_processes=1, capabilities={"machine": "a"}) as rt:
    node = subprocess.Popen(
        [sys.executable, "-m", "actors.cluster.node", "--leader", f"127.0.0.1:{leader_port}", "--listen", "127.0.0.1",
         "--admin-port", str(member_port), "--hosts", "1", "--capability", "machine=b", "--tool-processes", "0"],
        env=dict(os.environ, GREENROOM_KEY=key.decode()), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        rt.wait_for_node({"machine": "b"}, timeout=60)
        print(member_port)
        for tools in ([here], [gated]):
            try:
                rt.run("anywhere", tools=tools)
            except ToolDefinitionError as exc:
                print(exc)
        p.add(say("kept here"))
        print(rt.run("here", tools=[here, gated], requires={"machine": "a"}).result(60).text)
    finally:
        node.terminate()
        node.wait(30)
"""


@pytest.mark.integration
def test_a_tool_or_a_predicate_in_main_is_refused_when_the_turn_may_go_to_another_node(tmp_path: Path) -> None:
    script = tmp_path / "main_tools.py"
    script.write_text(MAIN_TOOLS)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    port, tool_refused, predicate_refused, kept = out.stdout.splitlines()
    node = f"127.0.0.1:{port}"
    assert tool_refused == (
        f"tool 'here' is defined in __main__, which another node cannot import, and this turn may be placed on "
        f"node {node}: define the tool in a module (a .py file), or keep the turn on this node with requires= "
        "(a capability only this node has)"
    )
    assert predicate_refused == (
        f"the approval predicate 'outside' of tool 'gated' is defined in __main__, which another node cannot "
        f"import, and this turn may be placed on node {node}: there every call of the tool would ask for "
        "approval; define the predicate in a module (a .py file)"
    )
    assert kept == "kept here"
