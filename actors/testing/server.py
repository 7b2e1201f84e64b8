"""The HTTP server: takes replies from a script or a responder and writes them as real chunked streams."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from messages import ProviderConfig

from .script import Reply, Text, fail
from .wire import (
    anthropic_frames,
    anthropic_history,
    anthropic_message,
    anthropic_tail,
    openai_completion,
    openai_frames,
    openai_history,
    openai_tail,
)

# -- the server -------------------------------------------------------------------------------


@dataclass
class Request:
    """One request the provider received."""

    api: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float = field(default_factory=time.monotonic)
    disconnected: threading.Event = field(default_factory=threading.Event)
    disconnected_at: float | None = None
    written: list[tuple[int, float]] = field(default_factory=list)  # (text offset, time) per text part
    finished: threading.Event = field(default_factory=threading.Event)
    status: int = 0
    peer: tuple[str, int] | None = None  # the client's address and port: one per connection

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))


Responder = Callable[[Request], Reply]


class ScriptedProvider:
    """The scripted model server. Use as a context manager, or ``start()``/``close()``."""

    def __init__(
        self,
        script: Sequence[Reply] | None = None,
        *,
        responder: Responder | None = None,
        model: str = "scripted-model",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._script = list(script or [])
        self._responder = responder
        self.model = model
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._conns: set[socket.socket] = set()
        self._closing = threading.Event()
        self._server = _Server((host, port), _Handler)
        self._server.provider = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="scripted-provider", daemon=True
        )

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> Self:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        with self._lock:
            conns = list(self._conns)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- configuration for clients ---------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``.../v1``)."""
        return f"{self.origin}/v1"

    @property
    def origin(self) -> str:
        """``http://HOST:PORT`` of the address it listens on."""
        return f"http://{self._server.server_address[0]!s}:{self.port}"

    def provider(self, api: str = "openai", **kw: Any) -> ProviderConfig:
        """A ``ProviderConfig`` pointing at this server."""
        base = self.base_url if api == "openai" else self.origin
        return ProviderConfig(api=api, base_url=base, model=self.model, **kw)  # type: ignore[arg-type]

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(replies)

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> list[Request]:
        """Block until ``n`` requests have arrived; return them."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.requests) >= n, timeout):
                raise TimeoutError(f"expected {n} requests, got {len(self.requests)} in {timeout} s")
            return list(self.requests)

    # -- serving --------------------------------------------------------------------------

    def _next_reply(self, request: Request) -> Reply:
        if self._responder is not None:
            return self._responder(request)
        with self._lock:
            if not self._script:
                return fail(500, "the script has no reply left for this request")
            return self._script.pop(0)

    def _record(self, request: Request) -> None:
        with self._cond:
            self.requests.append(request)
            self._cond.notify_all()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512  # many turns connect at once in the scale benchmark
    provider: ScriptedProvider

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up is normal here (stops, aborts); anything else is printed."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, OSError)):
            super().handle_error(request, client_address)


class _Disconnected(Exception):
    """The client hung up before the reply was complete."""


class _Cut(Exception):
    """The script cut the connection in the middle of the body."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.provider._lock:
            self.server.provider._conns.add(self.connection)

    def finish(self) -> None:
        with self.server.provider._lock:
            self.server.provider._conns.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def do_GET(self) -> None:
        """``GET /requests``: what was asked and when each text part was written (monotonic)."""
        if self.path.rstrip("/") != "/requests":
            return self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        provider = self.server.provider
        with provider._lock:
            log = [{"messages": r.messages, "status": r.status, "written": r.written} for r in provider.requests]
        self._json(200, {"requests": log})

    def do_POST(self) -> None:
        provider = self.server.provider
        if self.path.rstrip("/").endswith("/chat/completions"):
            api = "openai"
        elif self.path.rstrip("/") == "/v1/messages":  # where Anthropic serves it, and only there
            api = "anthropic"
        else:
            return self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if len(raw) < length:  # the client went away while sending (a stream aborted): no request
            self.close_connection = True
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return self._json(
                400, {"error": {"message": "the request body is not JSON", "type": "invalid_request_error"}}
            )
        request = Request(
            api, self.path, {k.lower(): v for k, v in self.headers.items()}, body, peer=self.client_address
        )
        provider._record(request)
        problems = openai_history(body) if api == "openai" else anthropic_history(body)
        if problems:
            request.status = 400
            request.finished.set()
            return self._json(400, {"error": {"message": "; ".join(problems), "type": "invalid_request_error"}})
        reply = provider._next_reply(request)
        request.status = reply.status
        if reply.body is not None:
            request.finished.set()
            return self._send(reply.status, reply.content_type, reply.body)
        if reply.status != 200:
            headers = {"retry-after": f"{reply.retry_after:g}"} if reply.retry_after is not None else {}
            request.finished.set()
            return self._json(reply.status, {"error": {"message": reply.error or "error", "type": "scripted"}}, headers)
        if reply.non_streaming:
            request.finished.set()
            whole = openai_completion if api == "openai" else anthropic_message
            return self._json(200, whole(reply, provider.model))
        try:
            self._stream(reply, api, provider.model, request)
        except _Disconnected:
            request.disconnected_at = time.monotonic()
            request.disconnected.set()
            self.close_connection = True
        except _Cut:
            self.close_connection = True
        finally:
            request.finished.set()

    def _json(self, status: int, obj: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._send(status, "application/json", json.dumps(obj).encode(), headers)

    def _send(self, status: int, content_type: str | None, data: bytes, headers: dict[str, str] | None = None) -> None:
        """A whole response of ``data``, with a content-type header unless ``content_type`` is None."""
        self.send_response(status)
        if content_type is not None:
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _write_chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except OSError:
            raise _Disconnected() from None

    def _pause(self, seconds: float | None) -> None:
        """Wait ``seconds`` (None: for ever) unless the client hangs up first."""
        provider = self.server.provider
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            ready, _, _ = select.select([self.connection], [], [], remaining)
            if provider._closing.is_set():
                raise _Disconnected()
            if ready:
                try:
                    data = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    raise _Disconnected() from None
                if not data:
                    raise _Disconnected()
                return  # the client sent something (a new request?): stop waiting

    def _hold(self, released: threading.Event) -> None:
        """Wait until the test sets ``released``, unless the client hangs up first."""
        while not released.wait(0.01):
            if select.select([self.connection], [], [], 0)[0]:
                try:
                    data = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:  # a reset: the client closed with our answer unread
                    raise _Disconnected() from None
                if not data:
                    raise _Disconnected()
            if self.server.provider._closing.is_set():
                raise _Disconnected()

    def _stream(self, reply: Reply, api: str, model: str, request: Request) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        frames = openai_frames(reply, model) if api == "openai" else anthropic_frames(reply, model)
        tail = openai_tail(reply, model) if api == "openai" else anthropic_tail(reply, model)
        if reply.crlf:
            frames = [f.replace(b"\n", b"\r\n") for f in frames]
            tail = [f.replace(b"\n", b"\r\n") for f in tail]
        body_start = 1 if reply.role_chunk else 0
        offsets: dict[int, int] = {}  # frame index -> text offset after it, for the delta latency bench
        total = 0
        for i, part in enumerate(reply.parts):
            if isinstance(part, Text):
                total += len(part.text)
                offsets[i + body_start] = total
        for i, frame in enumerate(frames):
            n = i - body_start  # parts sent so far
            if n >= 0 and reply.stall_after is not None and n == reply.stall_after:
                self._pause(None)
            if n >= 0 and reply.cut_after is not None and n == reply.cut_after:
                self._cut()
            if n >= 0 and reply.malformed_after is not None and n == reply.malformed_after:
                self._write_chunk(b"data: {this is not json\n\n")
            if n >= 0 and reply.error_after is not None and n == reply.error_after:
                self._write_chunk(
                    b'data: {"error": {"message": "scripted mid-stream error", "type": "server_error"}}\n\n'
                )
            if n >= 0 and reply.hold is not None and n == reply.hold_after:
                self._hold(reply.hold)
            if reply.delay and n >= 0:
                self._pause(reply.delay)
            self._write_chunk(frame)
            if i in offsets and api == "openai":
                request.written.append((offsets[i], time.monotonic()))
        n = len(frames) - body_start
        if reply.stall_after is not None and reply.stall_after >= n:
            self._pause(None)
        if reply.cut_after is not None and reply.cut_after >= n:
            self._cut()
        for frame in tail:
            self._write_chunk(frame)
        if reply.hold_at_end is not None:
            self._hold(reply.hold_at_end)
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            raise _Disconnected() from None

    def _cut(self) -> None:
        """Close the connection in the middle of the body."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        raise _Cut()
