"""LLMActor: streams providers' deltas to the turns of its host, and aborts on request.

One LLMActor lives in each TurnHost process, beside the TurnActors it serves; messages
between them never leave the process. Each ``StreamChat`` is a ``StreamWorker``
(``providers.streaming``), a task on the process's stream loop (one thread reads every
stream of the host: the host's own until it has more than eight, then the loop's own
until they are down to two, ``providers.client``); the worker's only outputs are an item on the host's hand-off
(``handoff``) and a wake-up byte, so the host keeps handling messages while a stream
waits; an ``AbortStream`` cancels the stream's task, which closes its connection at once,
also while the provider stalls.

Guarantees, per stream: every message about it carries its ``stream_id`` and the next
``seq`` (0, 1, 2, ...); text drained in one wake-up is sent as one ``LLMDeltas``; the stream
loop hands its text over in batches: it appends each delta to the stream's ``TextBuffer``
and queues an item (with its wake-up byte) only when the buffer was empty, so a host that
is behind takes many deltas for one item and one byte; usage the provider reports before
its end is sent as it changes (``LLMUsage``, after the text before it); the last
message is exactly one ``LLMCompleted`` or ``LLMFailed``, unless the stream was aborted,
after which nothing more is sent about it.

The API key is read from this process's environment (``ProviderConfig.api_key_env``) when
the request is made; it never travels in a message. One SSL context serves the process
tree; each stream has an ``httpx.AsyncClient`` of its own while it runs, taken from those
earlier streams of the process gave back, their connections kept (``providers.client``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from messages import AbortStream, LLMCompleted, LLMDeltas, LLMFailed, LLMRateLimited, LLMRetrying, LLMUsage, StreamChat

from ..mailbox import Kernel, LocalActor
from ..providers.streaming import StreamOutput, StreamWorker
from ..telemetry.spans import Span, chat_span, end_chat

__all__ = ["LLMActor", "TextBuffer"]


class TextBuffer:
    """Text a stream produced on the stream loop that its actor has not taken yet, in order."""

    __slots__ = ("_lock", "_parts")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: list[str] = []

    def add(self, text: str) -> bool:
        """The stream loop's thread: append ``text``; True if the buffer was empty (the actor must be told)."""
        with self._lock:
            self._parts.append(text)
            return len(self._parts) == 1

    def take(self) -> list[str]:
        """The actor's thread: everything added so far, in order; the buffer is empty after."""
        with self._lock:
            parts, self._parts = self._parts, []
        return parts


@dataclass
class _Stream:
    worker: StreamWorker
    requester: LocalActor
    buffer: TextBuffer
    seq: int = 0
    text: list[str] = field(default_factory=list)
    span: Span | None = None  # its chat span, when the request is traced


class LLMActor(LocalActor):
    """Streams completions for the TurnActors of one host."""

    name = "LLMActor"

    def __init__(self, kernel: Kernel, put: Callable[[Any], None]) -> None:
        super().__init__(kernel)
        self._put = put  # thread-safe: queue an item on the host's hand-off (``handoff``) and wake it
        self._streams: dict[str, _Stream] = {}

    def receiveMsg_AbortStream(self, message: AbortStream, sender: Any) -> None:
        stream = self._streams.pop(message.stream_id, None)
        if stream is not None:
            stream.worker.abort()
            end_chat(stream.span, None)

    def receiveMsg_StreamChat(self, request: StreamChat, requester: LocalActor) -> None:
        if request.stream_id in self._streams:
            return
        stream_id, buffer = request.stream_id, TextBuffer()

        def emit(out: StreamOutput) -> None:  # on the stream loop's thread
            if out[0] != "text":  # queued after the item that announced its text: order holds
                self._put(("llm", stream_id, out))
            elif buffer.add(out[1]):
                self._put(("llm", stream_id, ("text",)))

        worker = StreamWorker(request, emit)
        self._streams[stream_id] = _Stream(worker, requester, buffer, span=chat_span(request))
        worker.start()

    def on_outputs(self, items: list[tuple[str, StreamOutput]]) -> None:
        """What the stream workers produced since the last wake-up, in order."""
        touched: list[str] = []
        for stream_id, out in items:
            stream = self._streams.get(stream_id)
            if stream is None:
                continue  # aborted: drop what was still in flight
            kind = out[0]
            if kind == "text":
                stream.text.extend(stream.buffer.take())
                if stream_id not in touched:
                    touched.append(stream_id)
                continue
            self._flush(stream)
            if kind == "usage":  # before the stream's end: so that an aborted stream counts it
                self._send(stream, LLMUsage, usage=out[1])
                continue
            if kind == "limited":  # the request waits for its rate limit: the span goes on
                self._send(stream, LLMRateLimited, until=out[1], reason=out[2], delay=out[3])
                continue
            end_chat(stream.span, out)
            if kind == "retry":
                self._send(stream, LLMRetrying, attempt=out[1], delay=out[2], reason=out[3])
                continue
            if kind == "done":
                self._send(stream, LLMCompleted, message=out[1], finish_reason=out[2], usage=out[3])
            else:
                self._send(stream, LLMFailed, error_type=out[1], message=out[2])
            del self._streams[stream_id]
        for stream_id in touched:
            stream = self._streams.get(stream_id)
            if stream is not None:
                self._flush(stream)

    def _flush(self, stream: _Stream) -> None:
        if stream.text:
            text = "".join(stream.text)
            stream.text.clear()
            self._send(stream, LLMDeltas, text=text)

    def _send(self, stream: _Stream, cls: type, **fields: Any) -> None:
        message = cls(stream_id=stream.worker.request.stream_id, seq=stream.seq, **fields)
        stream.seq += 1
        stream.requester.tell(message, None)

    def close(self) -> None:
        """Abort every stream."""
        for stream in self._streams.values():
            stream.worker.abort()
            end_chat(stream.span, None)
        self._streams.clear()
