"""What every ``greenroom`` command shares: its errors, the store it names, how it prints,
and how it reaches a running runtime's directory from any machine."""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import uuid
from typing import Any

from messages import Message, TurnState

from .store import TurnStore, open_store
from .store.base import is_url

__all__ = [
    "CliError", "ask_runtime", "columns", "load", "open_named_store", "printable", "request_id", "say", "seconds",
    "store_path", "when",
]  # fmt: skip

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # Unicode category Cc but newline and tab


class CliError(Exception):
    """Bad input: printed to stderr, exit status 2."""


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab escaped (ESC as ``\\x1b``): it cannot drive a terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def store_path(args: argparse.Namespace) -> str:
    return args.store or os.environ.get("GREENROOM_STORE") or "greenroom.db"


def open_named_store(args: argparse.Namespace) -> TurnStore:
    """The store the command names, which must already be a readable greenroom store; else it fails here, naming it
    (a URL without its password)."""
    path = store_path(args)
    if not is_url(path) and not os.path.exists(path):
        raise CliError(f"no turn store at {path} (use --store or $GREENROOM_STORE)")
    return open_store(path, create=False)


def when(ts: float | None) -> str:
    if not ts:
        return "-"
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def say(args: argparse.Namespace, data: Any, human: str) -> None:
    """Print ``data`` as exact JSON with ``--json``, else ``human`` with its control characters escaped."""
    print(json.dumps(data, indent=2, default=str) if args.json else printable(human))


def columns(rows: list[list[str]]) -> list[str]:
    """``rows`` (the first is the header) in columns as wide as their widest cell, counts to the right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = [h in ("ROUND", "HOSTS", "TURNS") for h in rows[0]]
    return ["  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right)).rstrip() for row in rows]


def load(store: TurnStore, turn_id: str) -> TurnState:
    try:
        return store.log.load(turn_id)
    except KeyError:
        raise CliError(f"unknown turn {turn_id}") from None


def ask_runtime(info: dict[str, Any], command: Message, timeout: float) -> Any:
    """Send ``command`` to the directory of the runtime or leader whose admin ``info`` names,
    from any machine (``cluster.remote``); its answer. The key comes from the runtime file,
    else from ``$GREENROOM_KEY``/``$GREENROOM_KEY_FILE``."""
    from .cluster.remote import Unreachable, ask_once

    if "answer_within" in type(command).model_fields:  # a host that does not know the turn answers before then
        command = command.model_copy(update={"answer_within": timeout})
    try:
        key = bytes.fromhex(info["key"]) if info.get("key") else None
        return ask_once(info["host"], info["admin_port"], key, command, timeout)
    except (Unreachable, ValueError) as exc:
        raise CliError(str(exc)) from None


def request_id() -> str:
    """A command's own id: a turn that gets it twice (sent again after an outage) applies it once."""
    return f"cli-{uuid.uuid4().hex[:16]}"


def seconds(text: str) -> float:
    """A number of seconds, at least 0 (an argparse type: anything else is a usage error)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0:  # refuses nan too
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, not {text!r}")
    return value
