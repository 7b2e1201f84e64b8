"""Network namespaces for tests, created and removed here, with a ``FaultRelay`` between every process in one.

- ``Namespace``: ``ip netns add`` (``lo`` up) on enter; on exit every process in it is
  killed by PID (never this process) and the namespace is removed. ``entered()`` moves the
  calling thread into it and back: the sockets that thread creates, the threads it starts
  and the processes it forks live there (a Runtime started inside lives there for good).
  ``popen`` runs a command in it.
  ``join`` links two namespaces with a veth pair (two nodes of a deployment).
- ``Bridge``: a Linux bridge in this process's namespace, on a private /24 of its own, with
  its address there (a server the nodes share listens on it) and a fixed MAC (so that losing
  a node does not change it under the others' ARP caches); ``attach`` links a namespace to
  it with a veth pair (one node of many); removed on exit with every veth it made.
- ``partition(ns, device)``: an nftables table (family ``netdev``, in ``ns``) that drops
  every packet in and out of ``device``, silently, as a cut cable does; ``heal`` removes it.
- ``interpose(relay)``: an nftables table, in the calling thread's namespace, that sends
  every TCP connection (IPv4) started there to the relay, except the relay's own (marked
  with ``SO_MARK``) and those to ``exclude_ports``; removed on exit. Between nodes, a relay
  in a node's namespace takes the connections that node starts (to any address), with
  their frames both ways: put one in each namespace to cover every connection.
- ``relayed(policy)``: the three together, for a test: a fresh namespace entered by the
  calling thread, a relay in it, every connection through it; removed in reverse order.
- ``python -m actors.testing.netns [--seed N --cut P ...] -- COMMAND...`` runs a command
  (``python -m bench.soak ...``, say) in a fresh namespace with every connection through a
  relay drawing faults at random, then prints the relay's counts as JSON on stderr.

Needs root (``CAP_NET_ADMIN``), ``ip`` (iproute2) and ``nft`` (nftables); ``available()``
says whether this machine has them. Linux only.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from .faults import KINDS
from .relay import MARK, FaultPolicy, FaultRelay

__all__ = ["Bridge", "Namespace", "available", "heal", "interpose", "main", "partition", "relayed"]

CLONE_NEWNET = 0x40000000
_TABLE = "greenroom_relay"
_names = itertools.count(1)


def available() -> str | None:
    """None if namespaces, nftables and a relay can be used here; else why not."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    return f"needs {' and '.join(missing)} (iproute2, nftables)" if missing else None


def _run(*argv: str, stdin: str | None = None) -> None:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns failed")


class Namespace:
    """A network namespace of this process's making; see the module docstring."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or f"grr{os.getpid() % 100000}n{next(_names)}"
        self._created = False

    def __enter__(self) -> Namespace:
        _run("ip", "netns", "add", self.name)
        self._created = True
        try:
            _run("ip", "-n", self.name, "link", "set", "lo", "up")
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    @contextlib.contextmanager
    def entered(self) -> Iterator[Namespace]:
        """The calling thread in this namespace for the block, then back where it was."""
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
            try:
                _setns(target)
            finally:
                os.close(target)
            try:
                yield self
            finally:
                _setns(home)
        finally:
            os.close(home)

    def join(self, other: Namespace, address: str, other_address: str, prefix: int = 24) -> None:
        """Link this namespace to ``other`` with a veth pair: ``address`` here,
        ``other_address`` there (removed with the namespaces)."""
        n = next(_names)
        here, there = f"grv{os.getpid() % 100000}a{n}", f"grv{os.getpid() % 100000}b{n}"
        _run("ip", "link", "add", here, "type", "veth", "peer", "name", there)
        for ns, dev, addr in ((self, here, address), (other, there, other_address)):
            _run("ip", "link", "set", dev, "netns", ns.name)
            _run("ip", "-n", ns.name, "addr", "add", f"{addr}/{prefix}", "dev", dev)
            _run("ip", "-n", ns.name, "link", "set", dev, "up")

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in this namespace (``ip netns exec``)."""
        return subprocess.Popen(["ip", "netns", "exec", self.name, *argv], **kwargs)

    def processes(self) -> list[int]:
        """Every process in this namespace (this one excluded, whichever thread is in it)."""
        try:
            inode = os.stat(f"/run/netns/{self.name}").st_ino
        except FileNotFoundError:
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid():
                with contextlib.suppress(OSError):
                    if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                        found.append(int(entry))
        return found

    def remove(self, timeout: float = 10.0) -> None:
        """SIGKILL every process in the namespace, by PID, wait until they are gone, remove it."""
        if not self._created:
            return
        deadline = time.monotonic() + timeout
        while True:
            left = self.processes()
            if not left or time.monotonic() > deadline:
                break
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)  # waiting for the kernel to reap what was killed: there is nothing to block on
        _run("ip", "netns", "del", self.name)
        self._created = False


class Bridge:
    """A bridge of this process's making on ``prefix.0/24`` (``prefix`` like ``"10.251.7"``),
    holding ``prefix.1``; see the module docstring. Only that private subnet is touched:
    no route, no forwarding, nothing on the machine's own interfaces."""

    def __init__(self, prefix: str, name: str | None = None) -> None:
        self.prefix = prefix
        self.address = f"{prefix}.1"
        self.name = name or f"grb{os.getpid() % 100000}n{next(_names)}"
        self.ends: list[str] = []  # the root-side ends of the veth pairs made by attach
        self._created = False

    def __enter__(self) -> Bridge:
        if any(f" {self.prefix}." in line for line in _addresses()):
            raise RuntimeError(f"{self.prefix}.0/24 is already in use on this machine")
        _run("ip", "link", "add", self.name, "type", "bridge")
        self._created = True
        try:
            # A bridge takes the lowest MAC of its ports unless it was given one: removing a
            # namespace (a node lost) would change it, and every node's ARP entry for the
            # bridge's address would point nowhere for seconds (connections to the store and
            # the provider stalled). A fixed, locally administered MAC never changes.
            _run("ip", "link", "set", self.name, "address", "02:" + ":".join(f"{b:02x}" for b in os.urandom(5)))
            _run("ip", "addr", "add", f"{self.address}/24", "dev", self.name)
            _run("ip", "link", "set", self.name, "up")
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def attach(self, ns: Namespace, address: str, device: str = "gr0") -> str:
        """Link ``ns`` to the bridge: ``device`` in ``ns`` holds ``address``/24; returns ``device``."""
        end = f"{self.name}v{len(self.ends)}"
        _run("ip", "link", "add", end, "type", "veth", "peer", "name", device, "netns", ns.name)
        self.ends.append(end)
        _run("ip", "link", "set", end, "master", self.name, "up")
        _run("ip", "-n", ns.name, "addr", "add", f"{address}/24", "dev", device)
        _run("ip", "-n", ns.name, "link", "set", device, "up")
        return device

    def remove(self) -> None:
        """Delete the veth ends left (a namespace removed took its pair with it) and the bridge."""
        for end in self.ends:  # the kernel may be deleting it with its peer's namespace: gone either way
            subprocess.run(["ip", "link", "del", end], capture_output=True, timeout=30)
        self.ends.clear()
        if self._created:
            _run("ip", "link", "del", self.name)
            self._created = False


def _addresses() -> list[str]:
    done = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.splitlines()


_PARTITION = "greenroom_partition"


def partition(ns: Namespace, device: str) -> None:
    """Drop every packet in and out of ``device`` in ``ns`` (ARP too) until ``heal``: its
    connections hang and time out, as across a cut cable, without an error at once."""
    rules = (
        f"table netdev {_PARTITION} {{\n"
        f'  chain ingress {{ type filter hook ingress device "{device}" priority -500; policy drop; }}\n'
        f'  chain egress {{ type filter hook egress device "{device}" priority -500; policy drop; }}\n'
        "}\n"
    )
    _run("ip", "netns", "exec", ns.name, "nft", "-f", "-", stdin=rules)


def cut_from(ns: Namespace, device: str, address: str, port: int) -> None:
    """Drop the packets between ``ns`` and ``address:port`` (TCP), through ``device``, until
    ``heal``: a link cut to one server alone (a database), every other connection untouched."""
    rules = (
        f"table netdev {_PARTITION} {{\n"
        f'  chain ingress {{ type filter hook ingress device "{device}" priority -500; policy accept;\n'
        f"    ip saddr {address} tcp sport {port} drop\n  }}\n"
        f'  chain egress {{ type filter hook egress device "{device}" priority -500; policy accept;\n'
        f"    ip daddr {address} tcp dport {port} drop\n  }}\n"
        "}\n"
    )
    _run("ip", "netns", "exec", ns.name, "nft", "-f", "-", stdin=rules)


def heal(ns: Namespace) -> None:
    """Remove the partition of ``ns``: packets flow again, and connections that did not time out go on."""
    _run("ip", "netns", "exec", ns.name, "nft", "delete", "table", "netdev", _PARTITION)


def _ruleset(relay_port: int, exclude_ports: Iterable[int], mark: int) -> str:
    ports = ", ".join(str(p) for p in sorted({relay_port, *exclude_ports}))
    return (
        f"table ip {_TABLE} {{\n"
        "  chain output {\n"
        "    type nat hook output priority -100; policy accept;\n"
        f"    meta mark {mark} return\n"
        f"    tcp dport {{ {ports} }} return\n"
        f"    meta l4proto tcp redirect to :{relay_port}\n"
        "  }\n"
        "}\n"
    )


@contextlib.contextmanager
def interpose(relay: FaultRelay, exclude_ports: Iterable[int] = ()) -> Iterator[FaultRelay]:
    """Every TCP connection started in the calling thread's namespace goes through ``relay``
    (which must listen on the loopback there) while the block runs; see the module docstring."""
    _run("nft", "-f", "-", stdin=_ruleset(relay.port, exclude_ports, relay.mark))
    try:
        yield relay
    finally:
        _run("nft", "delete", "table", "ip", _TABLE)


@contextlib.contextmanager
def relayed(
    policy: FaultPolicy | None = None, exclude_ports: Iterable[int] = (), *, keep: int = 10_000, log_bytes: int = 4096
) -> Iterator[FaultRelay]:
    """A fresh namespace, entered by the calling thread, whose every TCP connection goes
    through a relay with ``policy`` (its log sized by ``keep`` and ``log_bytes``, as
    ``FaultRelay`` takes them); everything is removed (its processes killed) on exit.
    ``relay.namespace`` is the ``Namespace``."""
    with Namespace() as ns:
        with ns.entered():
            relay = FaultRelay(policy, keep=keep, log_bytes=log_bytes).start()
            relay.namespace = ns
            try:
                with interpose(relay, exclude_ports):
                    yield relay
            finally:
                relay.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m actors.testing.netns``: see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m actors.testing.netns", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    for kind in KINDS:
        parser.add_argument(f"--{kind}", type=float, default=0.0, metavar="P", help=f"probability of {kind} per frame")
    parser.add_argument("--delay-ms", type=int, nargs=2, default=(10, 1000), metavar=("MIN", "MAX"))
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command after --")
    if (why := available()) is not None:
        parser.error(why)
    rates = {k: getattr(args, k) for k in KINDS if getattr(args, k)}
    policy = FaultPolicy(seed=args.seed, rates=rates, delay_ms=tuple(args.delay_ms))
    with relayed(policy) as relay:
        code = subprocess.call(command)
        counts = relay.counts
    print(json.dumps({"relay": dict(counts), "mark": MARK}), file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
