"""A TurnHost's store calls, on a thread of their own: the actor thread never waits for the store.

A host's turns write every transition before carrying it out (``TurnActor``); here those
writes, and every read the host needs (a route, a turn's events, its commands, a claim and
load), run on one thread, one connection, in the order they were asked for. Each answer
goes back to the actor thread through the host's hand-off, as a call of the ``done`` given
with the job (``on_result(value, error)``), so the host keeps handling stops, timers and
other turns while the store is slow or away.

- **writes are retried** while the store cannot be reached (``StoreUnavailable``): with a
  growing pause (``BACKOFF``), for as long as their writer wants them (``forget(writer)``
  drops a writer's writes: a turn whose work stopped here). A write is idempotent
  (``base.TurnWrite``), so a retry after a commit whose answer was lost stores nothing
  twice. ``Fenced`` and a final ``StoreError`` end the write and are answered;
- the writes waiting from one writer are written as one (``TurnWrite.then``), and answered
  together, in order; writes come before the reads asked for after them;
- ``stuck_since``: since when the write at the head has been failing (None while the
  store answers), which the host watches.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import Fenced, StoreError, StoreUnavailable
from ..logs import logger
from ..store.base import TurnStore, TurnWrite

__all__ = ["BACKOFF", "Journal"]

BACKOFF = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0)  # seconds between two attempts of a write, then 1 s each

Done = Callable[[Any, BaseException | None], None]  # called on the actor thread


log = logger("greenroom.store")


@dataclass
class _Write:
    write: TurnWrite
    done: Done
    writer: object  # whose write: a TurnActor's write-ahead


@dataclass
class _Read:
    call: Callable[[TurnStore], Any]
    done: Done
    retry: bool  # retried like a write while the store cannot be reached (a claim, say)


class Journal:
    """One host's store calls; see the module docstring. ``hand`` puts an item on the host's
    hand-off (thread-safe); the host calls the item's ``done`` on its actor thread."""

    def __init__(self, store: TurnStore, hand: Callable[[Any], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self._hand = hand
        self._clock = clock
        self._jobs: deque[_Write | _Read] = deque()
        self._cond = threading.Condition()
        self._forgotten: weakref.WeakSet[Any] = weakref.WeakSet()  # the writers whose writes are dropped
        self._closed = False
        self.stuck_since: float | None = None
        self._thread = threading.Thread(target=self._run, name="greenroom-journal", daemon=True)
        self._thread.start()

    def write(self, write: TurnWrite, done: Done, writer: object) -> None:
        """Write ``write`` (for ``writer``); ``done(None, error)``: error None (written),
        ``Fenced`` or a final ``StoreError``."""
        self._put(_Write(write, done, writer))

    def read(self, call: Callable[[TurnStore], Any], done: Done, *, retry: bool = False) -> None:
        """Run ``call(store)``; ``done(value, None)`` or ``done(None, error)``. With ``retry``,
        tried again while the store cannot be reached."""
        self._put(_Read(call, done, retry))

    def forget(self, writer: object) -> None:
        """``writer``'s work stopped here: its writes not yet done are dropped, unanswered."""
        with self._cond:
            self._forgotten.add(writer)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._jobs.clear()
            self._cond.notify()

    @property
    def idle(self) -> bool:
        with self._cond:
            return not self._jobs and self.stuck_since is None

    def _put(self, job: _Write | _Read) -> None:
        with self._cond:
            if self._closed:
                return
            self._jobs.append(job)
            self._cond.notify()

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                jobs, self._jobs = list(self._jobs), deque()
            writes: dict[object, tuple[TurnWrite, list[Done]]] = {}  # by writer, in order
            reads: list[_Read] = []
            for job in jobs:
                if isinstance(job, _Read):
                    reads.append(job)
                    continue
                key = job.writer
                if key in writes:
                    merged, dones = writes[key]
                    writes[key] = (merged.then(job.write), [*dones, job.done])
                else:
                    writes[key] = (job.write, [job.done])
            for key, (write, dones) in writes.items():
                self._write(key, write, dones)
            for read in reads:
                self._read(read)

    def _write(self, writer: object, write: TurnWrite, dones: list[Done]) -> None:
        error: BaseException | None = None
        attempt = 0
        while True:
            if self._gone(writer):
                return
            try:
                self.store.log.write(write)
                break
            except StoreUnavailable as exc:
                self._failing(exc, f"write turn {write.turn_id}")
                if not self._pause(attempt):
                    return
                attempt += 1
            except (Fenced, StoreError) as exc:
                error = exc
                break
            except Exception as exc:  # noqa: BLE001 - a bug in a write fails that write, not the thread
                log().exception("writing turn %s failed", write.turn_id)
                error = StoreError(f"cannot write turn {write.turn_id}: {type(exc).__name__}: {exc}")
                break
        self.stuck_since = None
        for done in dones:
            self._hand(("journal", done, None, error))

    def _read(self, read: _Read) -> None:
        attempt = 0
        while True:
            try:
                value = read.call(self.store)
            except StoreUnavailable as exc:
                if not read.retry:
                    self._hand(("journal", read.done, None, exc))
                    return
                self._failing(exc, "read the store")
                if not self._pause(attempt):
                    return
                attempt += 1
                continue
            except BaseException as exc:  # noqa: BLE001 - the asker is told what failed
                self._hand(("journal", read.done, None, exc))
                return
            if read.retry:
                self.stuck_since = None
            self._hand(("journal", read.done, value, None))
            return

    def _failing(self, exc: StoreError, what: str) -> None:
        if self.stuck_since is None:
            self.stuck_since = self._clock()
            log().warning("cannot %s; trying again until the store answers: %s", what, exc)

    def _pause(self, attempt: int) -> bool:
        """Wait before the next attempt; False if the journal closed meanwhile."""
        with self._cond:
            if not self._closed:
                self._cond.wait(BACKOFF[min(attempt, len(BACKOFF) - 1)])
            return not self._closed

    def _gone(self, writer: object) -> bool:
        with self._cond:
            return writer in self._forgotten or self._closed
