"""``greenroom``: see and steer turns from a shell.

    greenroom turns list                       id, status, host, waiting since, pending approvals; turns per node
    greenroom turns show ID [--since N]        status and host, history, pending approvals, events
    greenroom sessions list                    id, turns, created, updated
    greenroom sessions show ID                 its turns (each with its status) and its history
    greenroom fork ID (--at N | --at-seq S) [--text T] [--new-id NEW] [--admin HOST:PORT]
    greenroom approve ID CALL [--reason R] [--as NAME]
    greenroom deny ID CALL [--reason R] [--as NAME]
    greenroom stop ID [--reason R] [--as NAME]
    greenroom cancel ID [--reason R] [--grace S] [--as NAME]
    greenroom nodes [--admin HOST:PORT]        the nodes of a running runtime's deployment, from any machine
    greenroom demo [--yes | --no]
    greenroom console ...                      a web page over the store (``greenroom console --help``)
    greenroom node ...                         (see ``greenroom node --help``)

The store is ``--store``, else ``$GREENROOM_STORE``, else ``./greenroom.db``: a SQLite
file, or a PostgreSQL URL (``postgresql://user@db:5432/greenroom``; a password in it is
never printed). A turn's host is its owner in the store; an unfinished turn no live host
holds is listed as ``running (no live host)`` (``cluster.holders``). With a SQLite file, when
a runtime is running on it the command is sent to it and its answer printed; when none is,
the command is checked against the stored turn and queued in the store's inbox, to be
applied when the turn is loaded again. With PostgreSQL, the command is checked, queued in
the store's inbox (which wakes the turn's host), and, while any host is live, the reply that
host records is waited for, ``--timeout`` seconds. A command queued and not yet applied
(no host live, or none answered in time: its owner may just have been lost) is reported
as queued, with exit status 0 (``"queued": true``): it is applied once, when a host takes
the turn. A steering command is sent as ``--as NAME``, else as the OS user
(``getpass.getuser()``): its ``by``, recorded with what it decided and checked against a
tool's ``approvers``. ``--json`` prints machine-readable output. ``--store``, ``--json`` and
``--timeout`` go before or after the command.

Bad input (unknown turn or call, a turn that has ended, a bad option, a file that is not a
readable greenroom store) prints one line ``greenroom: <message>`` to stderr and exits with
status 2. Human output escapes control characters, so model text cannot drive the terminal;
``--json`` output is exact.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
from typing import Any, NoReturn

from messages import Error, ForkOrigin, ToolCallStarted, ToolFinished
from messages.codec import CodecError

from .cli_base import CliError, ask_runtime, columns, load, open_named_store, printable, say, seconds, store_path, when
from .cli_sessions import add_sessions
from .cli_steer import add_steering
from .cluster.holders import NO_LIVE_HOST, Holders, node_of
from .errors import ConfigurationError, StoreError
from .store.base import is_url
from .store.files import running_runtime
from .store.ownership import host_of
from .store.urls import redacted

__all__ = ["main"]

EXIT_BAD_INPUT = 2


# -- reading ---------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    store = open_named_store(args)
    summaries = store.log.summaries()
    holders = Holders.of(store, store_path(args))
    rows = [{**s.model_dump(), **holders.fields(s)} for s in summaries]
    table = [["TURN", "STATUS", "ROUND", "HOST", "WAITING SINCE", "PENDING APPROVALS"]]
    for s in summaries:
        status = holders.status(s) if s.status != "finished" else f"finished:{s.finish_reason}"
        pending = ", ".join(s.pending_approvals) or "-"
        table.append([s.turn_id, status, str(s.round), host_of(s.owner) if s.owner else "-", when(s.waiting_since), pending])
        if s.error:
            table[-1][-1] += f"  ({s.error})"
    lines = columns(table) if summaries else ["no turns"]
    loads, orphans = holders.loads(summaries)
    if holders.shared and (loads or orphans):  # a SQLite store is one machine's: no nodes to compare
        nodes = [["NODE", "HOSTS", "TURNS"], *[[n.node, str(n.hosts), str(n.turns)] for n in loads]]
        if orphans:
            nodes.append([f"({NO_LIVE_HOST})", "-", str(orphans)])
        lines += ["", *columns(nodes)]
    say(args, rows, "\n".join(lines))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    store = open_named_store(args)
    state = load(store, args.turn_id)
    events = store.log.events(args.turn_id, args.since)
    approvers = {t.name: t.approvers for t in state.tools}
    pending = [
        {"call_id": c.call.id, "name": c.call.name, "arguments": c.arguments, "approvers": approvers.get(c.call.name)}
        for c in state.batch or ()
        if c.status == "pending_approval"
    ]
    decisions = [
        {"call_id": c.call.id, "decision": c.decision, "by": c.decided_by, "reason": c.decision_reason}
        for c in state.batch or ()
        if c.decision is not None
    ]
    markers = {m.kind: m.model_dump(include={"reason", "cause", "by", "at"}) for m in (state.stop, state.cancel) if m}
    route = store.owners.route(args.turn_id)
    owner = route.host_id if route is not None else None
    holders = Holders.of(store, store_path(args))
    held = holders.held(owner) if state.phase != "finished" else None
    waiting = bool(held is False and state.requires and not holders.can_run(state.requires))
    data = {
        "turn_id": state.turn_id,
        "status": "finished" if state.phase == "finished" else state.phase,
        "finish_reason": state.finish_reason,
        "round": state.round,
        "forked_from": state.forked_from.model_dump(exclude={"kind"}) if state.forked_from else None,
        "owner": owner,
        "owner_host": host_of(owner) if owner else None,
        "owner_node": node_of(owner),
        "held": held,
        "requires": state.requires,
        "waiting_for_host": waiting,  # no live host has what it requires: it waits for one
        "messages": [m.model_dump(exclude={"kind"}, exclude_none=True) for m in state.messages],
        "pending_approvals": pending,
        "decisions": decisions,
        "stop": markers.get("stop"),
        "cancel": markers.get("cancel"),
        "events": [e.model_dump(mode="json") for e in events],
    }
    lines = [f"turn {state.turn_id}: {data['status']}" + (f" ({state.finish_reason})" if state.finish_reason else "")]
    if held is False:
        wanted = ", ".join(f"{k}={json.dumps(v)}" for k, v in state.requires.items())
        lines[0] += f" ({NO_LIVE_HOST}" + (f"; waiting for a host with {wanted}" if waiting else "")
        lines[0] += f"; last held by host {host_of(owner)})" if owner else ")"
    elif owner is not None:
        lines[0] += f", {'on' if held else 'ran on'} host {host_of(owner)} (node {node_of(owner)})"
    if (origin := state.forked_from) is not None:
        lines.append(f"forked from turn {origin.turn_id} at message {origin.at}" + _fork_detail(origin))
    lines.append("history:")
    for m in state.messages:
        extra = f" -> {', '.join(c.name + c.arguments for c in m.tool_calls)}" if m.tool_calls else ""
        who = f"{m.role}[{m.tool_call_id}]" if m.tool_call_id else m.role
        lines.append(f"  {who}: {m.content if m.content is not None else ''}{extra}")
    lines.append("pending approvals:" + ("" if pending else " none"))
    for p in pending:
        who = f" (approvers: {', '.join(p['approvers'])})" if p["approvers"] else ""
        lines.append(f"  {p['call_id']}: {p['name']}({json.dumps(p['arguments'])}){who}")
    lines.extend(["decisions:"] if decisions else [])
    for d in decisions:
        why = f": {d['reason']}" if d["reason"] else ""
        lines.append(f"  {d['call_id']}: {d['decision']}" + (f" by {d['by']}" if d["by"] else "") + why)
    for kind, mark in markers.items():
        who = f" by {mark['by']}" if mark["by"] else ""
        lines.append(f"{kind} requested{who} ({mark['cause']}): {mark['reason']}")
    lines.append(f"events (from {args.since}):")
    for e in events:
        detail = getattr(e, "text", None) or getattr(e, "finish_reason", None) or getattr(e, "call_id", None) or ""
        if isinstance(e, ToolCallStarted) and e.by:  # who approved, denied, stopped
            detail += f" approved by {e.by}"
        elif isinstance(e, ToolFinished):
            detail += f" {e.outcome}" + (f" by {e.by}" if e.by else "")
        elif isinstance(e, Error) and e.by:
            detail = f"{e.error_type} by {e.by}"
        lines.append(f"  #{e.seq} {e.kind} {detail}")
    say(args, data, "\n".join(lines))
    return 0


def _fork_detail(origin: ForkOrigin) -> str:
    seq = f" (event {origin.at_seq})" if origin.at_seq is not None else ""
    return seq + (", its last user message replaced" if origin.replaced else "")


# -- steering --------------------------------------------------------------------------------


def cmd_nodes(args: argparse.Namespace) -> int:
    from messages import ListNodes, NodeList

    info = args.admin or (None if is_url(store_path(args)) else running_runtime(store_path(args)))
    if info is None:
        raise CliError("no running runtime: give --admin HOST:PORT, or --store of a running runtime")
    answer = ask_runtime(info, ListNodes(request_id="cli"), args.timeout)
    if not isinstance(answer, NodeList):
        raise CliError(f"the runtime at {info['host']}:{info['admin_port']} answered {type(answer).__name__}")
    rows = [n.model_dump(exclude={"kind"}) for n in answer.nodes]
    table = [["NODE", "ROLE", "HOSTS", "CAPABILITIES"]]
    table += [[n.node, "leader" if n.leader else "member", str(n.hosts), json.dumps(n.capabilities)] for n in answer.nodes]
    say(args, rows, "\n".join(columns(table)) if answer.nodes else "no nodes")
    return 0


def cmd_own_options(args: argparse.Namespace) -> int:
    """``demo`` and ``node`` read their own options, so an option before them is refused."""
    raise CliError(f"{args.command} takes only its own options, after it (see greenroom {args.command} --help)")


def _admin_address(text: str) -> dict[str, Any]:
    """``HOST:PORT`` with a numeric port, as the runtime info ``ask_runtime`` takes (an argparse type)."""
    host, _, port = text.rpartition(":")
    if not host or not re.fullmatch(r"[0-9]{1,5}", port) or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT with a numeric port from 1 to 65535, not {text!r}")
    return {"host": host, "admin_port": int(port)}


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors end with one line ``greenroom: <message>`` and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"greenroom: {message}\n")


_COMMON_DEFAULTS: dict[str, Any] = {"store": None, "json": False, "timeout": 10.0}


def _add_common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """Add ``--store``, ``--json`` and ``--timeout``; only the top parser has defaults, so a subcommand does not
    overwrite a value given before it."""
    default = _COMMON_DEFAULTS if top else dict.fromkeys(_COMMON_DEFAULTS, argparse.SUPPRESS)
    parser.add_argument(
        "--store", default=default["store"], help="the turn store (default: $GREENROOM_STORE or ./greenroom.db)"
    )
    parser.add_argument("--json", action="store_true", default=default["json"], help="print JSON")
    parser.add_argument(
        "--timeout", type=seconds, default=default["timeout"], help="seconds to wait for a running runtime"
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``greenroom`` parser: ``--store``, ``--json`` and ``--timeout`` are read before or after any command."""
    parser = _Parser(prog="greenroom", description="See and steer greenroom turns.")
    _add_common(parser, top=True)
    common = _Parser(add_help=False)
    _add_common(common, top=False)
    sub = parser.add_subparsers(dest="command", required=True)

    turns = sub.add_parser("turns", parents=[common], help="list and show turns")
    tsub = turns.add_subparsers(dest="turns_command", required=True)
    tsub.add_parser("list", parents=[common], help="every turn of the store").set_defaults(fn=cmd_list)
    show = tsub.add_parser("show", parents=[common], help="one turn: history, pending approvals, events")
    show.add_argument("turn_id")
    show.add_argument("--since", type=int, default=0, help="events from this seq on")
    show.set_defaults(fn=cmd_show)

    add_sessions(sub, common, _admin_address)
    add_steering(sub, common)
    nodes = sub.add_parser("nodes", parents=[common], help="the nodes of a running runtime's deployment")
    nodes.add_argument(
        "--admin", type=_admin_address, default=None, help="HOST:PORT of the runtime's admin (key from $GREENROOM_KEY)"
    )
    nodes.set_defaults(fn=cmd_nodes)
    sub.add_parser("demo", help="run the demo turn (greenroom demo --help)").set_defaults(fn=cmd_own_options)
    sub.add_parser("console", help="serve the console page (greenroom console --help)").set_defaults(fn=cmd_own_options)
    sub.add_parser("node", help="run a node that joins a leader (greenroom node --help)").set_defaults(fn=cmd_own_options)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; bad input and an unreadable store end in one line on stderr and exit status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("demo", "node", "console"):  # they parse their own options
        from .cluster.node import main as node_main
        from .console.cli import main as console_main
        from .testing.demo import main as demo_main

        return {"demo": demo_main, "node": node_main, "console": console_main}[argv[0]](argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except (CliError, StoreError, CodecError, ConfigurationError) as exc:  # StoreError covers SnapshotError
        error = str(exc)
    except OSError as exc:  # a file that cannot be read, an address that cannot be reached
        error = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    except sqlite3.Error as exc:  # damage that the checks at opening did not see
        error = f"cannot use the turn store {redacted(store_path(args))}: {exc}"
    if args.json:
        print(json.dumps({"ok": False, "error": error}))
    print(f"greenroom: {' '.join(printable(error).split())}", file=sys.stderr)
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
