"""A provider's rate limit end to end: a real Runtime, the scripted provider over HTTP on
127.0.0.1, the limit measured where it matters, at the provider; a turn that waits for it says
so and stops at once; two host processes on one store share it, a 429's ``Retry-After`` too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import RateLimit, RateLimited, Runtime, TurnRetrying
from actors.lifecycle.processes import session_processes
from actors.placement import rendezvous
from actors.testing import ScriptedProvider, say
from actors.testing.script import Reply, fail
from actors.testing.server import Request
from messages import RetryPolicy, TurnOptions

from .helpers import summary

pytestmark = pytest.mark.integration


def most_in_any_window(times: list[float], window: float) -> int:
    """The most of ``times`` (seconds) that fall in any half-open window of ``window`` seconds."""
    times = sorted(times)
    return max((sum(1 for t in times[i:] if t < start + window) for i, start in enumerate(times)), default=0)


def on(host: str, rt: Runtime) -> str:
    """A new turn id that ``rt`` places on ``host``."""
    hosts, n = rt.placeable(), 0
    while rendezvous(tid := f"{host}-{time.monotonic_ns()}-{n}", hosts) != host:
        n += 1
    return tid


def _closed(rt: Runtime) -> None:
    rt.close()
    assert rt.admin_sid is not None
    assert session_processes(rt.admin_sid) == [], "the Runtime left processes behind"


@pytest.fixture
def provider() -> Iterator[ScriptedProvider]:
    with ScriptedProvider(responder=lambda request: say("ok")) as p:
        yield p


def test_a_turn_that_waits_for_the_limit_says_so_and_a_stop_ends_it_at_once(provider: ScriptedProvider) -> None:
    limit = RateLimit(requests_per_minute=1, window=60.0)
    rt = Runtime(provider.provider(rate_limit=limit), hosts=1, tool_processes=1).start()
    try:
        assert rt.run("first").result(30).text == "ok"
        second = rt.run("second")
        waiting = second.wait_for(lambda e: isinstance(e, RateLimited), timeout=30)
        assert isinstance(waiting, RateLimited) and waiting.reason == "requests_per_minute"
        assert 55 < waiting.until - time.time() <= 60 * 1.02  # the first leaves the window then (jitter: 2 %)
        assert second.status == "rate_limited"
        asked = time.monotonic()
        second.stop("enough")
        finish = second.result(10, final=True)
        took = time.monotonic() - asked
        assert finish.finish_reason == "stopped" and took < 2.0, took
        assert len(provider.requests) == 1  # the stopped turn never reached the provider
        assert summary(second.all_events) == [
            ("turn_started",),
            ("rate_limited", "requests_per_minute"),
            ("error", "stopped", "Agent run stopped"),
            ("finish", "stopped"),
        ]
    finally:
        _closed(rt)


def test_two_host_processes_on_one_store_hold_one_limit_at_the_provider(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    limit = RateLimit(requests_per_minute=6, window=2.0)  # 6 in any 2 s: the same rules as 60 a minute
    rt = Runtime(provider.provider(rate_limit=limit), hosts=2, tool_processes=1, store=tmp_path / "turns.db").start()
    try:
        a, b = rt.placeable()
        handles = [rt.run(f"t{n}", turn_id=on(a if n % 2 else b, rt)) for n in range(24)]
        assert len({h.host for h in handles}) == 2  # both hosts ask the provider
        assert [h.result(60, final=True).text for h in handles] == ["ok"] * 24
        assert any(isinstance(e, RateLimited) for h in handles for e in h.all_events)
        times = [r.received_at for r in provider.requests]
        assert len(times) == 24
        # at most the limit in any window, less 50 ms: the time from a grant to the provider varies
        assert most_in_any_window(times, 2.0 - 0.050) <= 6
        assert most_in_any_window(times, 2.0 + 0.5) > 6  # and the limit is used: more go in a longer window
        assert max(times) - min(times) >= 3 * 2.0 - 0.1  # 24 at 6 a window: at least three windows after the first
    finally:
        _closed(rt)


def test_a_retry_after_seen_by_one_host_holds_the_other_back(tmp_path: Path) -> None:
    replies = iter([fail(429, "slow down", retry_after=2.0)])

    def respond(request: Request) -> Reply:
        return next(replies, None) or say("ok")

    with ScriptedProvider(responder=respond) as provider:
        limit = RateLimit(requests_per_minute=1000, window=60.0)
        config = provider.provider(rate_limit=limit, retry=RetryPolicy(max_attempts=3, initial_delay=0.0, jitter=0))
        rt = Runtime(config, hosts=2, tool_processes=1, store=tmp_path / "turns.db").start()
        try:
            a, b = rt.placeable()
            first = rt.run("first", turn_id=on(a, rt))
            first.wait_for(lambda e: isinstance(e, TurnRetrying), timeout=30)  # after the pause was stored
            other = rt.run("other", turn_id=on(b, rt))
            waited = other.wait_for(lambda e: isinstance(e, RateLimited), timeout=30)
            assert isinstance(waited, RateLimited) and waited.reason == "retry_after"
            assert other.result(30, final=True).text == "ok" and first.result(30, final=True).text == "ok"
            times = [r.received_at for r in provider.requests]
            assert len(times) == 3 and min(times[1:]) >= times[0] + 1.9  # nobody asked before Retry-After's end
        finally:
            _closed(rt)


def test_a_wait_for_the_limit_longer_than_idle_timeout_is_not_silence(provider: ScriptedProvider) -> None:
    limit = RateLimit(requests_per_minute=1, window=1.5)
    rt = Runtime(provider.provider(rate_limit=limit), hosts=1, tool_processes=1).start()
    try:
        options = TurnOptions(idle_timeout=0.5)
        assert rt.run("first", options=options).result(30).text == "ok"
        second = rt.run("second", options=options)
        assert second.result(30, final=True).text == "ok"  # it waited about 1.5 s, three idle timeouts
        assert summary(second.all_events) == [
            ("turn_started",), ("rate_limited", "requests_per_minute"), ("text", "ok"), ("finish", "stop"),
        ]  # fmt: skip
    finally:
        _closed(rt)


def test_the_tokens_a_stream_used_hold_the_next_request_back_until_they_leave_the_window() -> None:
    with ScriptedProvider(responder=lambda request: say("ok", usage=(60, 40))) as provider:
        limit = RateLimit(tokens_per_minute=150, window=2.0)  # two answers of 100 tokens: the second waits
        rt = Runtime(provider.provider(rate_limit=limit), hosts=1, tool_processes=1).start()
        try:
            assert [rt.run(p).result(30).text for p in ("one", "two")] == ["ok", "ok"]  # 0, then 100 < 150
            third = rt.run("three")
            assert third.result(30, final=True).text == "ok"
            assert ("rate_limited", "tokens_per_minute") in summary(third.all_events)
            times = [r.received_at for r in provider.requests]
            assert times[2] - times[0] >= 2.0 - 0.05  # the first answer's 100 tokens left the window first
        finally:
            _closed(rt)
