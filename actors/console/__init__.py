"""The console: a local web page to see every turn live and decide, stop or cancel from it.

Runs in: the process that serves it: a Runtime's owner (``Runtime(console=...)``, or an
application that mounts ``console_app``), or ``greenroom console`` over a store. It is a
web server (Starlette on uvicorn, the ``console`` extra) on a thread of that process; the
page is static HTML and script without a build step (``static/``).

May import: ``client`` (a Runtime's streams and commands, inside functions), ``store``,
``turn`` (the rules, to check a command against a stored turn), ``cluster`` and ``wire``
(to reach a runtime of another process, as the command line does), ``messages`` and the
shared modules; Starlette and uvicorn only inside ``app``, ``security``'s users and
``server``, so that importing this package needs neither.

``sources`` reads turns (a store, or a Runtime's streams), ``model`` and ``timeline`` turn
events into what the page shows, ``commands`` delivers decisions, ``security`` guards every
request, ``app`` holds the routes, ``server`` serves, ``cli`` is ``greenroom console``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError
from .config import ConsoleConfig
from .ports import RuntimeFace

__all__ = ["ConsoleConfig", "console_app", "start_console"]

EXTRA = (
    "the console needs the console extra: pip install -e '.[console]' in a checkout of greenroom, "
    "or its wheel with [console] (it is not on PyPI: see docs/install.md)"
)


class _NoConsole:
    """What a Runtime without a console holds."""

    def close(self, timeout: float = 1.0) -> None:
        pass


NO_CONSOLE = _NoConsole()


def start_console(runtime: RuntimeFace, config: ConsoleConfig | bool | None) -> Any:
    """Start ``runtime``'s console (``Runtime(console=...)``: ``True`` or a ``ConsoleConfig``),
    printing its address to stderr; ``NO_CONSOLE`` for None or False."""
    if not config:
        return NO_CONSOLE
    try:
        from .server import start_for
    except ImportError as exc:
        raise ConfigurationError(f"{EXTRA} ({exc})") from None
    return start_for(runtime, ConsoleConfig() if config is True else config)


def console_app(
    runtime: RuntimeFace | None = None,
    *,
    store: str | None = None,
    key: str | None = None,
    users: Mapping[str, str] | None = None,
    trust_proxy: bool = False,
) -> Any:
    """The console as an ASGI app to mount in an application of yours (``Mount("/greenroom",
    console_app(runtime, key=...))``); every request must carry ``key`` or the token of one
    of ``users`` (name to token: their commands carry their name), see ``security``. Over
    ``runtime`` (its store's turns when it has one) or the store at ``store``."""
    try:
        from .server import console_app as build
    except ImportError as exc:
        raise ConfigurationError(f"{EXTRA} ({exc})") from None
    return build(runtime, store=store, key=key, users=users, trust_proxy=trust_proxy)
