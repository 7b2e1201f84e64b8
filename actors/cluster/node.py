"""``greenroom node``: a member of a deployment, joining a leader's Thespian convention.

    greenroom node --leader 10.0.0.1:1900 --listen 10.0.0.2 --capability sandbox \\
                   --capability gpu=true [--admin-port 1900] [--key-file PATH]

A node runs a Thespian admin bound to ``--listen`` only, advertising its capabilities, with
the deployment's key (``$GREENROOM_KEY`` or ``--key-file``/``$GREENROOM_KEY_FILE``): frames
that are not signed with it are refused before anything is unpickled, so a node with
another key cannot join. Tool calls whose tool requires one of its capabilities are placed
on it; its directory forwards every turn command to the leader's directory, so an actor on
this node can steer any turn by id. The tools' modules must be importable on the node.
The node runs until SIGINT or SIGTERM, then leaves the convention gracefully.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from typing import Any

from ..errors import ConfigurationError
from ..wire import transport
from ..wire.thespian_compat import tune_convention

__all__ = ["DEFAULT_ADMIN_PORT", "main", "parse_capability", "start_node"]

DEFAULT_ADMIN_PORT = 1900


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
    leader: str, listen: str, capabilities: dict[str, Any], admin_port: int, key: bytes, timeout: float = 30.0
) -> Any:
    """Start this node's admin, join ``leader`` and set up the forwarding directory."""
    from thespian.actors import ActorSystem

    from ..lifecycle.lifeline import Lifeline
    from ..logs import log_defs
    from ..wire.protocol import Configure, Configured
    from .directory import DirectoryActor, DirectoryLocator
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
    done = asys.ask(directory, Configure(upstream=upstream, node=node, capabilities=capabilities), timeout)
    if not isinstance(done, Configured):
        asys.shutdown()
        raise ConfigurationError("the node's directory did not start")
    return asys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="greenroom node", description="Join a greenroom deployment as a node.")
    parser.add_argument("--leader", required=True, help="HOST:PORT of the leader's admin")
    parser.add_argument("--listen", required=True, help="the address this node binds and advertises")
    parser.add_argument("--admin-port", type=int, default=DEFAULT_ADMIN_PORT)
    parser.add_argument("--capability", action="append", default=[], help="NAME or NAME=VALUE (JSON), repeatable")
    parser.add_argument(
        "--key-file", default=None, help="the deployment key (else $GREENROOM_KEY or $GREENROOM_KEY_FILE)"
    )
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    try:
        key = transport.load_key(key_file=args.key_file)
        if key is None:
            raise ConfigurationError("a node needs the deployment key: set $GREENROOM_KEY or pass --key-file")
        capabilities = dict(parse_capability(c) for c in args.capability)
        asys = start_node(args.leader, args.listen, capabilities, args.admin_port, key, args.timeout)
    except ConfigurationError as exc:
        print(f"greenroom node: {exc}", file=sys.stderr)
        return 2
    print(
        json.dumps({"node": f"{args.listen}:{args.admin_port}", "leader": args.leader, "capabilities": capabilities}),
        flush=True,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    asys.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
