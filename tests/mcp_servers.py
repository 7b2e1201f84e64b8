"""A real MCP server for the tests, written with the ``mcp`` package's server API (MCPServer,
formerly FastMCP), over stdio or Streamable HTTP:

    python tests/mcp_servers.py stdio MARKS
    python tests/mcp_servers.py http PORT MARKS         # PORT 0: any free port
    python tests/mcp_servers.py http-legacy PORT MARKS  # as a 2025 server: sessions by id

Over HTTP it binds and listens first, then prints the port it listens on (one line): from
then on a connection waits in the backlog until the server answers it. ``http-legacy``
refuses ``server/discover``, so a client falls back to the ``initialize`` handshake, gets
an ``mcp-session-id`` and sends ``notifications/cancelled`` as a POST.

``MARKS`` is a directory where tools leave marker files the tests wait on: ``slow`` and
``gate`` write ``<tag>.started`` once they run, ``slow`` writes ``<tag>.cancelled`` when its
handler is cancelled (the server saw the client's cancellation); ``gate`` returns once the
test creates ``<tag>.release``. ``crash`` ends the process in the middle of the call;
after ``stubborn`` only SIGKILL ends it.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("greenroom-tests", log_level="WARNING")
MARKS = Path(sys.argv[-1]) if len(sys.argv) > 2 else Path(".")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(why: str) -> str:
    """Always fails, saying why."""
    raise ToolError(f"cannot: {why}")


@server.tool()
async def steps(n: int, ctx: Context) -> str:
    """Report n steps of progress, then finish."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
    return "done"


@server.tool()
async def slow(tag: str) -> str:
    """Wait until cancelled."""
    (MARKS / f"{tag}.started").touch()
    try:
        await anyio.sleep(3600)
    except anyio.get_cancelled_exc_class():
        (MARKS / f"{tag}.cancelled").touch()
        raise
    return "slept"


@server.tool()
async def gate(tag: str) -> str:
    """Wait until the test opens the gate."""
    (MARKS / f"{tag}.started").touch()
    while not (MARKS / f"{tag}.release").exists():
        await anyio.sleep(0.01)
    return "released"


@server.tool()
def crash() -> str:
    """End this server's process in the middle of the call."""
    os._exit(3)


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
async def stubborn() -> int:
    """From now on ignore SIGTERM and do not exit at the end of input; return this process's id."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    atexit.register(time.sleep, 3600)  # only SIGKILL ends this process now
    return os.getpid()


@server.tool()
def env_value(name: str) -> str:
    """An environment variable of this server's process ('' when unset)."""
    return os.environ.get(name, "")


@server.tool()
def env_digest(name: str) -> str:
    """The SHA-256 of an environment variable of this server's process (of '' when unset)."""
    return hashlib.sha256(os.environ.get(name, "").encode()).hexdigest()


@server.tool()
def complain(text: str) -> str:
    """Write a traceback to this server's stderr, then answer."""
    print(f'Traceback (most recent call last):\n  File "tool.py", line 1, in complain\nValueError: {text}', file=sys.stderr)
    sys.stderr.flush()
    return "complained"


@server.tool()
def header(name: str, ctx: Context) -> str:
    """A header of the HTTP request that made this call ('' when absent)."""
    return (ctx.headers or {}).get(name.lower(), "")


class Legacy:
    """ASGI: answer ``server/discover`` with "method not found", as a server of the 2025 spec."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if isinstance(request, dict) and request.get("method") == "server/discover":
            error = {
                "jsonrpc": "2.0",
                "id": request.get("id"),
                "error": {"code": -32601, "message": "Method not found"},
            }
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": json.dumps(error).encode()})
            return None
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)


def serve_http(port: int, legacy: bool) -> None:
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    print(sock.getsockname()[1], flush=True)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(Legacy(app) if legacy else app, log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    if sys.argv[1].startswith("http"):
        serve_http(int(sys.argv[2]), legacy=sys.argv[1] == "http-legacy")
    else:
        server.run()
