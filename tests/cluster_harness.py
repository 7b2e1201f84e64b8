"""A greenroom deployment of several nodes on one machine, in network namespaces on one
bridge, created, faulted and removed here: for the multi-node tests and ``bench/cluster.py``.

    with Cluster(4, tmp_path) as c:          # the bridge, 4 namespaces, PostgreSQL, the provider
        c.start_leader(hosts=1)               # node 0: tests.cluster_leader, driven by c.ask(op=...)
        for i in c.members:
            c.start_member(i, hosts=1, store=True, capabilities={"name": f"m{i}"})
        c.scripts.add("hello", say("hi"))     # the replies of a turn whose prompt is "hello"
        c.ask(op="run", turn_id="t1", prompt="hello")
    assert leftovers(c) == []

The network: a bridge in this process's namespace on a private /24 (``10.251.X.0/24``, X free
here), holding ``.1``; node ``i`` is namespace ``i``, linked to it by a veth pair, at
``.(10+i)``. Nothing else is touched (no route, no forwarding, not the machine's own
interfaces). On the bridge's address listen what every node shares: the scripted provider
(in this process; ``Scripts`` answers by prompt and round, so a turn gets the same replies
wherever it runs or resumes) and, with ``store``, a throwaway PostgreSQL (``store_url``).
Node 0 runs the leader (``tests.cluster_leader``, a Runtime on ``PORT``), the others
``greenroom node``. Every process gets ``$GREENROOM_HARNESS`` (the cluster's tag); its stderr
goes to ``tmp/node<i>.log``, quoted when a node fails to start or the leader a command.

Faults: ``kill(i)`` SIGKILLs, by PID, every process in node i's namespace and removes the
namespace (the machine is gone; its address answers nothing); ``kill(0, keep=True)`` kills
the leader and keeps its namespace for ``start_leader`` again; ``partition(i)`` drops every
packet in and out of node i's link (nftables in its namespace) until ``heal(i)``.

The end, however the block ends: every process in every namespace SIGKILLed by PID, the
namespaces (with any nftables table in them) and the bridge removed, PostgreSQL stopped and
its directory removed, the provider closed. ``leftovers(c)`` scans ``/proc`` and the links
for anything of the cluster still there.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.testing import ScriptedProvider
from actors.testing.netns import Bridge, Namespace, cut_from, heal, partition
from actors.testing.postgres import ThrowawayPostgres

from .cluster_scripts import Scripts

__all__ = ["PORT", "Cluster", "Node", "Scripts", "leftovers"]

ROOT = Path(__file__).resolve().parents[1]
PORT = 1900
TAG_VAR = "GREENROOM_HARNESS"
_clusters = itertools.count(1)


class _Lines:
    """Lines from a pipe, each waited for at most a given time (a hung process fails a test, never hangs it)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, b""

    def readline(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError(f"no line within {timeout:g} s")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode()


@dataclass
class Node:
    index: int
    ns: Namespace
    address: str
    device: str
    log: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    lines: _Lines | None = None
    announced: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``address:port`` of the node's admin: how the cluster names it."""
        return f"{self.address}:{PORT}"

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.procs[-1] if self.procs else None


class Cluster:
    """``nodes`` nodes (node 0 the leader) on one bridge; see the module docstring."""

    def __init__(self, nodes: int, tmp: Path, *, store: bool = True) -> None:
        self.tag = f"{os.getpid() % 100000}c{next(_clusters)}"
        self.tmp, self.size, self.with_store = tmp, nodes, store
        self.key = secrets.token_hex(32)
        self.scripts = Scripts()
        self.nodes: list[Node] = []
        self.inodes: set[int] = set()  # of the namespaces: leftovers() looks for them in /proc
        self.bridge: Bridge | None = None
        self.pg: ThrowawayPostgres | None = None
        self.pg_dir: str | None = None
        self.provider: ScriptedProvider | None = None
        self._store: Any = None
        self._stack = contextlib.ExitStack()

    # -- set-up and the end ----------------------------------------------------------------

    def __enter__(self) -> Cluster:
        try:
            self._set_up()
        except BaseException:
            self._close()
            raise
        return self

    def _set_up(self) -> None:
        stack = self._stack
        self.bridge = stack.enter_context(Bridge(_free_prefix(), name=f"grc{self.tag}"))
        for i in range(self.size):
            ns = stack.enter_context(Namespace(f"grc{self.tag}n{i}"))
            self.inodes.add(os.stat(f"/run/netns/{ns.name}").st_ino)
            address = f"{self.bridge.prefix}.{10 + i}"
            self.nodes.append(Node(i, ns, address, self.bridge.attach(ns, address), self.tmp / f"node{i}.log"))
        if self.with_store:
            self.pg = stack.enter_context(ThrowawayPostgres(self.bridge.address))  # trusts the bridge's subnet
            self.pg_dir = str(self.pg._dir)  # its processes run there: leftovers() looks for them
        self.provider = stack.enter_context(ScriptedProvider(responder=self.scripts, host=self.bridge.address))
        stack.callback(self._end_processes)  # first of all at the end

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        """Everything taken down, with SIGALRM held meanwhile: a test's timeout (pytest-timeout
        raises from SIGALRM) fires after the end, not in the middle of it."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        try:
            self._stack.close()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _end_processes(self) -> None:
        if self._store is not None:
            with contextlib.suppress(Exception):
                self._store.close()
        survived = []
        for node in self.nodes:
            try:
                self._kill_all(node)
            except RuntimeError as exc:  # the others are ended all the same
                survived.append(str(exc))
        if survived:
            raise RuntimeError("; ".join(survived))

    def _kill_all(self, node: Node) -> None:
        """SIGKILL every process in the node's namespace, by PID, until none is left; reap ours."""
        deadline = time.monotonic() + 20
        while (left := node.ns.processes()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)  # the kernel reaps what was killed: nothing to block on
        for proc in node.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        if left:
            raise RuntimeError(f"processes {left} of node {node.index} survived SIGKILL for 20 s")

    # -- where things are ------------------------------------------------------------------

    @property
    def leader(self) -> Node:
        return self.nodes[0]

    @property
    def members(self) -> range:
        return range(1, self.size)

    @property
    def store_url(self) -> str | None:
        return self.pg.url() if self.pg is not None else None

    @property
    def provider_url(self) -> str:
        assert self.provider is not None and self.bridge is not None
        return f"http://{self.bridge.address}:{self.provider.port}/v1"

    def env(self) -> dict[str, str]:
        return dict(os.environ, PYTHONPATH=str(ROOT), GREENROOM_KEY=self.key, **{TAG_VAR: self.tag})

    def store(self) -> Any:
        """The cluster's store, opened in this process (read it to see owners, epochs, events)."""
        from actors.store import open_store

        if self._store is None:
            assert self.store_url is not None, "this cluster has no store"
            self._store = open_store(self.store_url)
        return self._store

    def node_of(self, host_id: str) -> int:
        """The index of the node a host id (``NODE/SLOT``, NODE its admin's ``address:port``) is on."""
        for n in self.nodes:
            if host_id.split("/")[0] == n.name:
                return n.index
        raise ValueError(f"host {host_id!r} is on no node of the cluster ({[n.name for n in self.nodes]})")

    # -- processes ---------------------------------------------------------------------------

    def _popen(self, node: Node, argv: list[str], stdin: bool = False) -> subprocess.Popen[bytes]:
        with open(node.log, "ab") as log:
            proc = node.ns.popen(
                [sys.executable, *argv],
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=ROOT,
                env=self.env(),
            )
        node.procs.append(proc)
        assert proc.stdout is not None
        node.lines = _Lines(proc.stdout.fileno())
        return proc

    def _first_line(self, node: Node, timeout: float) -> dict[str, Any]:
        assert node.lines is not None
        try:
            line = node.lines.readline(timeout)
        except TimeoutError:
            line = None
        if line is None:
            raise RuntimeError(f"node {node.index} did not start:\n{self.log_tail(node.index)}")
        out: dict[str, Any] = json.loads(line)
        return out

    def log_tail(self, index: int, lines: int = 30) -> str:
        path = self.nodes[index].log
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def _options(self, hosts: int | None, store: bool, tool_processes: int | None, capabilities: Any) -> list[str]:
        out = ["--hosts", str(hosts)] if hosts is not None else []
        if store:
            assert self.store_url is not None, "this cluster has no store"
            out += ["--store", self.store_url]
        out += ["--tool-processes", str(tool_processes)] if tool_processes is not None else []
        for name, value in (capabilities or {}).items():
            out += ["--capability", name if value is True else f"{name}={json.dumps(value)}"]
        return out

    def start_leader(
        self, *extra: str, hosts: int | None = None, store: bool | None = None, tool_processes: int | None = None,
        capabilities: dict[str, Any] | None = None, timeout: float = 120,
    ) -> dict[str, Any]:  # fmt: skip
        """Start the leader in node 0's namespace (again, after ``kill(0, keep=True)``), on the
        cluster's store unless ``store=False``; its ready line."""
        argv = ["-m", "tests.cluster_leader", self.leader.address, str(PORT), "--provider", self.provider_url]
        argv += self._options(hosts, self.with_store if store is None else store, tool_processes, capabilities)
        self._popen(self.leader, [*argv, *extra], stdin=True)
        self.leader.announced = self._first_line(self.leader, timeout)
        return self.leader.announced

    def start_member(
        self, index: int, *extra: str, hosts: int | None = None, store: bool = False,
        tool_processes: int | None = None, capabilities: dict[str, Any] | None = None, timeout: float = 120,
    ) -> dict[str, Any]:  # fmt: skip
        """Start ``greenroom node`` in node ``index``'s namespace, joining the leader; its ready
        line. ``--hosts``, ``--store`` (the cluster's) and ``--tool-processes`` only when given."""
        node = self.nodes[index]
        argv = ["-m", "actors.cli", "node", "--leader", self.leader.name, "--listen", node.address]
        argv += ["--admin-port", str(PORT), *self._options(hosts, store, tool_processes, capabilities)]
        self._popen(node, [*argv, *extra])
        node.announced = self._first_line(node, timeout)
        return node.announced

    def request(self, **cmd: Any) -> dict[str, Any]:
        """Send the leader one command; its answer (``{"error": ...}`` included), waited for
        a minute longer than the command's own ``timeout``."""
        proc = self.leader.proc
        assert proc is not None and proc.stdin is not None and self.leader.lines is not None
        proc.stdin.write((json.dumps(cmd) + "\n").encode())
        proc.stdin.flush()
        line = self.leader.lines.readline(float(cmd.get("timeout", 60)) + 60)
        if line is None:
            raise RuntimeError(f"the leader exited:\n{self.log_tail(0)}")
        out: dict[str, Any] = json.loads(line)
        return out

    def ask(self, **cmd: Any) -> dict[str, Any]:
        """``request``, and an error answer fails the test with the leader's log."""
        out = self.request(**cmd)
        assert "error" not in out, f"{cmd['op']}: {out['error']}\n{self.log_tail(0)}"
        return out

    def run_in(self, index: int, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a Python command in node ``index``'s namespace, to its end."""
        return subprocess.run(
            ["ip", "netns", "exec", self.nodes[index].ns.name, sys.executable, *argv],
            capture_output=True, text=True, cwd=ROOT, env=self.env(), timeout=timeout,
        )  # fmt: skip

    def cli(self, index: int, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``greenroom ARGS`` on node ``index``."""
        return self.run_in(index, ["-m", "actors.cli", *args], timeout)

    def supervise(self, index: int, *args: str) -> dict[str, Any]:
        """A supervisor actor on node ``index`` steers a turn by id (``tests.cluster_supervisor``)."""
        done = self.run_in(index, ["-m", "tests.cluster_supervisor", self.nodes[index].name, *args])
        assert done.returncode == 0, done.stderr
        out: dict[str, Any] = json.loads(done.stdout)
        return out

    # -- faults ------------------------------------------------------------------------------

    def kill(self, index: int, keep: bool = False) -> None:
        """Every process of node ``index`` SIGKILLed by PID; then its namespace removed, unless ``keep``."""
        node = self.nodes[index]
        self._kill_all(node)
        if not keep:
            node.ns.remove()

    def partition(self, index: int) -> None:
        partition(self.nodes[index].ns, self.nodes[index].device)

    def cut_store(self, index: int) -> None:
        """Cut node ``index`` off from the cluster's PostgreSQL alone: it still reaches the
        leader, the other nodes and the provider."""
        assert self.pg is not None, "this cluster has no store"
        cut_from(self.nodes[index].ns, self.nodes[index].device, self.bridge.address, self.pg.port)

    def heal(self, index: int) -> None:
        heal(self.nodes[index].ns)


def _free_prefix() -> str:
    """``10.251.X`` with an X no address of this machine's namespace uses (from this pid on)."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, timeout=30).stdout
    for step in range(250):
        prefix = f"10.251.{(os.getpid() + step) % 250 + 1}"
        if f" {prefix}." not in used:
            return prefix
    raise RuntimeError("no free 10.251.X.0/24 on this machine")


def leftovers(cluster: Cluster) -> list[str]:
    """What of ``cluster`` is still there: processes tagged with its tag or in (or holding) one
    of its namespaces, its namespaces, its bridge, its PostgreSQL. Empty when all is gone."""
    found = []
    ours = {n.ns.name for n in cluster.nodes}
    others = set()  # a removed namespace's inode number is soon reused by a namespace of someone else
    for name in os.listdir("/run/netns") if os.path.isdir("/run/netns") else []:
        with contextlib.suppress(OSError):
            if name not in ours:
                others.add(os.stat(f"/run/netns/{name}").st_ino)
    held = {f"net:[{inode}]" for inode in cluster.inodes - others}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            if f"{TAG_VAR}={cluster.tag}".encode() in environ:
                found.append(f"process {entry} tagged {cluster.tag}")
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{entry}/ns/net") in held:
                found.append(f"process {entry} in a namespace of the cluster")
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{entry}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/fd/{fd}") in held:
                        found.append(f"process {entry} holds a namespace of the cluster")
        if cluster.pg_dir is not None:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/cwd").startswith(cluster.pg_dir):
                    found.append(f"process {entry}: the cluster's PostgreSQL")
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    found += [f"namespace {n.ns.name}" for n in cluster.nodes if n.ns.name in names.split()]
    if cluster.bridge is not None and os.path.exists(f"/sys/class/net/{cluster.bridge.name}"):
        found.append(f"bridge {cluster.bridge.name}")
    return found
