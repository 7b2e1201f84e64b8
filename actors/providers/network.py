"""A network backend for httpcore on asyncio's own streams, for the stream loop's clients.

httpx's async client reads through httpcore, which by default reads through anyio: every
read and write enters an anyio cancel scope and asks which event loop is running. On the
stream loop, where every stream of a host is read, that was about a third of the CPU of
reading a stream: 100 concurrent streams of 40 chunks cost 2.8-3.2 ms of CPU each through
anyio, 1.9-2.2 ms through this backend (a ``/tmp`` script, three rounds each, one process).

What httpcore asks of a backend, done with asyncio's streams: connect (with its timeout,
local address and socket options; a host's addresses tried 0.25 s apart, as anyio does), TLS on the connection (``start_tls``), read and write
with their timeouts, close, and the connection's details (``get_extra_info``: its socket,
addresses, SSL object, and whether the server has closed an idle connection). Errors are
httpcore's own, as its anyio backend raises them (``ConnectError``, ``ReadTimeout``, ...),
so httpx maps them to the same exceptions. A cancelled task (an abort) is not an error:
its ``CancelledError`` goes through untouched.

``use_asyncio_backend(client)`` puts it under a client, reaching two private attributes
(httpx's default transport's pool, the pool's backend): it checks what it finds and leaves
the client as it is, on anyio, when it is not what httpx 0.28-0.29 and httpcore 1.0 have.
A client whose requests go through a proxy (``HTTPS_PROXY``) keeps anyio for those.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from ..logs import logger

__all__ = ["AsyncioBackend", "AsyncioStream", "use_asyncio_backend"]

log = logger("greenroom.llm")


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One connection, as a reader and a writer of asyncio's."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            if timeout is None:
                return await self._reader.read(max_bytes)
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError:
            raise httpcore.ReadTimeout(f"nothing read within {timeout:g} s") from None
        except OSError as exc:
            raise httpcore.ReadError(str(exc) or type(exc).__name__) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            self._writer.write(buffer)
            if self._writer.transport.get_write_buffer_size():  # not all of it went out at once
                async with asyncio.timeout(timeout):
                    await self._writer.drain()
        except TimeoutError:
            raise httpcore.WriteTimeout(f"could not write within {timeout:g} s") from None
        except OSError as exc:
            raise httpcore.WriteError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        transport = self._writer.transport
        if transport.get_write_buffer_size():
            transport.abort()  # what is left unwritten is given up: the socket closes now
        else:
            transport.close()  # nothing to flush: the socket closes at the loop's next step

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError:
            self._writer.transport.abort()
            raise httpcore.ConnectTimeout(f"no TLS handshake within {timeout:g} s") from None
        except OSError as exc:  # ssl.SSLError included
            self._writer.transport.abort()
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # an idle connection the server has closed (or written to)
            return self._reader.at_eof() or self._writer.transport.is_closing()
        if info == "client_addr":
            return self._writer.get_extra_info("sockname")
        if info == "server_addr":
            return self._writer.get_extra_info("peername")
        if info in ("socket", "ssl_object"):
            return self._writer.get_extra_info(info)
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """Connections as asyncio streams (see the module docstring)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        local = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(host, port, local_addr=local, happy_eyeballs_delay=0.25)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"could not connect to {host}:{port} within {timeout:g} s") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        sock: socket.socket | None = writer.get_extra_info("socket")
        for option in socket_options or ():
            if sock is not None:
                sock.setsockopt(*option)
        return AsyncioStream(reader, writer)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(path)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"could not connect to {path} within {timeout:g} s") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        return AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


BACKEND = AsyncioBackend()


def use_asyncio_backend(client: httpx.AsyncClient) -> bool:
    """Read ``client``'s direct connections through ``AsyncioBackend``; False (the client
    left on anyio, and logged once) if httpx or httpcore are not laid out as expected."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    if type(pool) is not httpcore.AsyncConnectionPool or not hasattr(pool, "_network_backend"):
        _unexpected(type(pool).__name__)
        return False
    pool._network_backend = BACKEND
    return True


_warned: list[str] = []


def _unexpected(found: str) -> None:
    if not _warned:
        _warned.append(found)
        log().warning(
            "httpx %s / httpcore %s: the async client's pool is %s, not httpcore's AsyncConnectionPool; "
            "provider streams are read through anyio",
            httpx.__version__, httpcore.__version__, found,
        )  # fmt: skip
