"""A real HTTP server that plays a model: scripted replies over the providers' wire formats.

``ScriptedProvider`` listens on ``127.0.0.1`` and answers ``POST /v1/chat/completions``
(OpenAI-compatible SSE) and ``POST /v1/messages`` (Anthropic Messages SSE) from a script:
a list of ``Reply`` objects taken in order, or a ``responder(request) -> Reply`` function.
A reply is written as a real chunked HTTP stream and can misbehave on purpose: delays
between chunks, a stall (the server then waits for the client to hang up), a cut without
the end of the body, a malformed data line, an HTTP error with ``Retry-After``. A reply can
also come as one non-streaming JSON response, as from a server that ignores ``stream: true``
(``non_streaming=True``), or as any bytes with any status and content type (``raw_response``).

Every request is recorded (``requests``) with an event set when the client disconnected
before the reply was complete, so tests can see that a stop really closed the connection.
A request whose history breaks the tool-call pairing rule is refused with HTTP 400, as
OpenAI does.

Builders: ``say(text)``, ``call(name, args)`` with ``use_tools(...)``, ``fail(status)``,
``raw_response(status, content_type, body)``.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from messages import ChatMessage, ProviderConfig, ToolCall

from .history import history_problems

__all__ = [
    "Chunk",
    "Raw",
    "Reply",
    "Request",
    "ScriptedProvider",
    "Text",
    "ToolArgs",
    "ToolStart",
    "call",
    "fail",
    "raw_response",
    "say",
    "use_tools",
]


# -- what a reply is made of ------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """Assistant text."""

    text: str


@dataclass(frozen=True)
class ToolStart:
    """The first fragment of tool call ``index`` (``id=None`` sends it without an id)."""

    index: int
    id: str | None
    name: str
    arguments: str = ""


@dataclass(frozen=True)
class ToolArgs:
    """A further fragment of tool call ``index``'s arguments."""

    index: int
    fragment: str


@dataclass(frozen=True)
class Chunk:
    """An OpenAI chunk object sent as it is (for the legacy and odd shapes)."""

    obj: dict[str, Any]


@dataclass(frozen=True)
class Raw:
    """Bytes written to the stream as they are (comments, CRLF, several data lines...)."""

    data: bytes


Part = Text | ToolStart | ToolArgs | Chunk | Raw


@dataclass(frozen=True)
class Reply:
    """One scripted response. Counts (``stall_after`` ...) are in parts, before the end.

    With ``hold`` the stream waits after ``hold_after`` parts until the test sets that event
    (or the client hangs up): a test decides when the rest of the answer comes.

    With ``non_streaming`` its text and tool calls are sent as one JSON completion (a
    ``chat.completion`` or a Messages response; ``Chunk``, ``Raw`` and the stream's
    misbehaviours do not apply). With ``body`` those bytes are sent as they are, with
    ``status`` and ``content_type`` (None: no content-type header), and nothing else applies.
    """

    parts: tuple[Part, ...] = ()
    finish_reason: str | None = None
    usage: tuple[int, int] | None = (12, 7)
    status: int = 200
    error: str | None = None
    retry_after: float | None = None
    delay: float = 0.0
    stall_after: int | None = None
    cut_after: int | None = None
    malformed_after: int | None = None
    done_marker: bool = True
    role_chunk: bool = True
    error_after: int | None = None
    crlf: bool = False
    null_content: bool = False
    non_streaming: bool = False
    body: bytes | None = None
    content_type: str | None = None
    hold_after: int | None = None
    hold: threading.Event | None = None

    def but(self, **changes: Any) -> Reply:
        """A copy with ``changes``."""
        return replace(self, **changes)


def say(text: str, pieces: int | None = None, **kw: Any) -> Reply:
    """A text reply streamed in ``pieces`` chunks (by default one per word)."""
    if pieces is None:
        words = text.split(" ")
        chunks = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
    else:
        size = max(1, -(-len(text) // pieces))
        chunks = [text[i : i + size] for i in range(0, len(text), size)]
    return Reply(parts=tuple(Text(c) for c in chunks if c), **kw)


@dataclass(frozen=True)
class CallSpec:
    name: str
    arguments: str
    id: str | None


def call(name: str, arguments: dict[str, Any] | str | None = None, id: str | None = "auto") -> CallSpec:
    """A tool call for ``use_tools``; ``arguments`` as a dict, or raw (possibly invalid) text."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return CallSpec(name, args, id)


def use_tools(*calls: CallSpec, fragments: int = 3, text: str | None = None, **kw: Any) -> Reply:
    """A reply with tool calls, their arguments in ``fragments`` pieces interleaved by index."""
    parts: list[Part] = [Text(text)] if text else []
    pieces = []
    for i, c in enumerate(calls):
        size = max(1, -(-len(c.arguments) // fragments)) if c.arguments else 1
        frags = [c.arguments[j : j + size] for j in range(0, len(c.arguments), size)] or [""]
        call_id = f"call_{i + 1}" if c.id == "auto" else c.id
        parts.append(ToolStart(i, call_id, c.name, frags[0]))
        pieces.append([ToolArgs(i, f) for f in frags[1:]])
    for round_ in range(max((len(p) for p in pieces), default=0)):
        for p in pieces:
            if round_ < len(p):
                parts.append(p[round_])
    return Reply(parts=tuple(parts), **kw)


def fail(status: int, message: str = "scripted failure", retry_after: float | None = None) -> Reply:
    """An HTTP error reply."""
    return Reply(status=status, error=message, retry_after=retry_after)


def raw_response(status: int, content_type: str | None, body: bytes) -> Reply:
    """A reply of exactly ``body`` with ``status`` and ``content_type`` (None: no content-type header)."""
    return Reply(status=status, body=body, content_type=content_type)


# -- rendering ------------------------------------------------------------------------------


def _finish_of(reply: Reply) -> str:
    if reply.finish_reason is not None:
        return reply.finish_reason
    return "tool_calls" if any(isinstance(p, ToolStart) for p in reply.parts) else "stop"


def _openai_frames(reply: Reply, model: str) -> list[bytes]:
    created = int(time.time())
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": created, "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        obj = dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    frames: list[bytes] = []
    if reply.role_chunk:
        frames.append(chunk({"role": "assistant", "content": ""}))
    for p in reply.parts:
        if isinstance(p, Text):
            frames.append(chunk({"content": p.text}))
        elif isinstance(p, ToolStart):
            tc: dict[str, Any] = {
                "index": p.index,
                "type": "function",
                "function": {"name": p.name, "arguments": p.arguments},
            }
            if p.id is not None:
                tc["id"] = p.id
            frames.append(chunk({"content": None, "tool_calls": [tc]} if reply.null_content else {"tool_calls": [tc]}))
        elif isinstance(p, ToolArgs):
            delta = {"tool_calls": [{"index": p.index, "function": {"arguments": p.fragment}}]}
            frames.append(chunk({"content": None, **delta} if reply.null_content else delta))
        elif isinstance(p, Chunk):
            frames.append(b"data: " + json.dumps(dict(base, **p.obj)).encode() + b"\n\n")
        else:
            frames.append(p.data)
    return frames


def _openai_usage(usage: tuple[int, int]) -> dict[str, int]:
    prompt, completion = usage
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _openai_tail(reply: Reply, model: str) -> list[bytes]:
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    tail = [
        b"data: "
        + json.dumps(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": _finish_of(reply)}])).encode()
        + b"\n\n"
    ]
    if reply.usage is not None:
        usage = _openai_usage(reply.usage)
        tail.append(b"data: " + json.dumps(dict(base, choices=[], usage=usage)).encode() + b"\n\n")
    if reply.done_marker:
        tail.append(b"data: [DONE]\n\n")
    return tail


def _event(name: str, obj: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode()


def _anthropic_frames(reply: Reply, model: str) -> list[bytes]:
    usage_in = reply.usage[0] if reply.usage else 0
    frames = []
    if reply.role_chunk:
        frames.append(
            _event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_scripted",
                        "type": "message",
                        "role": "assistant",
                        "content": [],
                        "model": model,
                        "stop_reason": None,
                        "usage": {"input_tokens": usage_in, "output_tokens": 1},
                    },
                },
            )
        )
    block = -1
    open_kind: tuple[str, int] | None = None
    call_blocks: dict[int, int] = {}

    def close() -> None:
        nonlocal open_kind
        if open_kind is not None:
            frames.append(_event("content_block_stop", {"type": "content_block_stop", "index": block}))
            open_kind = None

    # Anthropic blocks do not interleave: each call's fragments follow its start.
    ordered: list[Part] = []
    for p in reply.parts:
        if isinstance(p, ToolArgs):
            continue
        ordered.append(p)
        if isinstance(p, ToolStart):
            ordered.extend(q for q in reply.parts if isinstance(q, ToolArgs) and q.index == p.index)
    for p in ordered:
        if isinstance(p, Text):
            if open_kind is None or open_kind[0] != "text":
                close()
                block += 1
                open_kind = ("text", block)
                frames.append(
                    _event(
                        "content_block_start",
                        {"type": "content_block_start", "index": block, "content_block": {"type": "text", "text": ""}},
                    )
                )
            frames.append(
                _event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": block, "delta": {"type": "text_delta", "text": p.text}},
                )
            )
        elif isinstance(p, ToolStart):
            close()
            block += 1
            open_kind = ("tool", p.index)
            call_blocks[p.index] = block
            frames.append(
                _event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": block,
                        "content_block": {
                            "type": "tool_use",
                            "id": p.id or f"toolu_{p.index}",
                            "name": p.name,
                            "input": {},
                        },
                    },
                )
            )
            if p.arguments:
                frames.append(
                    _event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": block,
                            "delta": {"type": "input_json_delta", "partial_json": p.arguments},
                        },
                    )
                )
        elif isinstance(p, ToolArgs):
            frames.append(
                _event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": call_blocks.get(p.index, block),
                        "delta": {"type": "input_json_delta", "partial_json": p.fragment},
                    },
                )
            )
        elif isinstance(p, Raw):
            frames.append(p.data)
    close()
    return frames


_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def _anthropic_tail(reply: Reply, model: str) -> list[bytes]:
    out = reply.usage[1] if reply.usage else 0
    tail = [
        _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": _STOP.get(_finish_of(reply), "end_turn")},
                "usage": {"output_tokens": out},
            },
        )
    ]
    if reply.done_marker:
        tail.append(_event("message_stop", {"type": "message_stop"}))
    return tail


def _whole_text(reply: Reply) -> str:
    return "".join(p.text for p in reply.parts if isinstance(p, Text))


def _whole_calls(reply: Reply) -> list[tuple[ToolStart, str]]:
    """Each tool call of ``reply`` in order: its first fragment and all its arguments."""
    return [
        (p, p.arguments + "".join(q.fragment for q in reply.parts if isinstance(q, ToolArgs) and q.index == p.index))
        for p in reply.parts
        if isinstance(p, ToolStart)
    ]


def _openai_completion(reply: Reply, model: str) -> dict[str, Any]:
    """``reply`` as one non-streaming ``chat.completion`` (a call sent without an id has none)."""
    message: dict[str, Any] = {"role": "assistant", "content": _whole_text(reply) or None}
    calls = _whole_calls(reply)
    if calls:
        message["tool_calls"] = [
            {
                **({"id": p.id} if p.id is not None else {}),
                "type": "function",
                "function": {"name": p.name, "arguments": args},
            }
            for p, args in calls
        ]
    obj: dict[str, Any] = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_of(reply)}],
    }
    if reply.usage is not None:
        obj["usage"] = _openai_usage(reply.usage)
    return obj


def _anthropic_message(reply: Reply, model: str) -> dict[str, Any]:
    """``reply`` as one non-streaming Messages response: its text block, then its tool_use blocks."""
    text = _whole_text(reply)
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "tool_use", "id": p.id or f"toolu_{p.index}", "name": p.name, "input": json.loads(args or "{}")}
        for p, args in _whole_calls(reply)
    ]
    usage_in, usage_out = reply.usage or (0, 0)
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP.get(_finish_of(reply), "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": usage_in, "output_tokens": usage_out},
    }


# -- history checks ---------------------------------------------------------------------------


def _openai_history(body: dict[str, Any]) -> list[str]:
    try:
        msgs = [
            ChatMessage(
                role=m["role"],
                content=m.get("content")
                if isinstance(m.get("content"), str) or m.get("content") is None
                else json.dumps(m["content"]),
                tool_call_id=m.get("tool_call_id"),
                tool_calls=[
                    ToolCall(id=tc["id"], name=tc["function"]["name"], arguments=tc["function"].get("arguments", ""))
                    for tc in m.get("tool_calls") or []
                ]
                or None,
            )
            for m in body.get("messages", [])
        ]
    except (KeyError, TypeError, ValueError) as exc:
        return [f"malformed messages: {exc}"]
    return history_problems(msgs)


def _anthropic_history(body: dict[str, Any]) -> list[str]:
    problems = []
    msgs = body.get("messages", [])
    for i, m in enumerate(msgs):
        blocks = m.get("content") if isinstance(m.get("content"), list) else []
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if m.get("role") == "assistant" and uses:
            nxt = msgs[i + 1] if i + 1 < len(msgs) else None
            answered = [
                b.get("tool_use_id")
                for b in (nxt.get("content") if nxt and isinstance(nxt.get("content"), list) else [])
                if b.get("type") == "tool_result"
            ]
            for u in uses:
                if answered.count(u) != 1:
                    problems.append(f"messages.{i}: tool_use {u!r} needs exactly one tool_result in the next message")
    return problems


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

    def start(self) -> ScriptedProvider:
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

    def __enter__(self) -> ScriptedProvider:
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
        return f"http://127.0.0.1:{self.port}/v1"

    def provider(self, api: str = "openai", **kw: Any) -> ProviderConfig:
        """A ``ProviderConfig`` pointing at this server."""
        base = self.base_url if api == "openai" else f"http://127.0.0.1:{self.port}"
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
        elif self.path.rstrip("/").endswith("/messages"):
            api = "anthropic"
        else:
            return self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return self._json(
                400, {"error": {"message": "the request body is not JSON", "type": "invalid_request_error"}}
            )
        request = Request(api, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        provider._record(request)
        problems = _openai_history(body) if api == "openai" else _anthropic_history(body)
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
            whole = _openai_completion if api == "openai" else _anthropic_message
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
            if select.select([self.connection], [], [], 0)[0] and not self.connection.recv(1, socket.MSG_PEEK):
                raise _Disconnected()
            if self.server.provider._closing.is_set():
                raise _Disconnected()

    def _stream(self, reply: Reply, api: str, model: str, request: Request) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        frames = _openai_frames(reply, model) if api == "openai" else _anthropic_frames(reply, model)
        tail = _openai_tail(reply, model) if api == "openai" else _anthropic_tail(reply, model)
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


def main(argv: list[str] | None = None) -> int:
    """Serve a responder until interrupted: ``python -m actors.scripted_provider --responder mod:fn``.

    Prints ``{"port": ...}`` on one line once it listens on 127.0.0.1."""
    import argparse
    import signal as _signal

    from .tools import import_ref

    parser = argparse.ArgumentParser(prog="python -m actors.scripted_provider")
    parser.add_argument("--responder", required=True, help="module:function taking a Request, returning a Reply")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    stop = threading.Event()
    with ScriptedProvider(responder=import_ref(args.responder), port=args.port) as provider:
        print(json.dumps({"port": provider.port}), flush=True)
        for sig in (_signal.SIGINT, _signal.SIGTERM):
            _signal.signal(sig, lambda *_: stop.set())
        stop.wait()
    return 0


if __name__ == "__main__":
    # run the module under its real name, so that the responder's Reply parts are the
    # same classes as the ones the server checks for
    from actors.scripted_provider import main as _main

    raise SystemExit(_main())
