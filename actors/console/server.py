"""Serving the console: uvicorn on a thread of its own, bound to one address, with a token.

``Console(runtime=..., store=..., host="127.0.0.1", port=8765, key=None, users=None,
trust_proxy=False)``: ``start()`` binds the port (a port already taken raises
``ConfigurationError`` saying which, before anything runs), then serves on a daemon thread;
``url`` is the address to open, with the anonymous token (``?token=...``), as Jupyter prints
it; ``close()`` ends the streams and the server (bounded). Without ``key`` a fresh anonymous
token is drawn at each start, unless ``users`` are given (name to token): then there is
none, ``url`` carries no token, and each person signs in with their own. ``trust_proxy``:
a TLS reverse proxy is in front; its forwarded scheme and host are the console's origin
(``security``), and the loopback ``Host`` check is left to it (the public name is the
proxy's). uvicorn's own reading of forwarded headers is off: only the guard reads them.

``start_for`` serves a Runtime's console (``Runtime(console=ConsoleConfig(...))``): the
Runtime starts it once it has started, it prints its address to stderr unless ``quiet``,
and the Runtime closes it first when it closes.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import secrets
import socket
import sys
import threading
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError
from .app import build_app
from .config import ConsoleConfig
from .ports import RuntimeFace
from .security import logins
from .sources import Source, source_for

__all__ = ["Console", "console_app", "start_for"]


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _checked(key: str | None, users: Mapping[str, str] | None) -> None:
    try:
        logins(key, users)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


def console_app(
    runtime: RuntimeFace | None = None,
    *,
    store: str | None = None,
    key: str | None = None,
    users: Mapping[str, str] | None = None,
    trust_proxy: bool = False,
) -> Any:
    """The console as an ASGI app, to mount in an application of yours; every request must
    carry ``key`` or a ``users``' token (see ``security``). Over ``runtime`` (its store's
    turns when it has one) or over the store at ``store``."""
    _checked(key, users)
    return build_app(source_for(runtime, store), key, users=users, trust_proxy=trust_proxy)


class Console:
    """A served console (see the module docstring)."""

    def __init__(
        self,
        runtime: RuntimeFace | None = None,
        *,
        store: str | None = None,
        host: str = "127.0.0.1",
        port: int = 8765,
        key: str | None = None,
        users: Mapping[str, str] | None = None,
        trust_proxy: bool = False,
    ) -> None:
        self.users = dict(users or {})
        self.token = key if key is not None or self.users else secrets.token_urlsafe(24)
        _checked(self.token, self.users)
        self.host = host
        self.port = port
        self.trust_proxy = trust_proxy
        self._runtime = runtime
        self._store = store
        self._source: Source | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._app: Any = None

    @property
    def url(self) -> str:
        """The page's address, with the anonymous token if there is one."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/" + (f"?token={self.token}" if self.token is not None else "")

    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise ConfigurationError(
                    f"the console cannot listen on {self.host}:{self.port}: the port is already in use "
                    "(another console or program); choose another port (--port, or ConsoleConfig(port=...))"
                ) from None
            raise ConfigurationError(f"the console cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        sock.listen(64)
        sock.set_inheritable(False)
        self.port = sock.getsockname()[1]
        return sock

    def start(self) -> Console:
        """Bind, then serve on a daemon thread; returns once the server accepts requests."""
        import uvicorn

        sock = self._bind()
        self._source = source_for(self._runtime, self._store)
        hosts = None
        if _loopback(self.host) and not self.trust_proxy:
            names = {self.host, "127.0.0.1", "localhost", "[::1]", f"[{self.host}]"}
            hosts = {f"{n}:{self.port}" for n in names}
        self._app = build_app(self._source, self.token, hosts=hosts, users=self.users, trust_proxy=self.trust_proxy)
        config = uvicorn.Config(
            self._app,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=1,
            access_log=False,
            proxy_headers=False,  # the guard alone reads forwarded headers, and only when told to trust them
        )
        self._server = uvicorn.Server(config)
        started = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(self._serve(sock, started))
            except BaseException as exc:  # reported to start(), or logged by the thread
                failed.append(exc)
                started.set()

        self._thread = threading.Thread(target=run, name="greenroom-console", daemon=True)
        self._thread.start()
        started.wait(30)
        if failed or not self._server.started:
            sock.close()
            raise ConfigurationError(f"the console could not start on {self.host}:{self.port}: {failed[:1]}")
        return self

    async def _serve(self, sock: socket.socket, started: threading.Event) -> None:
        server = self._server
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        started.set()
        await task

    def close(self, timeout: float = 3.0) -> None:
        """End the live streams and the server, within ``timeout``."""
        if self._app is not None:
            self._app.app.state.closing = True
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        if self._source is not None:
            self._source.close()

    def __enter__(self) -> Console:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_for(runtime: RuntimeFace, config: ConsoleConfig) -> Console:
    """Start ``runtime``'s console (``Runtime(console=...)``) and say where it is."""
    console = Console(
        runtime, host=config.host, port=config.port, key=config.key, users=config.users, trust_proxy=config.trust_proxy
    ).start()
    if not config.quiet:
        print(f"greenroom console: {console.url}", file=sys.stderr, flush=True)
    return console
