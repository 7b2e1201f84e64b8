"""The ``greenroom`` commands that steer a turn: each sent to its turn and answered.

On a SQLite store, to the runtime running on it (found by ``<store>.runtime.json``); with none
running, checked against the stored turn with its own rules and queued in the store's inbox.
On PostgreSQL, through the store's inbox, which wakes the turn's host; its reply is waited for.
A queued command is reported as queued, exit status 0: it is applied once, when its turn's host
or the next runtime takes it. Each is sent as ``--as NAME``, else as the OS user (``by``).
"""

from __future__ import annotations

import argparse
import getpass
import json
from typing import Any

from messages import (
    CancelTurn, ChatMessage, ControlReply, Message, PauseTurn, RespondToApprovals, ResumeTurn, SendInput, StopTurn,
    ToolApprovalResponse,
)  # fmt: skip
from messages.principals import check_principal

from .cli_base import CliError, ask_runtime, load, open_named_store, request_id, say, seconds, store_path
from .console.commands import OFFLINE, refusal, through_store
from .store import TurnStore
from .store.base import is_url
from .store.files import running_runtime
from .store.ownership import host_of

__all__ = ["add_steering", "steer"]


def steer(args: argparse.Namespace, command: Message, verb: str) -> int:
    """Send a command to its turn; print what became of it: applied (by whom), or queued in the
    store's inbox (exit status 0 either way: a queued command is applied once, when its turn's
    host or the next runtime takes it)."""
    path = store_path(args)
    store = open_named_store(args)
    state = load(store, args.turn_id)
    if state.phase == "finished":
        raise CliError(f"turn {args.turn_id} has already finished ({state.finish_reason})")
    base = {"turn_id": args.turn_id, "ok": True, "by": getattr(command, "by", None)}
    if is_url(path):
        return _steer_shared(args, store, command, verb)
    info = running_runtime(path)  # None for a stale runtime file: its pid is dead or its lock free
    if info is not None:
        reply = ask_runtime(info, command, args.timeout)
        if not isinstance(reply, ControlReply):
            raise CliError(f"the runtime (pid {info.get('pid', '?')}) answered {type(reply).__name__}")
        if not reply.ok:
            raise CliError(reply.message)
        data = {**base, "sent_to": "runtime", "queued": False, "pid": info["pid"], "message": reply.message}
        say(args, data, f"{verb}: done by the running runtime (pid {info['pid']})")
        return 0
    refused = refusal(store, command)  # the stored turn's own rules
    if refused is not None:
        raise CliError(refused.message)
    command_id = store.inbox.add(args.turn_id, command)
    data = {**base, "sent_to": "store", "queued": True, "command_id": command_id, "message": OFFLINE}
    say(args, data, f"{verb}: {OFFLINE}")
    return 0


def _steer_shared(args: argparse.Namespace, store: TurnStore, command: Any, verb: str) -> int:
    """Through a store every node reaches: queued, its host woken, its reply waited for."""
    reply, command_id, by_host = through_store(store, command, args.timeout)
    if not reply.ok:
        raise CliError(reply.message)
    data = {"turn_id": args.turn_id, "command_id": command_id, "ok": True, "by": command.by, "message": reply.message}
    if not by_host:
        say(args, {**data, "sent_to": "store", "queued": True}, f"{verb}: {reply.message}")
        return 0
    route = store.owners.route(args.turn_id)
    host = host_of(route.host_id) if route is not None and route.host_id else None
    say(args, {**data, "sent_to": "host", "queued": False, "host": host}, f"{verb}: done by host {host}")
    return 0


def principal(text: str) -> str:
    """A principal (``--as``; an argparse type: anything else is a usage error)."""
    try:
        return check_principal(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def os_user() -> str | None:
    """The OS user's name (``getpass.getuser()``), or None when it has none that is a principal."""
    try:
        return check_principal(getpass.getuser())
    except (OSError, KeyError, ValueError):
        return None


def sender(args: argparse.Namespace) -> dict[str, Any]:
    """Who sends the command, and its own request id."""
    return {"by": args.by if args.by is not None else os_user(), "request_id": request_id()}


def cmd_decide(args: argparse.Namespace) -> int:
    approved = args.command == "approve"
    arguments = _arguments(args.arguments) if approved else None
    response = ToolApprovalResponse(call_id=args.call_id, approved=approved, reason=args.reason, arguments=arguments)
    command = RespondToApprovals(turn_id=args.turn_id, responses=[response], **sender(args))
    return steer(args, command, "approved" if approved else "denied")


def _arguments(text: str | None) -> dict[str, Any] | None:
    """``--arguments``: a JSON object, the call's arguments as edited; anything else is refused."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CliError(f"--arguments is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CliError(f"--arguments must be a JSON object (the call's arguments), not {type(value).__name__}")
    return value


def cmd_send_input(args: argparse.Namespace) -> int:
    command = SendInput(
        turn_id=args.turn_id, messages=[ChatMessage.user(args.text)], when="now" if args.now else "next_call",
        stop_calls=args.stop_calls, deny_pending=args.deny_pending, **sender(args),
    )  # fmt: skip
    return steer(args, command, "input sent")


def cmd_pause(args: argparse.Namespace) -> int:
    pause = PauseTurn(turn_id=args.turn_id, when="now" if args.now else "next_step", reason=args.reason, **sender(args))
    return steer(args, pause, "paused")


def cmd_resume(args: argparse.Namespace) -> int:
    messages = [ChatMessage.user(args.text)] if args.text is not None else None
    return steer(args, ResumeTurn(turn_id=args.turn_id, messages=messages, **sender(args)), "resumed")


def cmd_stop(args: argparse.Namespace) -> int:
    return steer(args, StopTurn(turn_id=args.turn_id, reason=args.reason, **sender(args)), "stopped")


def cmd_cancel(args: argparse.Namespace) -> int:
    command = CancelTurn(turn_id=args.turn_id, reason=args.reason, grace=args.grace, **sender(args))
    return steer(args, command, "cancelled")


def _as(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--as", dest="by", type=principal, default=None, metavar="NAME",
        help="who sends it (default: the OS user); checked against a tool's approvers",
    )  # fmt: skip


def add_steering(sub: Any, common: argparse.ArgumentParser) -> None:
    """The steering commands, on the ``greenroom`` parser's subcommands."""
    for verb in ("approve", "deny"):
        p = sub.add_parser(verb, parents=[common], help=f"{verb} a pending tool call")
        p.add_argument("turn_id")
        p.add_argument("call_id")
        p.add_argument("--reason", default=None)
        _as(p)
        if verb == "approve":
            p.add_argument("--arguments", default=None, metavar="JSON", help="the call's arguments, edited (a JSON object)")
        p.set_defaults(fn=cmd_decide)
    stop = sub.add_parser("stop", parents=[common], help="stop a turn now")
    stop.add_argument("turn_id")
    stop.add_argument("--reason", default="stopped from the command line")
    _as(stop)
    stop.set_defaults(fn=cmd_stop)
    cancel = sub.add_parser("cancel", parents=[common], help="cancel a turn at its next step")
    cancel.add_argument("turn_id")
    cancel.add_argument("--reason", default="cancelled from the command line")
    cancel.add_argument("--grace", type=seconds, default=None, help="seconds before the cancel becomes a stop")
    _as(cancel)
    cancel.set_defaults(fn=cmd_cancel)
    send = sub.add_parser("send-input", parents=[common], help="new input for a running turn")
    send.add_argument("turn_id")
    send.add_argument("text")
    send.add_argument("--now", action="store_true", help="abort the model's stream in flight and ask it again")
    send.add_argument("--stop-calls", action="store_true", help="with --now: stop the calls running now")
    send.add_argument("--deny-pending", action="store_true", help="deny the calls waiting for approval")
    _as(send)
    send.set_defaults(fn=cmd_send_input)
    pause = sub.add_parser("pause", parents=[common], help="hold a turn before its next model call")
    pause.add_argument("turn_id")
    pause.add_argument("--now", action="store_true", help="abort the model's stream in flight first")
    pause.add_argument("--reason", default="paused from the command line")
    _as(pause)
    pause.set_defaults(fn=cmd_pause)
    resume = sub.add_parser("resume", parents=[common], help="let a paused turn go on")
    resume.add_argument("turn_id")
    resume.add_argument("text", nargs="?", default=None, help="input that enters the history first")
    _as(resume)
    resume.set_defaults(fn=cmd_resume)
