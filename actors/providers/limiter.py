"""Where a provider's rate limit is held: in the store every host shares, else in this process.

One ``Limiter`` per process (``LIMITER``); every stream worker of the process asks it before
each attempt (``admit``), tells it when the provider's answer began (``sent``), the tokens
the stream used (``spend``) and the ``Retry-After`` of a 429 (``pause``). What it decides is the pure ``rates`` rules; where the
state is kept:

- with a store (``share``: the TurnHost gives it its store's ``rate_limits``), in the row of
  the (provider, key) for every host of the store, read and written in one transaction
  under the row's lock, on the store's clock. Its calls run on one thread of the process
  (``greenroom-rates``: one connection, whatever the number of streams), each bounded by
  ``STORE_WAIT`` seconds;
- without one, or while the store does not answer (an error, a call that took longer
  than ``STORE_WAIT``, and every call while that one is still under way), in this process: the local count, which
  starts from the store's last answer, holds alone. A store outage never fails a request
  nor ends a turn; it is logged once per outage.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from messages import RateLimit

from ..logs import logger
from . import rates
from .rates import Window

__all__ = ["LIMITER", "STORE_WAIT", "Limiter", "SharedRates"]

log = logger("greenroom.llm")

STORE_WAIT = 2.0  # seconds a store call may take before the local count decides alone

T = TypeVar("T")


class SharedRates(Protocol):
    """The store's side (``store.rates.SQLRates``): one row per key, changed under its lock."""

    def update(self, key: str, change: Callable[[str | None, float], tuple[str, Any]]) -> Any:
        """Call ``change(text, now)`` on the row's text (None: no row yet) and the store's
        clock; write the text it returns; return its second value. One transaction."""
        ...


class Limiter:
    """The rate limits of one process's streams: see the module docstring. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local: dict[str, Window] = {}
        self._shared: SharedRates | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0
        self._stuck: Future[Any] | None = None  # a store call that took too long and still runs
        self._down = False  # the store did not answer the last call (logged once)

    def share(self, shared: SharedRates | None) -> None:
        """Hold the limits in ``shared`` (a store's ``rates``) from now on; None: in this process."""
        with self._lock:
            self._shared = shared

    def admit(self, key: str, limit: RateLimit) -> tuple[float, str, float]:
        """``(0.0, "", counted_at)``: the request may go now (it is counted, at that time);
        else ``(seconds, reason, now)`` to wait."""
        return self._apply(key, lambda state, now: (*rates.admit(limit, state, now), now))

    def sent(self, key: str, limit: RateLimit, counted_at: float) -> None:
        """The provider's answer to the request counted at ``counted_at`` began: it counts from
        now. Not waited for: the stream reads on while the store is told (in order)."""
        self._apply(key, lambda state, now: rates.sent(limit, state, now, counted_at), wait=False)

    def spend(self, key: str, limit: RateLimit, tokens: int) -> None:
        """A stream used ``tokens``. Not waited for; this process's next call comes after it."""
        if limit.tokens_per_minute is not None and tokens > 0:
            self._apply(key, lambda state, now: rates.spend(limit, state, now, tokens), wait=False)

    def pause(self, key: str, limit: RateLimit, seconds: float) -> None:
        self._apply(key, lambda state, now: rates.pause(limit, state, now, seconds))

    def _apply(self, key: str, rule: Callable[[Window, float], T], wait: bool = True) -> T:
        shared = self._shared
        if shared is not None:
            found = self._in_store(shared, key, rule, wait)
            if found is not None:
                return found[0]
        with self._lock:
            return rule(self._local.setdefault(key, Window()), time.time())

    def _in_store(
        self, shared: SharedRates, key: str, rule: Callable[[Window, float], T], wait: bool
    ) -> tuple[T] | None:
        """``(result,)`` from the store, or None when it did not answer in time (see above);
        not ``wait``: ``(None,)`` once the call is on its way."""

        def change(text: str | None, now: float) -> tuple[str, tuple[Window, T]]:
            state = rates.loads(text)
            result = rule(state, now)
            return rates.dumps(state), (state, result)

        with self._lock:
            if self._stuck is not None and not self._stuck.done():
                return None  # the store is still on a call that timed out: it does not answer
            if self._pool is None or self._pid != os.getpid():  # a forked child has no thread
                self._pool, self._pid = ThreadPoolExecutor(1, thread_name_prefix="greenroom-rates"), os.getpid()
            future = self._pool.submit(shared.update, key, change)  # after the calls of other streams
        if not wait:
            return (None,)  # type: ignore[return-value]
        try:
            state, result = future.result(timeout=STORE_WAIT)
        except Exception as exc:  # unreachable, refused, or too slow: the local count holds alone
            if not future.done():
                self._stuck = future
            if not self._down:
                self._down = True
                log().warning("rate limits held in this process alone: the store did not answer (%s)", exc)
            return None
        with self._lock:
            self._local[key] = Window(list(state.sent), list(state.spent), state.paused_until, state.paused_by)
            if self._down:
                self._down = False
                log().info("rate limits held in the store again")
        return (result,)


LIMITER = Limiter()
