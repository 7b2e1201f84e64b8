"""The ``greenroom`` commands that read sessions: ``sessions list`` and ``sessions show ID``.

Both read the store alone (no runtime need run): a session is its ordered turns and the
history they added (``store.sessions``); each turn's status is its stored state's.
"""

from __future__ import annotations

import argparse
from typing import Any

from .cli_base import CliError, columns, open_named_store, say, when
from .store import TurnStore

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
    turns = [{"turn_id": t, **_status(store, t)} for t in record.turns]
    data = {
        "session_id": record.session_id,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "turns": turns,
        "messages": [m.model_dump(exclude={"kind"}, exclude_none=True) for m in record.messages],
    }
    lines = [f"session {record.session_id}: {len(turns)} turn{'' if len(turns) == 1 else 's'}, "
             f"{len(record.messages)} messages, updated {when(record.updated_at)}", "turns:"]  # fmt: skip
    lines += [f"  {i}. {t['turn_id']}: {t['status']}" + (f" ({t['finish_reason']})" if t["finish_reason"] else "")
              for i, t in enumerate(turns)] or ["  none"]  # fmt: skip
    lines.append("history:")
    for m in record.messages:
        extra = f" -> {', '.join(c.name + c.arguments for c in m.tool_calls)}" if m.tool_calls else ""
        who = f"{m.role}[{m.tool_call_id}]" if m.tool_call_id else m.role
        lines.append(f"  {who}: {m.content if m.content is not None else ''}{extra}")
    say(args, data, "\n".join(lines))
    return 0


def _status(store: TurnStore, turn_id: str) -> dict[str, Any]:
    """A session's turn as the turn log has it (a turn the log no longer has is ``unknown``)."""
    try:
        state = store.log.load(turn_id)
    except KeyError:
        return {"status": "unknown", "finish_reason": None}
    return {"status": "finished" if state.phase == "finished" else state.phase, "finish_reason": state.finish_reason}


def add_sessions(sub: Any, common: argparse.ArgumentParser) -> None:
    """``sessions list`` and ``sessions show``, on the ``greenroom`` parser's subcommands."""
    sessions = sub.add_parser("sessions", parents=[common], help="list and show sessions")
    ssub = sessions.add_subparsers(dest="sessions_command", required=True)
    ssub.add_parser("list", parents=[common], help="every session of the store").set_defaults(fn=cmd_sessions_list)
    show = ssub.add_parser("show", parents=[common], help="one session: its turns and its history")
    show.add_argument("session_id")
    show.set_defaults(fn=cmd_sessions_show)
