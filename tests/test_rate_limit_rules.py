"""The rules of a provider's rate limit (``actors.providers.rates``), driven with a given clock:
no database, no process, no network; and the limiter when its store cannot be reached."""

from __future__ import annotations

import random
import socket

import pytest
from pydantic import ValidationError

from actors.providers import rates
from actors.providers.limiter import Limiter
from actors.providers.rates import Window, admit, key_of, pause, sent, spend
from actors.store.rates import SQLRates
from messages import RateLimit


def test_a_request_goes_while_fewer_than_the_limit_went_in_the_window() -> None:
    limit, state = RateLimit(requests_per_minute=3, window=10.0), Window()
    assert [admit(limit, state, t) for t in (0.0, 1.0, 2.0)] == [(0.0, "")] * 3
    assert admit(limit, state, 5.0) == (5.0, "requests_per_minute")  # the first leaves at 10.0
    assert state.sent == [0.0, 1.0, 2.0]  # a request that waits is not counted
    assert admit(limit, state, 10.0) == (0.0, "")  # the window (0, 10] holds two: t=0 has left
    assert admit(limit, state, 10.5) == (0.5, "requests_per_minute")  # t=1 leaves at 11


def test_no_window_anywhere_holds_more_requests_than_the_limit() -> None:
    limit, state, rng = RateLimit(requests_per_minute=7, window=3.0), Window(), random.Random(32)
    now, granted = 0.0, []
    for _ in range(2000):
        now += rng.expovariate(10.0)  # about 10 asks a second against 7 per 3 s
        if admit(limit, state, now) == (0.0, ""):
            granted.append(now)
    assert len(granted) > 0.9 * 7 * now / limit.window  # and it lets through almost all it may
    for i, start in enumerate(granted):  # every window that starts at a request
        assert sum(1 for t in granted[i:] if t < start + limit.window) <= 7


def test_what_it_says_to_wait_is_exactly_when_the_next_one_may_go() -> None:
    limit, state = RateLimit(requests_per_minute=2, window=4.0), Window()
    admit(limit, state, 0.0), admit(limit, state, 1.5)
    delay, reason = admit(limit, state, 2.0)
    assert (delay, reason) == (2.0, "requests_per_minute")
    assert admit(limit, state, 2.0 + delay - 1e-9)[0] > 0
    assert admit(limit, state, 2.0 + delay + 1e-9) == (0.0, "")


def test_a_request_counts_from_when_its_answer_began_so_the_next_waits_a_window_after_it() -> None:
    limit, state = RateLimit(requests_per_minute=1, window=10.0), Window()
    assert admit(limit, state, 0.0) == (0.0, "")
    sent(limit, state, 0.25, 0.0)  # it took 250 ms to reach the provider
    assert state.sent == [0.25]
    assert admit(limit, state, 10.0) == (0.25, "requests_per_minute")
    sent(limit, state, 11.0, 99.0)  # a request it never counted: nothing changes
    assert admit(limit, state, 10.25) == (0.0, "")


def test_tokens_used_in_the_window_hold_the_next_request_back_until_enough_left() -> None:
    limit, state = RateLimit(tokens_per_minute=100, window=10.0), Window()
    assert admit(limit, state, 0.0) == (0.0, "")
    spend(limit, state, 1.0, 60)
    assert admit(limit, state, 2.0) == (0.0, "")  # 60 < 100: it may go
    spend(limit, state, 3.0, 50)
    assert admit(limit, state, 4.0) == (7.0, "tokens_per_minute")  # 110 until t=1's 60 leave at 11
    assert admit(limit, state, 11.5) == (0.0, "")


def test_a_retry_after_holds_every_request_until_it_ends_and_the_later_pause_wins() -> None:
    limit, state = RateLimit(requests_per_minute=100, window=60.0), Window()
    pause(limit, state, 10.0, 5.0)
    pause(limit, state, 11.0, 1.0)  # earlier than the one held: nothing changes
    assert admit(limit, state, 12.0) == (3.0, "retry_after")
    assert admit(limit, state, 15.0) == (0.0, "")


def test_the_state_survives_its_text_and_a_missing_row_is_empty() -> None:
    limit, state = RateLimit(requests_per_minute=5, tokens_per_minute=9, window=2.0), Window()
    admit(limit, state, 1.0), spend(limit, state, 1.5, 4), pause(limit, state, 1.6, 3.0)
    assert rates.loads(rates.dumps(state)) == state
    assert rates.loads(None) == Window() == rates.loads("")


def test_the_limit_is_named_by_the_key_s_fingerprint_never_the_key() -> None:
    key = key_of("https://api.example.com/v1/", "sk-secret-123")
    assert key.startswith("https://api.example.com/v1#") and "sk-secret" not in key
    assert key == key_of("https://api.example.com/v1", "sk-secret-123")
    assert key != key_of("https://api.example.com/v1", "sk-other")
    assert key_of("https://api.example.com/v1", None) == "https://api.example.com/v1#no-key"


def test_a_store_that_cannot_be_reached_leaves_the_limit_to_the_process() -> None:
    with socket.socket() as sock:  # a port on 127.0.0.1 that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    from actors.store.postgres import PostgresDatabase

    limiter, limit = Limiter(), RateLimit(requests_per_minute=2, window=60.0)
    limiter.share(SQLRates(PostgresDatabase(f"postgresql://greenroom@127.0.0.1:{port}/none", 1.0, True)))
    assert [limiter.admit("k", limit)[1] for _ in range(3)] == ["", "", "requests_per_minute"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"requests_per_minute": 0}, "requests_per_minute must be an int >= 1 (None: no limit), not 0"),
        ({"requests_per_minute": 2.5}, "requests_per_minute must be an int >= 1 (None: no limit), not 2.5"),
        ({"requests_per_minute": True}, "requests_per_minute must be an int >= 1 (None: no limit), not True"),
        ({"tokens_per_minute": -5}, "tokens_per_minute must be an int >= 1 (None: no limit), not -5"),
        ({"requests_per_minute": 10, "window": 0}, "window must be a number of seconds > 0 (60: a minute), not 0"),
        (
            {"requests_per_minute": 10, "window": "1m"},
            "window must be a number of seconds > 0 (60: a minute), not '1m'",
        ),
        ({}, "a RateLimit needs requests_per_minute, tokens_per_minute or both"),
    ],
)
def test_a_rate_limit_of_zero_or_none_is_refused_saying_which(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        RateLimit(**fields)  # type: ignore[arg-type]
    assert [e["msg"] for e in caught.value.errors()] == [f"Value error, {message}"]
