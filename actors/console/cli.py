"""``greenroom console``: serve the console over a store, until interrupted.

    greenroom console [--store PATH|URL] [--host 127.0.0.1] [--port 8765] [--key-file FILE]
                      [--user NAME=TOKEN ...] [--users-file FILE] [--trust-proxy]

The store is ``--store``, else ``$GREENROOM_STORE``, else ``./greenroom.db``; it must exist
(a SQLite file, or a PostgreSQL URL whose password is never printed).
The address to open, with its token, is printed on the first line of standard output
(``greenroom console: http://127.0.0.1:8765/?token=...``). ``--key-file`` (or
``$GREENROOM_CONSOLE_KEY``) sets a key of at least 16 characters instead of a fresh token.
That token (or key) is anonymous: the commands sent with it name nobody (``by``).
``--user NAME=TOKEN`` (repeated; split at the first ``=``) and ``--users-file`` (one
``NAME=TOKEN`` a line; blank lines and ``#`` comments skipped) name the console's users,
each with a token of its own (16 characters or more): each person signs in with theirs and
their commands carry their name. With users and no key, no anonymous token is drawn and the
address is printed without one. A token on the command line is visible to other local users
in the process list: prefer ``--users-file`` (mode 0600) on a shared machine.
``--trust-proxy``: behind a TLS reverse proxy, take the scheme and host it forwards
(``Forwarded``, ``X-Forwarded-Proto``/``-Host``) as the console's own; listen where only
the proxy reaches it.
Commands go to the runtime running on the store, or to the store's inbox when none runs
(with PostgreSQL, the inbox wakes the turn's host, whose answer is shown).
Bad input (no store, a port in use, a short key, the extra not installed) prints one line
``greenroom: <message>`` to stderr and exits with status 2; SIGINT or SIGTERM end it with 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

__all__ = ["main"]


def _port(text: str) -> int:
    """A TCP port, 0 to 65535 (an argparse type)."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 to 65535, not {text!r}")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="greenroom console", description="Serve the console over a turn store.")
    parser.add_argument("--store", default=None, help="the turn store (default: $GREENROOM_STORE or ./greenroom.db)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8765, help="the port (default: 8765; 0 takes a free one)")
    parser.add_argument("--key-file", default=None, help="a file holding the key (default: $GREENROOM_CONSOLE_KEY)")
    parser.add_argument(
        "--user", action="append", type=_user, default=[], metavar="NAME=TOKEN",
        help="a named user and its token (repeat for each); their commands carry their name",
    )  # fmt: skip
    parser.add_argument("--users-file", default=None, help="a file of NAME=TOKEN lines, one user each")
    parser.add_argument(
        "--trust-proxy", action="store_true",
        help="behind a TLS reverse proxy: its forwarded scheme and host are the console's",
    )  # fmt: skip
    return parser


def _user(text: str) -> tuple[str, str]:
    """``NAME=TOKEN`` (an argparse type; the token is never repeated in an error)."""
    name, sep, token = text.partition("=")
    if not sep or not name or not token:
        raise argparse.ArgumentTypeError("must be NAME=TOKEN")
    return name, token


def _users(args: argparse.Namespace) -> dict[str, str]:
    """The named users of ``--user`` and ``--users-file``; a name given twice is an error."""
    pairs = list(args.user)
    if args.users_file is not None:
        with open(args.users_file) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    pairs.append(_user(line))
                except argparse.ArgumentTypeError:
                    raise ValueError(f"{args.users_file}, line {n}: must be NAME=TOKEN") from None
    users: dict[str, str] = {}
    for name, token in pairs:
        if name in users:
            raise ValueError(f"the console user {name!r} is given twice")
        users[name] = token
    return users


def _fail(message: str) -> int:
    print(f"greenroom: {message}", file=sys.stderr)
    return 2


def _key(args: argparse.Namespace) -> str | None:
    if args.key_file is not None:
        with open(args.key_file) as f:
            return f.read().strip()
    return os.environ.get("GREENROOM_CONSOLE_KEY") or None


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGINT or SIGTERM; see the module docstring."""
    args = _parser().parse_args(argv)
    from ..store.base import is_url
    from ..store.urls import redacted

    store = args.store or os.environ.get("GREENROOM_STORE") or "greenroom.db"
    if not is_url(store):
        if not os.path.exists(store):
            return _fail(f"no turn store at {store} (use --store or $GREENROOM_STORE)")
        store = os.path.abspath(store)
    from . import EXTRA

    try:
        from .server import Console
    except ImportError as exc:
        return _fail(f"{EXTRA} ({exc})")
    from ..errors import ConfigurationError, StoreError

    try:
        key, users = _key(args), _users(args)
        trust = args.trust_proxy
        console = Console(store=store, host=args.host, port=args.port, key=key, users=users, trust_proxy=trust)
        console.start()
    except (ConfigurationError, StoreError, OSError, ValueError) as exc:
        return _fail(str(exc))
    done = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        done.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(f"greenroom console: {console.url}", flush=True)
    print(f"serving the store {redacted(store)}; Ctrl-C ends it", file=sys.stderr, flush=True)
    if users:
        print(f"users: {', '.join(sorted(users))} (each signs in with their own token)", file=sys.stderr, flush=True)
    while not done.wait(3600):
        pass
    console.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
