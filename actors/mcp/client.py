"""The official ``mcp`` package's client, as greenroom uses it: a server's transport and
session, a call, and what its outcome becomes.

Imported only where an MCP server is reached (a TurnHost's event loop, ``mcp_tools`` in the
caller's process), never when ``actors`` is imported: greenroom works without the extra.

- ``open_client`` connects (stdio: starts the process; Streamable HTTP: opens the session),
  within ``ServerParams.timeout`` seconds, and tells its ``Connection`` when the server's
  stream ends (a stdio server that exited) or when an HTTP server answers 404 to the
  session's id (it restarted, or let the session expire), so that the session is replaced;
- ``call`` runs one ``tools/call``; one refused because its session expired is sent once
  more, on a new session (the server did not run it). Progress notifications go to
  ``progress``; a result becomes the call's data (the structured content if there is one,
  else the content: a single text block as its text), an ``isError`` result a
  ``ToolError`` with its text, a server gone in the middle of the call a ``ToolError``
  saying so (``ServerParams.lost``). When the caller's task is cancelled (a stop), the
  ``mcp`` dispatcher sends ``notifications/cancelled`` for the request before the
  cancellation goes on (over Streamable HTTP at protocol 2026-07-28 it closes the
  request's stream instead, which that version defines as the cancellation).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import metadata
from types import TracebackType
from typing import Any, Self

import anyio
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CONNECTION_CLOSED, CallToolResult, Implementation, TextContent
from mcp.types import Tool as ListedTool

from ..errors import ToolError
from ..lifecycle.processes import dies_with_parent
from ..logs import logger
from .session import Connection, ServerParams, connection, stderr_line

__all__ = ["call", "describe", "failure", "list_server_tools", "open_client", "serve"]

log = logger("greenroom.mcp")

_PAGES = 100  # a tools/list that never ends cannot hang mcp_tools()


def _client_info() -> Implementation:
    try:
        version = metadata.version("greenroom")
    except metadata.PackageNotFoundError:
        version = "0"
    return Implementation(name="greenroom", version=version)


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    """What went wrong, in one line (the first leaf of an exception group)."""
    exc = _leaf(exc)
    if isinstance(exc, (MCPError, ToolError)):
        return str(exc.message if isinstance(exc, MCPError) else exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def failure(server: ServerParams, exc: BaseException, what: str) -> ToolError:
    """Why ``server`` could not be reached or listed, as the message a call or ``mcp_tools`` gives."""
    leaf = _leaf(exc)
    return leaf if isinstance(leaf, ToolError) else ToolError(f"{server.where} {what}: {describe(leaf)}")


class _Watched:
    """A transport's server-to-client stream; ``on_end`` runs when it ends (the server exited
    or closed it), so the session stops taking calls at once rather than at the next one."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class _StderrPipe:
    """A stdio server's stderr: a pipe whose lines a daemon thread hands to ``stderr_line``
    (greenroom's log), never to the application's stderr. It ends when the server does."""

    def __init__(self, where: str) -> None:
        r, w = os.pipe()
        self.writer = os.fdopen(w, "w")
        reader = os.fdopen(r, "r", errors="replace")
        threading.Thread(target=self._pump, args=(reader, where), name="greenroom-mcp-stderr", daemon=True).start()

    @staticmethod
    def _pump(reader: Any, where: str) -> None:
        with reader:
            for line in reader:
                stderr_line(where, line.rstrip("\n"))

    def close(self) -> None:
        """Close this process's end: the server holds its own once it has started."""
        self.writer.close()


@contextlib.asynccontextmanager
async def _transport(server: ServerParams, conn: Connection | None) -> AsyncIterator[tuple[Any, Any]]:
    env, headers = server.secrets()  # read now, in this process; never stored anywhere
    on_end = conn.close if conn is not None else (lambda: None)
    if server.url is not None:
        http = create_mcp_http_client(headers={**server.headers, **headers} or None)
        if conn is not None:
            http.event_hooks["response"].append(_expiry_hook(conn))
        async with http, streamable_http_client(server.url, http_client=http) as (read, write):
            yield _Watched(read, on_end), write
        return
    environment = {**server.env, **env} or None
    program, *args = dies_with_parent(server.command, server.cwd, (environment or {}).get("PATH"))
    params = StdioServerParameters(command=program, args=args, env=environment, cwd=server.cwd)
    errlog = _StderrPipe(server.where)
    try:
        async with stdio_client(params, errlog=errlog.writer) as (read, write):
            errlog.close()
            yield _Watched(read, on_end), write
    finally:
        errlog.close()


def _expiry_hook(conn: Connection) -> Callable[[Any], Awaitable[None]]:
    """An HTTP 404 to a request that carries the session's id: the server no longer knows
    the session (spec: the client must start a new one)."""

    async def hook(response: Any) -> None:
        if response.status_code == 404 and "mcp-session-id" in response.request.headers:
            conn.expire()

    return hook


@contextlib.asynccontextmanager
async def open_client(server: ServerParams, conn: Connection | None = None) -> AsyncIterator[Client]:
    """A connected ``mcp`` client for ``server``, watched for ``conn`` (see the module
    docstring); ``TimeoutError`` if it does not answer in time."""
    scope = anyio.CancelScope(deadline=anyio.current_time() + server.timeout)
    with scope:
        async with Client(_transport(server, conn), cache=None, client_info=_client_info()) as client:
            scope.deadline = math.inf  # connected: the session lives until it is closed
            yield client
    if scope.cancelled_caught:
        raise TimeoutError(f"no answer within {server.timeout:g} s")


async def list_server_tools(server: ServerParams) -> tuple[str | None, list[ListedTool]]:
    """The server's own name and every tool it lists (all pages)."""
    async with open_client(server) as client:
        info = client.server_info
        tools: list[ListedTool] = []
        cursor: str | None = None
        with anyio.fail_after(server.timeout):
            for _ in range(_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
    return (info.name if info is not None else None), tools


async def call(server: ServerParams, name: str, arguments: dict[str, Any], progress: Callable[[Any], None]) -> Any:
    """Run ``tools/call`` through this process's session with ``server``; its data, or ``ToolError``."""

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress({"progress": value, "total": total, "message": message})

    for attempt in (1, 2):
        conn = connection(server, serve)
        client = await asyncio.shield(conn.ready)  # a stop while connecting leaves the session to the others
        try:
            result = await client.call_tool(name, arguments, progress_callback=on_progress)
        except MCPError as exc:
            if conn.expired and attempt == 1:
                continue  # refused for its session, not run: once more on a new one
            if exc.code == CONNECTION_CLOSED:
                conn.close()
                raise ToolError(server.lost(exc.message)) from None
            raise ToolError(f"{server.where} refused the call: {exc.message}") from None
        return _data(result, server, name)
    raise AssertionError("unreachable")  # pragma: no cover


def _data(result: CallToolResult, server: ServerParams, name: str) -> Any:
    if result.is_error:
        text = "\n".join(b.text for b in result.content if isinstance(b, TextContent)).strip()
        raise ToolError(text or f"{server.where}: tool {name!r} failed without saying why")
    if result.structured_content is not None:
        return result.structured_content
    blocks = [
        b.text if isinstance(b, TextContent) else b.model_dump(mode="json", by_alias=True, exclude_none=True)
        for b in result.content
    ]
    return blocks[0] if len(blocks) == 1 else blocks


async def serve(conn: Connection) -> None:
    """A session's task: open the client, hold it until the session is closed, report its end."""
    server = conn.server
    failed: BaseException | None = None
    try:
        async with open_client(server, conn) as client:
            conn.started(client)
            await conn.until_closed()
    except BaseException as exc:  # noqa: BLE001 - the session's end, whatever it was, is this task's to report
        if not conn.ready.done():
            failed = failure(server, exc, "could not be reached")
        elif not conn.closing:
            log().warning("%s: its session ended: %s", server.where, describe(exc))
    finally:
        conn.ended(failed)
