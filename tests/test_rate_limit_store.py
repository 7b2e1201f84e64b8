"""The store's rate limits (store schema 6) on both backends: a store of schema 4 gets the table
when opened; many processes asking at once are served one at a time under the row's lock, so
together they never take more than the limit; the key is never in the store."""

from __future__ import annotations

import multiprocessing
from typing import Any

from actors.providers.limiter import Limiter
from actors.providers.rates import key_of
from actors.store import open_store
from actors.store.base import STORE_SCHEMA
from messages import RateLimit

from .stores import sql

LIMIT = RateLimit(requests_per_minute=25, window=30.0)


def test_a_store_of_schema_4_gets_the_rate_limits_table_when_opened(store_location: str) -> None:
    open_store(store_location).close()
    sql(store_location, "DROP TABLE rate_limits")
    sql(store_location, "UPDATE meta SET value = '4' WHERE key = 'schema'")
    store = open_store(store_location)
    try:
        limiter = Limiter()
        limiter.share(store.rates)
        assert limiter.admit("k", RateLimit(requests_per_minute=1))[:2] == (0.0, "")
        assert limiter.admit("k", RateLimit(requests_per_minute=1))[1] == "requests_per_minute"
    finally:
        store.close()
    assert sql(store_location, "SELECT value FROM meta WHERE key = 'schema'") == [(str(STORE_SCHEMA),)] == [("8",)]


def _ask(location: str, key: str, asks: int, together: Any, out: Any) -> None:
    store = open_store(location)
    limiter = Limiter()
    limiter.share(store.rates)
    together.wait(60)  # every process asks from the same moment on
    out.put([limiter.admit(key, LIMIT)[1] for _ in range(asks)])
    store.close()


def test_four_processes_asking_at_once_take_exactly_the_limit_between_them(store_location: str) -> None:
    key = key_of("http://127.0.0.1:9/v1", "sk-never-stored-" + "x" * 20)
    context = multiprocessing.get_context("spawn")
    out, together = context.Queue(), context.Barrier(4)
    open_store(store_location).close()
    procs = [context.Process(target=_ask, args=(store_location, key, 10, together, out)) for _ in range(4)]
    for p in procs:
        p.start()
    try:
        answers = [out.get(timeout=60) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(5)
    granted = sum(a.count("") for a in answers)
    assert granted == 25 and sum(len(a) for a in answers) == 40
    assert all(reason in ("", "requests_per_minute") for a in answers for reason in a)
    rows = sql(store_location, "SELECT key, state FROM rate_limits")
    assert [r[0] for r in rows] == [key] and "sk-never-stored" not in repr(rows)
