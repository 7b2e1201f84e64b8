"""One provider stream, run on its client's thread (``client``), abortable at once from another thread.

The worker's only outputs go through ``emit`` (the LLMActor queues them and wakes itself
through a pipe); it never calls Thespian. ``abort()`` shuts down the stream's sockets with
``SHUT_RDWR``, which frees a reader blocked in ``recv`` within milliseconds, even on a
stalled stream; the provider sees the connection close.

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

import itertools
import json
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from messages import StreamChat

from ..debug_trace import trace
from .anthropic import AnthropicAdapter
from .base import Accumulator, Adapter, ProviderStreamError, error_message
from .client import DEADLINES, ProviderClient, ssl_context
from .limiter import LIMITER
from .openai import OpenAIAdapter
from .rates import key_of
from .sse import iter_sse

__all__ = ["ADAPTERS", "ProviderClient", "StreamOutput", "StreamWorker", "backoff_delay", "ssl_context"]

ADAPTERS: dict[str, Adapter] = {"openai": OpenAIAdapter(), "anthropic": AnthropicAdapter()}

# What a worker emits: ("text", str) | ("retry", attempt, delay, reason) | ("usage", Usage)
# | ("limited", until, reason, delay)
# | ("done", ChatMessage, finish_reason, Usage | None) | ("failed", error_type, message)
StreamOutput = tuple[Any, ...]

_RETRY_STATUS = {429, 500, 502, 503, 504, 529}

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


def _body_lines(response: httpx.Response) -> tuple[bool, Iterator[str]]:
    """Whether ``response``'s body is an event stream, and all its lines.

    It is when its content type says so, or when it has none and its first non-blank line
    is an SSE field or comment; only that line and the blank ones before it are read here.
    """
    lines = response.iter_lines()
    content_type = response.headers.get("content-type")
    if content_type is not None:
        return content_type.partition(";")[0].strip().lower() == "text/event-stream", lines
    head: list[str] = []
    for line in lines:
        head.append(line)
        if line.strip():
            break
    first = head[-1].strip() if head else ""
    return bool(first) and first.partition(":")[0] in _SSE_FIELDS, itertools.chain(head, lines)


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
    """Runs one ``StreamChat`` request on a ``ProviderClient`` in a daemon thread."""

    def __init__(self, request: StreamChat, emit: Callable[[StreamOutput], None], client: ProviderClient) -> None:
        self.request = request
        self.client = client
        self._emit_raw = emit
        self._emit = self._emit_traced
        self._lock = threading.Lock()
        self._aborted = threading.Event()
        self._abort_report: tuple[str, str] | None = None
        self._sent_text = False
        self._ended = False
        self._usage: Any = None  # the usage last emitted (or the stream's, once done)
        self._limit_key = ""  # the (provider, key) of its rate limit
        self._counted_at: float | None = None  # when the limit counted the attempt under way

    def start(self) -> None:
        self.client.run(self._main)

    def _emit_traced(self, out: StreamOutput) -> None:
        trace("worker emit", self.request.stream_id, out[0])
        if out[0] in ("done", "failed"):  # the last output: from here on abort() does nothing,
            with self._lock:  # so the client is spent already or stays fit for the next stream
                self._ended = True
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
        """Abort now. With ``report`` the worker emits it as its failure; otherwise nothing.
        Once the stream has ended this does nothing (its client may serve another)."""
        with self._lock:
            if self._aborted.is_set() or self._ended:
                return
            self._abort_report = report
            self.client.spend()  # spent before anyone can see the abort and reuse the client
            self._aborted.set()  # before the sockets break, so the thread reports the abort
        self.client.shutdown()

    # -- the thread ------------------------------------------------------------------------

    def _main(self) -> None:
        provider = self.request.provider
        total = provider.timeouts.total
        deadline = None
        if total is not None:
            report = ("total_timeout", f"the provider stream took longer than {total:g} s")
            deadline = DEADLINES.add(total, lambda: self.abort(report))
        try:
            self._run()
        except BaseException as exc:  # the worker must always end with one output
            if self._aborted.is_set():
                self._report_abort()
            else:
                self._emit(("failed", "internal_error", f"{type(exc).__name__}: {exc}"))
        finally:
            with self._lock:
                self._ended = True  # an abort that reported nothing: the same holds
            if deadline is not None:
                DEADLINES.cancel(deadline)
            self._spend()  # an aborted stream's tokens so far

    def _report_abort(self) -> None:
        if self._abort_report is not None:
            self._emit(("failed",) + self._abort_report)

    def _run(self) -> None:
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
            if self._aborted.is_set() or (limit is not None and not self._wait_for_limit()):
                return self._report_abort()
            try:
                return self._attempt(adapter, url, headers, body, timeout)
            except _Retry as retry:
                if limit is not None and retry.retry_after is not None:  # for every host of the store
                    LIMITER.pause(self._limit_key, limit, retry.retry_after)
                if self._aborted.is_set():
                    return self._report_abort()
                if attempt >= policy.max_attempts:
                    return self._emit(("failed", "provider_unavailable", f"{retry.reason} (after {attempt} attempts)"))
                delay = backoff_delay(attempt, policy.initial_delay, policy.max_delay, policy.jitter, retry.retry_after)
                self._emit(("retry", attempt, delay, retry.reason))
                if self._aborted.wait(delay):
                    return self._report_abort()

    def _wait_for_limit(self) -> bool:
        """Wait until the rate limit lets this attempt go (it is counted); False if aborted first."""
        limit = self.request.provider.rate_limit
        assert limit is not None
        told: tuple[float, str] = (0.0, "")
        while True:
            delay, reason, self._counted_at = LIMITER.admit(self._limit_key, limit)
            if delay <= 0:
                return not self._aborted.is_set()  # stopped while the store answered: nothing is sent
            delay += random.uniform(0, 0.02 * delay)  # the hosts that wait do not all ask at once
            until = time.time() + delay
            if reason != told[1] or until > told[0] + 1.0:
                told = (until, reason)
                self._emit(("limited", until, reason, delay))
            if self._aborted.wait(delay):
                return False

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

    def _attempt(
        self, adapter: Adapter, url: str, headers: dict[str, str], body: dict[str, Any], timeout: httpx.Timeout
    ) -> None:
        req = self.request
        try:
            with self.client.client.stream(
                "POST", url, headers=headers, json=body, timeout=timeout, extensions={"trace": self.client.trace}
            ) as response:
                limit, counted_at = req.provider.rate_limit, self._counted_at
                if limit is not None and counted_at is not None:  # it reached the provider: it counts from now
                    LIMITER.sent(self._limit_key, limit, counted_at)
                if response.status_code != 200:
                    detail = response.read()[:500].decode("utf-8", "replace")
                    reason = f"the provider answered HTTP {response.status_code}: {detail}"
                    if response.status_code in _RETRY_STATUS:
                        raise _Retry(reason, _retry_after(response))
                    return self._emit(("failed", "http_error", reason))
                acc = adapter.accumulator(req.stream_id)
                is_stream, lines = _body_lines(response)
                if is_stream:
                    for ev in iter_sse(lines):
                        text = acc.feed(ev.event, ev.data)
                        if self._aborted.is_set():
                            return self._report_abort()
                        self._pass_on(text)
                        self._report_usage(acc)
                        if acc.done:
                            break
                    if not acc.received:
                        raise ProviderStreamError("empty_stream", "the provider's event stream ended without any data")
                else:
                    self._pass_on(_whole_answer(acc, response.headers.get("content-type"), "\n".join(lines)))
                message, finish, usage = acc.result()
                return self._emit(("done", message, finish, usage))
        except ProviderStreamError as exc:
            return self._emit(("failed", exc.error_type, exc.message))
        except (
            httpx.ConnectError,
            httpx.ConnectTimeout,
            httpx.RemoteProtocolError,
            httpx.ReadError,
            httpx.WriteError,
        ) as exc:
            if self._aborted.is_set():
                return self._report_abort()
            if not self._sent_text:  # nothing reached the turn yet: safe to try again
                raise _Retry(f"connection to the provider at {url} failed: {type(exc).__name__}: {exc}") from None
            return self._emit(("failed", "stream_broken", f"the provider stream broke: {type(exc).__name__}: {exc}"))
        except httpx.ReadTimeout:
            if self._aborted.is_set():
                return self._report_abort()
            return self._emit(
                ("failed", "read_timeout", f"the provider sent nothing for {req.provider.timeouts.read:g} s")
            )
        except httpx.HTTPError as exc:
            if self._aborted.is_set():
                return self._report_abort()
            return self._emit(("failed", "stream_broken", f"the provider stream failed: {type(exc).__name__}: {exc}"))
