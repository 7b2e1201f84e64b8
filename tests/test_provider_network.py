"""The stream loop's network backend (``actors.providers.network``): httpx's async client over
asyncio's own streams, against the scripted provider on 127.0.0.1, in the clear and behind
a TLS proxy, with the errors httpx users know (connect, TLS, read timeout) and an abort that
closes the connection at once."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from pathlib import Path

import httpx
import pytest

from actors.providers.client import StreamLoop, ssl_context
from actors.providers.network import AsyncioBackend, use_asyncio_backend
from actors.testing import ScriptedProvider, say

from .tls_proxy import TlsProxy

pytestmark = pytest.mark.timeout(60)

BODY = {"model": "scripted-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def client(**options: object) -> httpx.AsyncClient:
    out = httpx.AsyncClient(**options)  # type: ignore[arg-type]
    assert use_asyncio_backend(out)
    return out


async def lines(c: httpx.AsyncClient, url: str, timeout: float = 10.0) -> tuple[list[str], dict[str, object]]:
    async with c.stream("POST", f"{url}/chat/completions", json=BODY, timeout=timeout) as response:
        stream = response.extensions["network_stream"]
        info = {k: stream.get_extra_info(k) for k in ("ssl_object", "server_addr", "client_addr", "socket")}
        return [line async for line in response.aiter_lines() if line], info


def test_the_stream_loops_clients_read_through_asyncios_streams() -> None:
    streams = StreamLoop()

    async def main() -> None:
        taken = streams.take()
        assert type(taken._transport._pool._network_backend) is AsyncioBackend  # type: ignore[attr-defined]
        await taken.aclose()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_stream_in_the_clear_and_its_connection_again() -> None:
    with ScriptedProvider() as provider:
        provider.add(say("one two three"))
        provider.add(say("four"))

        async def main() -> None:
            async with client() as c:
                first, info = await lines(c, provider.base_url)
                second, _ = await lines(c, provider.base_url)
            assert first[-1] == "data: [DONE]" and "three" in "".join(first)
            assert "four" in "".join(second)
            assert info["ssl_object"] is None and info["server_addr"][:2] == ("127.0.0.1", provider.port)  # type: ignore[index]
            assert info["socket"].getpeername() == info["server_addr"]  # type: ignore[attr-defined]

        asyncio.run(main())
        assert provider.requests[0].peer == provider.requests[1].peer  # one connection for both


def test_a_stream_behind_tls_and_a_certificate_not_trusted(tmp_path: Path) -> None:
    with ScriptedProvider() as provider, TlsProxy(provider.port, tmp_path) as proxy:
        provider.add(say("over TLS"))
        url = f"https://127.0.0.1:{proxy.port}/v1"

        async def main() -> None:
            async with client(verify=proxy.client_context()) as c:
                got, info = await lines(c, url)
            assert "TLS" in "".join(got) and isinstance(info["ssl_object"], ssl.SSLObject)
            async with client(verify=ssl_context()) as c:  # the system's CAs: a self-signed certificate fails
                with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await lines(c, url)

        asyncio.run(main())


def test_connect_read_and_tls_errors_are_httpxs() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]  # bound, not listening: refused
        with ScriptedProvider() as provider:
            provider.add(say("late", delay=5.0))

            async def main() -> None:
                async with client() as c:
                    with pytest.raises(httpx.ConnectError):
                        await lines(c, f"http://127.0.0.1:{closed}/v1")
                    with pytest.raises(httpx.ReadTimeout):
                        await lines(c, provider.base_url, timeout=0.3)
                async with client(verify=ssl_context()) as c:  # TLS to a server that speaks none
                    with pytest.raises(httpx.ConnectError):
                        await lines(c, f"https://127.0.0.1:{provider.port}/v1")

            asyncio.run(main())


def test_a_cancelled_read_closes_its_connection_at_once() -> None:
    with ScriptedProvider() as provider:
        held = threading.Event()
        provider.add(say("a b c d e f", hold_after=2, hold=held))

        async def main() -> None:
            async with client() as c:
                task = asyncio.create_task(lines(c, provider.base_url))
                await asyncio.to_thread(provider.wait_for_requests, 1, 10)  # the request is there, held
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

        try:
            asyncio.run(main())
            assert provider.requests[0].disconnected.wait(5)  # the server saw the close
        finally:
            held.set()
