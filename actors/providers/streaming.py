"""One provider stream, a task on its process's stream loop (``client.STREAMS``), abortable at once from any thread.

The worker's only outputs go through ``emit``, called on the loop's thread (the LLMActor
queues them and wakes itself through a pipe); it never calls Thespian. ``abort()`` cancels
the stream's task, which closes its connection at once, even on a stalled stream; the
provider sees the connection close. A stream that ended is read to the end of its body,
after its last output and for ``DRAIN`` seconds at most, so that its connection serves the
process's next stream (no new connection, nor TLS handshake, per request).

Rate limits: with ``ProviderConfig.rate_limit`` every attempt first waits for the limit of
its (provider, key) (``limiter``), emitting ``("limited", until, reason, delay)`` when it must wait
(again when the reason changes or the wait grows by more than a second); an abort ends the
wait at once. A ``Retry-After`` the provider answered pauses every stream to that provider
and key, on every host of the store; the tokens a stream used count once it ends.

Retries: a connection error, HTTP 429 (``Retry-After`` honoured) or 5xx that happens before
the first text reached the turn is retried with the provider's ``RetryPolicy``; each retry
is emitted first. Usage the provider reports before its end is emitted as it changes
(``("usage", Usage)``), so that a stream aborted before its end counts what it had used. Once text was emitted, a failure ends the stream: text is never repeated.
A stream silent for longer than the read timeout fails with ``read_timeout``; one that runs
past the total timeout fails with ``total_timeout``.

A 200 answer is read as an event stream when its content type says so, or when it has none
and its first line is an SSE field or comment; one that carried no data event fails with
``empty_stream``. Any other 200 answer is read whole: a non-streaming completion (a server
that ignored ``stream: true``) is the answer, an error object fails with ``provider_error``,
anything else fails with ``not_an_event_stream``, naming the content type and first bytes.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from collections.abc import AsyncIterator, Callable
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from messages import StreamChat

from ..debug_trace import trace
from ..logs import logger
from .anthropic import AnthropicAdapter
from .base import Accumulator, Adapter, ProviderStreamError, error_message
from .client import STREAMS, ssl_context
from .limiter import LIMITER
from .openai import OpenAIAdapter
from .rates import key_of
from .sse import SSEEvent, SSEParser

__all__ = ["ADAPTERS", "DRAIN", "StreamOutput", "StreamWorker", "backoff_delay", "ssl_context"]

log = logger("greenroom.llm")

ADAPTERS: dict[str, Adapter] = {"openai": OpenAIAdapter(), "anthropic": AnthropicAdapter()}

# What a worker emits: ("text", str) | ("retry", attempt, delay, reason) | ("usage", Usage)
# | ("limited", until, reason, delay)
# | ("done", ChatMessage, finish_reason, Usage | None) | ("failed", error_type, message)
StreamOutput = tuple[Any, ...]

_RETRY_STATUS = {429, 500, 502, 503, 504, 529}

DRAIN = 1.0  # seconds a done stream's body may take to end before its connection is closed

_SSE_FIELDS = {"", "data", "event", "id", "retry"}  # "" is a comment line (": ping")


def backoff_delay(attempt: int, initial: float, maximum: float, jitter: float, retry_after: float | None) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based)."""
    delay = min(maximum, initial * (2 ** (attempt - 1)))
    delay *= 1 - jitter * random.random()
    if retry_after is not None:
        delay = max(delay, min(retry_after, maximum))
    return delay


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


async def _body_lines(response: httpx.Response) -> tuple[bool, AsyncIterator[str]]:
    """Whether ``response``'s body is an event stream, and all its lines.

    It is when its content type says so, or when it has none and its first non-blank line
    is an SSE field or comment; only that line and the blank ones before it are read here.
    """
    lines = response.aiter_lines()
    content_type = response.headers.get("content-type")
    if content_type is not None:
        return content_type.partition(";")[0].strip().lower() == "text/event-stream", lines
    head: list[str] = []
    async for line in lines:
        head.append(line)
        if line.strip():
            break
    first = head[-1].strip() if head else ""

    async def chained() -> AsyncIterator[str]:
        for line in head:
            yield line
        async for line in lines:
            yield line

    return bool(first) and first.partition(":")[0] in _SSE_FIELDS, chained()


def _whole_answer(acc: Accumulator, content_type: str | None, body: str) -> str:
    """Fold a 200 body that is not an event stream into ``acc``; return its text.

    Raises ``ProviderStreamError``: ``provider_error`` for an error object,
    ``not_an_event_stream`` for anything that is not a complete response.
    """
    try:
        value = json.loads(body)
    except ValueError:
        value = None
    problem = error_message(value) if isinstance(value, dict) else None
    if problem is not None:
        raise ProviderStreamError("provider_error", f"the provider answered 200 with an error: {problem}")
    text = acc.complete(value)
    if text is None:
        described = "no content-type" if content_type is None else f"content-type {content_type}"
        raise ProviderStreamError(
            "not_an_event_stream",
            f"the provider answered 200 with {described}, not an event stream: {body.encode()[:200]!r}",
        )
    return text


class _Retry(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class StreamWorker:
    """Runs one ``StreamChat`` request as a task on the process's stream loop."""

    def __init__(self, request: StreamChat, emit: Callable[[StreamOutput], None]) -> None:
        self.request = request
        self._emit_raw = emit
        self._emit = self._emit_traced
        self._lock = threading.Lock()
        self._aborted = False
        self._abort_report: tuple[str, str] | None = None
        self._abort_out: StreamOutput | None = None  # the failure an abort reports, once emitted
        self._sent_text = False
        self._ended = False
        self._reported = False  # its last output is out (or, aborted, nothing more will be)
        self._usage: Any = None  # the usage last emitted (or the stream's, once done)
        self._limit_key = ""  # the (provider, key) of its rate limit
        self._counted_at: float | None = None  # when the limit counted the attempt under way
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient  # its own while it runs (``_main``)
        self.finished = threading.Event()  # its task has ended: its client given back, its connection kept or closed

    def start(self) -> None:
        self._loop = STREAMS.loop()
        self._loop.call_soon_threadsafe(self._begin)

    def _begin(self) -> None:
        self._task = self._loop.create_task(self._main())  # type: ignore[union-attr]
        self._task.add_done_callback(self._finished)
        if self._aborted:  # aborted before it began: it ends at its first step
            self._task.cancel()

    def _emit_traced(self, out: StreamOutput) -> None:
        trace("worker emit", self.request.stream_id, out[0])
        if self._aborted and out is not self._abort_out:
            return  # aborted: what the task still produced before its cancel reached it is dropped
        if self._reported:
            return  # its last output is out: nothing comes after it
        if out[0] in ("done", "failed"):  # the last output: from here on abort() does nothing
            with self._lock:
                self._ended = True
            self._reported = True
            if out[0] == "done" and out[3] is not None:
                self._usage = out[3]
            self._spend()  # before the turn hears of the end, so its next request sees the tokens
        self._emit_raw(out)

    def _spend(self) -> None:
        """Count the tokens the stream used against its rate limit, once."""
        limit, usage, self._usage = self.request.provider.rate_limit, self._usage, None
        if limit is not None and self._limit_key and usage is not None:
            LIMITER.spend(self._limit_key, limit, usage.total_tokens)

    def abort(self, report: tuple[str, str] | None = None) -> None:
        """Abort now, from any thread. With ``report`` the worker emits it as its failure;
        otherwise nothing. Once the stream has ended this does nothing."""
        with self._lock:
            if self._aborted or self._ended:
                return
            self._abort_report = report
            self._aborted = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self._task is not None:  # else _begin, queued before, cancels it
            self._task.cancel()

    # -- the task --------------------------------------------------------------------------

    def _finished(self, task: asyncio.Task[None]) -> None:
        """Every way the task ends: the one output it owes, unless it is out."""
        exc = None if task.cancelled() else task.exception()
        try:
            with self._lock:
                self._ended = True  # an abort that reported nothing: the same holds
            if not self._reported:
                if self._aborted:
                    self._report_abort()
                elif task.cancelled():
                    self._emit(("failed", "internal_error", "the stream's task was cancelled, not by an abort"))
                elif exc is None:
                    self._emit(("failed", "internal_error", "the stream ended without an answer"))
                else:
                    self._emit(("failed", "internal_error", f"{type(exc).__name__}: {exc}"))
            elif exc is not None:
                log().error("stream %s failed after its answer", self.request.stream_id, exc_info=exc)
        finally:
            self._spend()  # an aborted stream's tokens so far
            self.finished.set()

    async def _main(self) -> None:
        self._client = STREAMS.take()
        total = self.request.provider.timeouts.total
        deadline = None
        if total is not None:
            report = ("total_timeout", f"the provider stream took longer than {total:g} s")
            deadline = asyncio.get_running_loop().call_later(total, self.abort, report)
        try:
            await self._run()
        except asyncio.CancelledError:
            if not self._aborted:
                raise  # not by abort(): it ends cancelled (``_finished`` says so)
        finally:
            if deadline is not None:
                deadline.cancel()
            STREAMS.give(self._client)  # its connection closed if the stream did not read its body to the end

    def _report_abort(self) -> None:
        if self._abort_report is not None:
            self._abort_out = ("failed",) + self._abort_report
            self._emit(self._abort_out)
        self._reported = True  # nothing more, reported or not

    async def _run(self) -> None:
        req = self.request
        provider = req.provider
        adapter = ADAPTERS[provider.api]
        api_key = os.environ.get(provider.api_key_env) if provider.api_key_env else None
        url, headers, body = adapter.build(provider, req.messages, req.tools, api_key)
        t = provider.timeouts
        timeout = httpx.Timeout(connect=t.connect, read=t.read, write=t.read, pool=t.connect)
        policy, limit = provider.retry, provider.rate_limit
        if limit is not None:
            self._limit_key = key_of(provider.base_url, api_key)
        attempt = 0
        while True:
            attempt += 1
            if limit is not None:
                await self._wait_for_limit()
            if self._aborted:  # its cancel is on its way: nothing is sent (``_finished`` reports)
                return
            try:
                return await self._attempt(adapter, url, headers, body, timeout)
            except _Retry as retry:
                if self._reported:
                    return  # the answer is out (a failure while its body was read after it)
                if limit is not None and retry.retry_after is not None:  # for every host of the store
                    await STREAMS.wait_on(LIMITER.pause, self._limit_key, limit, retry.retry_after)
                if attempt >= policy.max_attempts:
                    return self._emit(("failed", "provider_unavailable", f"{retry.reason} (after {attempt} attempts)"))
                delay = backoff_delay(attempt, policy.initial_delay, policy.max_delay, policy.jitter, retry.retry_after)
                self._emit(("retry", attempt, delay, retry.reason))
                await asyncio.sleep(delay)

    async def _wait_for_limit(self) -> None:
        """Wait until the rate limit lets this attempt go (it is counted); the store's answer
        is waited for on a thread (``LIMITER`` may wait for the store: ``STREAMS.wait_on``)."""
        limit = self.request.provider.rate_limit
        assert limit is not None
        told: tuple[float, str] = (0.0, "")
        while True:
            delay, reason, self._counted_at = await STREAMS.wait_on(LIMITER.admit, self._limit_key, limit)
            if delay <= 0:
                return
            delay += random.uniform(0, 0.02 * delay)  # the hosts that wait do not all ask at once
            until = time.time() + delay
            if reason != told[1] or until > told[0] + 1.0:
                told = (until, reason)
                self._emit(("limited", until, reason, delay))
            await asyncio.sleep(delay)

    def _pass_on(self, text: str) -> None:
        """Emit ``text`` if there is any; from then on a failure is not retried."""
        if text:
            self._sent_text = True
            self._emit(("text", text))

    def _report_usage(self, acc: Accumulator) -> None:
        usage = acc.reported()
        if usage is not None and usage != self._usage:
            self._usage = usage
            self._emit(("usage", usage))

    async def _attempt(
        self, adapter: Adapter, url: str, headers: dict[str, str], body: dict[str, Any], timeout: httpx.Timeout
    ) -> None:
        req = self.request
        try:
            async with self._client.stream("POST", url, headers=headers, json=body, timeout=timeout) as response:
                limit, counted_at = req.provider.rate_limit, self._counted_at
                if limit is not None and counted_at is not None:  # it reached the provider: it counts from now
                    LIMITER.sent(self._limit_key, limit, counted_at)
                if response.status_code != 200:
                    detail = (await response.aread())[:500].decode("utf-8", "replace")
                    reason = f"the provider answered HTTP {response.status_code}: {detail}"
                    if response.status_code in _RETRY_STATUS:
                        raise _Retry(reason, _retry_after(response))
                    return self._emit(("failed", "http_error", reason))
                acc = adapter.accumulator(req.stream_id)
                is_stream, lines = await _body_lines(response)
                if is_stream:
                    parser = SSEParser()
                    async for line in lines:
                        ev = parser.line(line)
                        if ev is not None and self._event(acc, ev):
                            break
                    else:
                        ev = parser.end()
                        if ev is not None:
                            self._event(acc, ev)
                    if not acc.received:
                        raise ProviderStreamError("empty_stream", "the provider's event stream ended without any data")
                else:
                    whole = "\n".join([line async for line in lines])
                    self._pass_on(_whole_answer(acc, response.headers.get("content-type"), whole))
                message, finish, usage = acc.result()
                self._emit(("done", message, finish, usage))
                await _drain(lines)
        except ProviderStreamError as exc:
            return self._emit(("failed", exc.error_type, exc.message))
        except (
            httpx.ConnectError,
            httpx.ConnectTimeout,
            httpx.RemoteProtocolError,
            httpx.ReadError,
            httpx.WriteError,
        ) as exc:
            if not self._sent_text:  # nothing reached the turn yet: safe to try again
                raise _Retry(f"connection to the provider at {url} failed: {type(exc).__name__}: {exc}") from None
            return self._emit(("failed", "stream_broken", f"the provider stream broke: {type(exc).__name__}: {exc}"))
        except httpx.ReadTimeout:
            return self._emit(
                ("failed", "read_timeout", f"the provider sent nothing for {req.provider.timeouts.read:g} s")
            )
        except httpx.HTTPError as exc:
            return self._emit(("failed", "stream_broken", f"the provider stream failed: {type(exc).__name__}: {exc}"))

    def _event(self, acc: Accumulator, ev: SSEEvent) -> bool:
        """Fold one event in; True once the stream says it is done."""
        self._pass_on(acc.feed(ev.event, ev.data))
        self._report_usage(acc)
        return acc.done


async def _drain(lines: AsyncIterator[str]) -> None:
    """Read what is left of a body whose stream is done (the end of its chunks, as a rule),
    ``DRAIN`` seconds at most: read to its end, its connection is kept for the next stream;
    else it is closed. Nothing it reads or fails with matters any more."""
    try:
        async with asyncio.timeout(DRAIN):
            async for _ in lines:
                pass
    except (TimeoutError, httpx.HTTPError, ProviderStreamError):
        pass
