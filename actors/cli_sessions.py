"""The ``greenroom`` commands of conversations: ``sessions list``, ``sessions show ID`` and
``fork TURN --at N``.

``sessions`` read the store alone (no runtime need run): a session is its ordered turns and
the history they added (``store.sessions``); each turn's status is its stored state's.
``fork`` cuts the stored turn's history (``turn.forking``, as ``runtime.fork`` does) and sends
a ``StartTurn`` with the original's provider, tools and options to the directory of the
runtime running on the store (a SQLite file), or of the one ``--admin`` names (PostgreSQL):
a turn needs a host to run on. Its events are the store's: ``greenroom turns show NEW``.
"""

from __future__ import annotations

import argparse
from typing import Any

from messages import ControlReply, StartTurn, new_turn_id

from .cli_base import CliError, ask_runtime, columns, load, open_named_store, say, store_path, when
from .store.base import session_turns
from .store.files import running_runtime
from .turn.forking import ForkError, cut

__all__ = ["add_sessions"]


def cmd_sessions_list(args: argparse.Namespace) -> int:
    summaries = open_named_store(args).sessions.summaries()
    rows = [{"session_id": s.session_id, "turns": s.turns, "created_at": s.created_at, "updated_at": s.updated_at}
            for s in summaries]  # fmt: skip
    table = [["SESSION", "TURNS", "CREATED", "UPDATED"]]
    table += [[s.session_id, str(s.turns), when(s.created_at), when(s.updated_at)] for s in summaries]
    say(args, rows, "\n".join(columns(table)) if summaries else "no sessions")
    return 0


def cmd_sessions_show(args: argparse.Namespace) -> int:
    store = open_named_store(args)
    try:
        record = store.sessions.load(args.session_id)
    except KeyError:
        raise CliError(f"unknown session {args.session_id}") from None
    turns = session_turns(store.log, record.turns)
    data = {
        "session_id": record.session_id,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "turns": turns,
        "running": record.running,
        "queued": record.queued,
        "messages": [m.model_dump(exclude={"kind"}, exclude_none=True) for m in record.messages],
    }
    lines = [f"session {record.session_id}: {len(turns)} turn{'' if len(turns) == 1 else 's'}, "
             f"{len(record.messages)} messages, updated {when(record.updated_at)}", "turns:"]  # fmt: skip
    lines += [f"  {i}. {t['turn_id']}: {t['status']}" + (f" ({t['finish_reason']})" if t["finish_reason"] else "")
              for i, t in enumerate(turns)] or ["  none"]  # fmt: skip
    lines.append(f"running: {record.running or 'none'}")
    lines.append("queued: " + (", ".join(record.queued) or "none"))
    lines.append("history:")
    for m in record.messages:
        extra = f" -> {', '.join(c.name + c.arguments for c in m.tool_calls)}" if m.tool_calls else ""
        who = f"{m.role}[{m.tool_call_id}]" if m.tool_call_id else m.role
        lines.append(f"  {who}: {m.content if m.content is not None else ''}{extra}")
    say(args, data, "\n".join(lines))
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    store = open_named_store(args)
    state = load(store, args.turn_id)
    events = store.log.events(args.turn_id) if args.at_seq is not None else []
    try:
        kept, origin = cut(args.turn_id, state.messages, events, args.at, args.at_seq, args.text)
    except ForkError as exc:
        raise CliError(str(exc)) from None
    info = args.admin or running_runtime(store_path(args))
    if info is None:
        raise CliError(
            "no running runtime to start the fork on: give --admin HOST:PORT, or --store of a running runtime"
        )
    new = args.new_id or new_turn_id()
    start = StartTurn(
        turn_id=new, messages=kept, tools=state.tools, provider=state.provider, options=state.options,
        request_id=f"start:{new}", forked_from=origin,
    )  # fmt: skip
    reply = ask_runtime(info, start, args.timeout)
    if not isinstance(reply, ControlReply):
        raise CliError(f"the runtime at {info['host']}:{info['admin_port']} answered {type(reply).__name__}")
    if not reply.ok:
        raise CliError(reply.message)
    data = {"turn_id": new, "forked_from": origin.model_dump(exclude={"kind"}), "admitted": reply.message}
    say(args, data, f"turn {new}: forked from turn {args.turn_id} at message {origin.at} ({reply.message})")
    return 0


def add_sessions(sub: Any, common: argparse.ArgumentParser, admin: Any) -> None:
    """``sessions list``, ``sessions show`` and ``fork``, on the ``greenroom`` parser's subcommands
    (``admin``: the argparse type of ``--admin``)."""
    sessions = sub.add_parser("sessions", parents=[common], help="list and show sessions")
    ssub = sessions.add_subparsers(dest="sessions_command", required=True)
    ssub.add_parser("list", parents=[common], help="every session of the store").set_defaults(fn=cmd_sessions_list)
    show = ssub.add_parser("show", parents=[common], help="one session: its turns and its history")
    show.add_argument("session_id")
    show.set_defaults(fn=cmd_sessions_show)
    fork = sub.add_parser("fork", parents=[common], help="start a turn from another's history up to a step")
    fork.add_argument("turn_id")
    where = fork.add_mutually_exclusive_group(required=True)
    where.add_argument("--at", type=int, default=None, help="the new turn's history: the first N messages")
    where.add_argument("--at-seq", type=int, default=None, help="the history as it stood at this event seq")
    fork.add_argument("--text", default=None, help="replace the last user message kept with this text")
    fork.add_argument("--new-id", default=None, help="the new turn's id (default: a fresh one)")
    fork.add_argument("--admin", type=admin, default=None, help="HOST:PORT of a running runtime's admin")
    fork.set_defaults(fn=cmd_fork)
