"""LLMActor: streams a provider's deltas to the turn that asked, and aborts on request.

Each ``StreamChat`` runs in a worker thread (``providers.streaming.StreamWorker``) so the
actor keeps handling messages while the stream blocks: an ``AbortStream`` is acted on at
once, also while the provider stalls. Text that arrived between two wake-ups is sent as one
``LLMDeltas``; every message about a stream carries its ``stream_id`` and the next ``seq``
(0, 1, 2, ...), and the last one is exactly one ``LLMCompleted`` or ``LLMFailed`` unless
the stream was aborted, after which nothing more is sent about it.

The API key is read from this process's environment (``ProviderConfig.api_key_env``) when
the request is made; it never travels in a message.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ActorTypeDispatcher, ThespianWatch

from messages import AbortStream, LLMCompleted, LLMDeltas, LLMFailed, LLMRetrying, StreamChat

from .plumbing import Inbox
from .providers.streaming import ProviderClient, StreamWorker
from .trace import trace

__all__ = ["LLMActor", "PoolSize"]


def log() -> logging.Logger:
    """This module's logger, looked up at call time: Thespian replaces the logging manager
    in every actor process, so a logger created before the fork would log nowhere."""
    return logging.getLogger("greenroom.llm")


# Text of one stream is sent at most once per window: the first delta goes at once, what
# follows within the window is coalesced. The window is COALESCE seconds times the number
# of streams of the whole pool (this actor's streams times the pool size), so that the
# runtime's delta messages stay near 1,000 per second, what Thespian sustains through one
# actor, however many turns stream at once. One stream alone is delayed by at most 2 ms,
# and a provider that paces its tokens more slowly than the window not at all.
COALESCE = 0.002
MIN_STREAMS = 2


@dataclass(frozen=True)
class PoolSize:
    """From the directory: this LLMActor is one of ``size`` sharing the runtime's streams."""

    size: int


@dataclass
class _Stream:
    worker: StreamWorker
    requester: Any
    seq: int = 0
    text: list[str] = field(default_factory=list)
    last_sent: float = 0.0
    flush_scheduled: bool = False


class LLMActor(ActorTypeDispatcher):
    """Streams completions; one worker thread and one HTTP client per stream in flight."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._inbox = Inbox()
        self._streams: dict[str, _Stream] = {}
        self._idle: list[ProviderClient] = []
        self._pool_size = 1

    def receiveMessage(self, message: Any, sender: Any) -> Any:
        trace("llm in", type(message).__name__)
        super().receiveMessage(message, sender)
        return ThespianWatch([self._inbox.fd])

    def receiveMsg_StreamChat(self, msg: StreamChat, sender: Any) -> None:
        if msg.stream_id in self._streams:
            return  # a redelivery
        client = self._idle.pop() if self._idle else ProviderClient()
        worker = StreamWorker(msg, lambda out, sid=msg.stream_id: self._inbox.put((sid, out)), client)
        self._streams[msg.stream_id] = _Stream(worker, sender)
        trace("llm start", msg.stream_id, len(self._idle))
        worker.start()

    def receiveMsg_PoolSize(self, msg: PoolSize, sender: Any) -> None:
        self._pool_size = max(1, msg.size)

    def receiveMsg_AbortStream(self, msg: AbortStream, sender: Any) -> None:
        stream = self._streams.pop(msg.stream_id, None)
        if stream is not None:
            stream.worker.abort()  # its client is spent; it is not reused

    def receiveMsg_WatchMessage(self, msg: Any, sender: Any) -> None:
        touched: list[str] = []
        items = self._inbox.drain()
        trace("llm woke", [(sid, out[0]) for sid, out in items])
        for stream_id, out in items:
            stream = self._streams.get(stream_id)
            if stream is None:
                continue  # aborted: drop what was still in flight
            if stream_id not in touched:
                touched.append(stream_id)
            kind = out[0]
            if kind == "text":
                stream.text.append(out[1])
                continue
            self._flush(stream_id, stream)
            if kind == "retry":
                self._send(stream, LLMRetrying, attempt=out[1], delay=out[2], reason=out[3])
                continue
            if kind == "done":
                self._send(stream, LLMCompleted, message=out[1], finish_reason=out[2], usage=out[3])
            else:
                self._send(stream, LLMFailed, error_type=out[1], message=out[2])
            del self._streams[stream_id]
            self._idle.append(stream.worker.client)
        now = time.monotonic()
        for stream_id in touched:
            stream = self._streams.get(stream_id)
            if stream is None or not stream.text:
                continue
            window = COALESCE * max(1.0, len(self._streams) * self._pool_size / MIN_STREAMS)
            wait = stream.last_sent + window - now
            if wait <= 0:
                self._flush(stream_id, stream)
            elif not stream.flush_scheduled:
                stream.flush_scheduled = True
                self.wakeupAfter(timedelta(seconds=wait), payload=stream_id)

    def receiveMsg_WakeupMessage(self, msg: Any, sender: Any) -> None:
        stream = self._streams.get(msg.payload)
        if stream is not None:
            stream.flush_scheduled = False
            self._flush(msg.payload, stream)

    def _flush(self, stream_id: str, stream: _Stream) -> None:
        if stream.text:
            text = "".join(stream.text)
            stream.text.clear()
            stream.last_sent = time.monotonic()
            self._send(stream, LLMDeltas, text=text)

    def _send(self, stream: _Stream, cls: type, **fields: Any) -> None:
        message = cls(stream_id=stream.worker.request.stream_id, seq=stream.seq, **fields)
        trace("llm send", message.stream_id, message.kind, stream.seq)
        stream.seq += 1
        self.send(stream.requester, message)

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        for stream in self._streams.values():
            stream.worker.abort()
        self._streams.clear()
        for client in self._idle:
            client.close()
        self._idle.clear()

    def receiveUnrecognizedMessage(self, msg: Any, sender: Any) -> None:
        log().debug("LLMActor ignored %r", type(msg).__name__)
