"""``greenroom node``: a member of a deployment, joining a leader's Thespian convention.

    greenroom node --leader 10.0.0.1:1900 --listen 10.0.0.2 [--hosts 4] \\
                   [--store postgresql://greenroom@10.0.0.9/greenroom] \\
                   [--capability sandbox --capability gpu=true] [--admin-port 1900] [--key-file PATH]

A node runs a Thespian admin bound to ``--listen`` only, advertising its capabilities, with
the deployment's key (``$GREENROOM_KEY`` or ``--key-file``/``$GREENROOM_KEY_FILE``): frames
that are not signed with it are refused before anything is unpickled, so a node with
another key cannot join. It runs a tool pool, where tool calls that require one of its
capabilities are placed, and ``--hosts`` TurnHosts (default: one per CPU the process may use; 0 for a node
that only runs tools), where Runtimes place new turns beside the leader's own: with
``--store``, a PostgreSQL URL every node reaches, its turns are durable and are taken over
by the other nodes if this one is lost; without it, its hosts take the turns of Runtimes
that have no store. A SQLite file is one machine's store: a node refuses it. The tools'
modules must be importable on the node. Its directory registers the node with the leader's
(and again if the leader restarts), and routes commands by turn id, so an actor on this
node can steer any turn. The node runs until SIGINT (it leaves the convention at once: its
durable turns are taken over, their calls interrupted) or SIGTERM (it drains, then leaves):

    kill -TERM <pid of greenroom node>      # [--drain-within 60] bounds the drain, in seconds

A node that drains takes no new turn (its hosts leave placement), lets the calls under way
finish, hands each durable turn to another node's host at the turn's next safe boundary
(waiting for approvals, paused, or between two steps: no call interrupted, no lease waited
out; the heir claims it within a second, and its callers follow it there with no gap and
no duplicate), and lets its other turns finish. At the bound what is left ends: a turn that
is not durable is stopped (its reason: ``store.ownership.DRAINED``), a durable one still in
a call is handed on with its call interrupted. Then the node exits 0 (``--drain-within 0``:
SIGTERM leaves at once, as SIGINT does).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import time
from typing import Any

from ..errors import ConfigurationError, StoreError
from ..host.admission import DEFAULT_MAX_QUEUED, DEFAULT_MAX_RUNNING
from ..lifecycle.cpus import usable_cpus
from ..store import open_store
from ..store.base import is_url
from ..store.urls import keep
from ..tools.pool import DEFAULT_MAX_TOOL_PROCESSES, DEFAULT_TOOL_PROCESSES
from ..wire import transport
from ..wire.thespian_compat import tune_convention

__all__ = ["DEFAULT_ADMIN_PORT", "DRAIN_WITHIN", "drain_node", "main", "parse_capability", "start_node"]

DEFAULT_ADMIN_PORT = 1900
DRAIN_WITHIN = 60.0  # seconds a node has to drain on SIGTERM (Kubernetes' grace period is 30 s by default)


def parse_capability(text: str) -> tuple[str, Any]:
    """``sandbox`` -> ("sandbox", True); ``gpu=true`` -> ("gpu", True); ``zone=eu`` -> ("zone", "eu")."""
    name, sep, raw = text.partition("=")
    if not name:
        raise ConfigurationError(f"bad capability {text!r}: expected NAME or NAME=VALUE")
    if not sep:
        return name, True
    try:
        return name, json.loads(raw)
    except ValueError:
        return name, raw


def start_node(
    leader: str,
    listen: str,
    capabilities: dict[str, Any],
    admin_port: int,
    key: bytes,
    timeout: float = 30.0,
    hosts: int = 0,
    store: str | None = None,
    tool_processes: int = DEFAULT_TOOL_PROCESSES,
    max_tool_processes: int = DEFAULT_MAX_TOOL_PROCESSES,
    max_running: int = DEFAULT_MAX_RUNNING,
    max_queued: int = DEFAULT_MAX_QUEUED,
) -> tuple[Any, Any]:
    """Start this node's admin, join ``leader`` and configure the node's directory; the
    actor system and the leader's directory."""
    if store is not None and not is_url(store):
        raise ConfigurationError(
            f"a node needs a store every node reaches (postgresql://...), not a file ({store}): "
            "a SQLite store stays on the leader's machine"
        )
    if store is not None:  # before anything starts: fail naming the URL (never its password) and what failed
        store = keep(store)  # what the directory and the hosts are sent; they inherit the password
        open_store(store).close()
    from thespian.actors import ActorSystem

    from ..lifecycle.lifeline import Lifeline
    from ..logs import log_defs
    from ..wire.protocol import Configure, Configured
    from .directory import DirectoryActor
    from .locator import DirectoryLocator
    from .names import DIRECTORY_NAME, LEADER_CAPABILITY

    transport.install(listen, key)
    tune_convention()
    caps = {"Admin Port": admin_port, "Convention Address.IPv4": leader, **capabilities}
    lifeline = Lifeline()  # the node's whole tree ends with this process, however it ends
    with lifeline.forking():
        asys = ActorSystem("multiprocTCPBase", caps, logDefs=log_defs(), transientUnique=True)
    deadline = time.monotonic() + timeout
    upstream = None
    while upstream is None:  # the leader becomes reachable once our registration is accepted
        try:
            locator = asys.createActor(DirectoryLocator, targetActorRequirements={LEADER_CAPABILITY: True})
            upstream = asys.ask(locator, "where", 5)
        except Exception:
            upstream = None
        if upstream is None:
            if time.monotonic() > deadline:
                asys.shutdown()
                raise ConfigurationError(
                    f"could not join the leader at {leader} within {timeout:g} s (wrong key, or unreachable)"
                )
            time.sleep(0.5)  # retry pacing while the convention forms
    directory = asys.createActor(DirectoryActor, globalName=DIRECTORY_NAME)
    node = f"{listen}:{admin_port}"
    configure = Configure(
        store, hosts=hosts, tool_processes=tool_processes, max_tool_processes=max_tool_processes,
        node=node, capabilities=capabilities, upstream=upstream, max_running=max_running, max_queued=max_queued,
    )  # fmt: skip
    done = asys.ask(directory, configure, timeout)
    if not isinstance(done, Configured):
        asys.shutdown()
        raise ConfigurationError("the node's directory did not start")
    if "*" in done.errors:
        asys.shutdown()
        raise ConfigurationError(done.errors["*"])
    return asys, upstream


def _address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (an argparse type)."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT with a port from 1 to 65535, not {text!r}")
    return host, int(port)


def _port(text: str) -> int:
    """A TCP port from 1 to 65535 (an argparse type)."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, not {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    """A number of seconds >= 0 (an argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, not {text!r}")
    return value


def _count(least: int) -> Any:
    def parse(text: str) -> int:
        if not text.lstrip("-").isdigit() or int(text) < least:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {least}, not {text!r}")
        return int(text)

    return parse


def _check_addresses(leader: tuple[str, int], listen: str, admin_port: int) -> str:
    """Refuse, saying why, a leader whose name does not resolve, a ``listen`` address this
    machine does not have, or an admin port already taken here (by another node or runtime,
    whose admin Thespian would otherwise join); the leader as ``host:port`` of its address."""
    try:
        address = socket.getaddrinfo(leader[0], leader[1], socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except OSError as exc:
        raise ConfigurationError(f"cannot resolve the leader {leader[0]!r}: {exc}") from None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((listen, 0))
        except OSError as exc:
            raise ConfigurationError(
                f"--listen {listen} is not an address of this machine ({exc.strerror or exc}): "
                "give the address of this machine that the other nodes reach"
            ) from None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Thespian binds: only a listener is in the way
        try:
            probe.bind((listen, admin_port))
        except OSError as exc:
            raise ConfigurationError(
                f"{listen}:{admin_port} is in use ({exc.strerror or exc}): another node or runtime runs there, "
                "or give another --admin-port"
            ) from None
    return f"{address}:{leader[1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="greenroom node", description="Join a greenroom deployment as a node.")
    parser.add_argument("--leader", type=_address, required=True, help="HOST:PORT of the leader's admin")
    parser.add_argument("--listen", required=True, help="the address this node binds and advertises")
    parser.add_argument("--admin-port", type=_port, default=DEFAULT_ADMIN_PORT)
    parser.add_argument("--capability", action="append", default=[], help="NAME or NAME=VALUE (JSON), repeatable")
    parser.add_argument(
        "--key-file", default=None, help="the deployment key (else $GREENROOM_KEY or $GREENROOM_KEY_FILE)"
    )
    parser.add_argument(
        "--hosts",
        type=_count(0),
        default=None,
        help="TurnHosts on this node (default: one per CPU this process may use)",
    )
    parser.add_argument("--store", default=None, help="a PostgreSQL URL every node reaches: durable turns here")
    parser.add_argument(
        "--tool-processes",
        type=_count(0),
        default=DEFAULT_TOOL_PROCESSES,
        help="idle tool processes the pool keeps, besides each host's one",
    )
    parser.add_argument("--max-tool-processes", type=_count(1), default=DEFAULT_MAX_TOOL_PROCESSES)
    parser.add_argument(
        "--max-running", type=_count(1), default=DEFAULT_MAX_RUNNING, help="turns running at once, per host"
    )
    parser.add_argument(
        "--max-queued", type=_count(0), default=DEFAULT_MAX_QUEUED, help="turns queued beyond them, per host"
    )
    parser.add_argument(
        "--drain-within", type=_seconds, default=DRAIN_WITHIN,
        help="on SIGTERM: seconds the node has to hand its turns on and let them finish (0: leave at once)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    hosts = args.hosts if args.hosts is not None else usable_cpus()  # affinity and cgroup quota
    try:
        key = transport.load_key(key_file=args.key_file)
        if key is None:
            raise ConfigurationError("a node needs the deployment key: set $GREENROOM_KEY or pass --key-file")
        capabilities = dict(parse_capability(c) for c in args.capability)
        leader = _check_addresses(args.leader, args.listen, args.admin_port)
        asys, _ = start_node(
            leader, args.listen, capabilities, args.admin_port, key, args.timeout,
            hosts, args.store, args.tool_processes, args.max_tool_processes, args.max_running, args.max_queued,
        )  # fmt: skip
    except (ConfigurationError, StoreError, OSError) as exc:
        print(f"greenroom node: {exc}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "node": f"{args.listen}:{args.admin_port}",
                "leader": leader,
                "capabilities": capabilities,
                "hosts": hosts,
                "max_running": args.max_running,
                "max_queued": args.max_queued,
                "store": _redacted(args.store) if args.store else None,
            }
        ),
        flush=True,
    )
    stop, drain = threading.Event(), threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    def drain_then_stop(*_: Any) -> None:
        drain.set()
        stop.set()

    signal.signal(signal.SIGTERM, drain_then_stop)
    stop.wait()
    if drain.is_set() and args.drain_within > 0:
        drain_node(asys, args.drain_within)
    asys.shutdown()
    return 0


def drain_node(asys: Any, within: float) -> bool:
    """Have this node drain (``Drain``; see the module docstring) within ``within`` seconds:
    True if every turn was handed on or finished before the bound."""
    from ..wire.draining import Drain, Drained
    from .directory import DirectoryActor
    from .names import DIRECTORY_NAME

    started = time.monotonic()
    directory = asys.createActor(DirectoryActor, globalName=DIRECTORY_NAME)  # the node's own, already there
    print(json.dumps({"draining": True, "within": within}), flush=True)
    done = isinstance(asys.ask(directory, Drain(within), within), Drained)
    if not done:  # the bound: what is left ends now (its calls' stop grace, at most)
        asys.ask(directory, Drain(0.0), 15.0)
    print(json.dumps({"drained": done, "seconds": round(time.monotonic() - started, 3)}), flush=True)
    return done


def _redacted(url: str) -> str:
    from ..store.postgres import redacted  # psycopg: only with a PostgreSQL store

    return redacted(url)


if __name__ == "__main__":
    raise SystemExit(main())
