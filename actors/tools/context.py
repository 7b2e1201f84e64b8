"""What a running tool can see of its call: ``ToolContext.current()``.

A ``ToolContext`` exists for exactly one tool call, in the ToolActor's process, and is
visible (through a context variable) in the thread or task that runs the tool. It is *not*
inherited by threads the tool starts itself: pass them what they need (the ``Cancellation``
object is thread-safe and may be handed over).

``Cancellation`` is the light channel between the runtime and the tool, as seed ``003``
describes it: a stop first notifies the registered callbacks, then the tool is interrupted.

- ``on_stop(callback)`` registers a callback that runs once when the call is stopped; the
  returned ``Registration`` is a context manager, ``close()`` unregisters it (idempotent);
- when a stop arrives, every callback registered at that moment (closed ones excluded)
  starts at once, each on a thread of its own, never on the thread that delivered the stop
  (a tool process's or a TurnHost's actor thread): none waits for another, so one that
  blocks or raises delays no other callback, nor the stop, nor any other turn;
- the callbacks of a stop share one deadline, ``callback_deadline`` seconds after the stop
  (``stop_grace / 2`` in a call); one still running then is logged and named in
  ``overstayed`` (its call's tool message says so), and not waited for;
- only once every one of them has returned, or the deadline has passed, does the tool see
  its stop: ``requested``, ``mode``, ``reason``, ``throw_if_requested()``, ``wait()`` (and,
  in the ToolActor, the cancellation of an ``async def`` tool's task). Cancel only sets the
  flag, at once: it runs no callback; a stop after a cancel still runs them;
- registering after the stop arrived runs the callback at once, in the registering thread,
  before ``on_stop`` returns, whether or not the stop's callbacks are still running; closing
  a registration after the stop arrived changes nothing (it was taken at the stop);
- a callback that raises anything (``SystemExit`` included) is logged, and fails that
  callback alone: the others run, the stop goes on, the process lives;
- when the call ends (``_close``), its remaining registrations are dropped: no callback of
  the call starts after that, and a stop that comes later runs nothing.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import threading
from collections.abc import Callable
from typing import Any, Literal

from ..errors import ToolCancelled, ToolContextError
from ..logs import logger
from . import standby

__all__ = ["CALLBACK_DEADLINE", "Cancellation", "Registration", "ToolContext"]

CALLBACK_DEADLINE = 1.0  # seconds a stop's callbacks have by default: half the default stop_grace

PhaseOver = Callable[[tuple[str, ...]], None]  # told the overstayed callbacks' names once the tool sees its stop


log = logger("greenroom.tools")


_current: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar("greenroom_tool_context", default=None)


class Registration:
    """One ``on_stop`` callback; ``close()`` (or leaving the ``with`` block) unregisters it."""

    def __init__(self, owner: Cancellation, key: int) -> None:
        self._owner = owner
        self._key = key

    def close(self) -> None:
        """Unregister; a no-op if the stop already took the callback or the call has ended."""
        self._owner._unregister(self._key)

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Cancellation:
    """Stop/cancel state of one tool call (see the module docstring). Thread-safe."""

    def __init__(self, callback_deadline: float = CALLBACK_DEADLINE) -> None:
        self.callback_deadline = callback_deadline
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], Any]] = {}
        self._keys = itertools.count()
        self._mode: Literal["stop", "cancel"] | None = None  # what the tool sees
        self._reason = ""  # the first request's, stop or cancel
        self._stopped = False  # a stop has arrived (its callbacks may still run)
        self._closed = False  # the call has ended
        self._running: dict[int, str] = {}  # the stop's callbacks still running, by key: their names
        self._ending = False  # the stop's callback phase is over, or being ended (once)
        self._overstayed: tuple[str, ...] = ()
        self._then: PhaseOver | None = None
        self._deadline: standby.Later | None = None
        self._requested = threading.Event()  # the tool sees a stop or a cancel
        self._seen = threading.Event()  # a stop's callback phase is over: the tool sees it
        self._returned = threading.Event()  # every callback of the stop has returned

    @property
    def requested(self) -> bool:
        """True once the tool sees a stop or cancel of this call."""
        return self._mode is not None

    @property
    def mode(self) -> Literal["stop", "cancel"] | None:
        """``"stop"`` or ``"cancel"`` once the tool sees it (a stop wins over an earlier cancel)."""
        return self._mode

    @property
    def reason(self) -> str:
        """Why the first stop or cancel was requested; ``""`` until the tool sees one."""
        return self._reason if self._mode is not None else ""

    @property
    def registered(self) -> int:
        """How many callbacks are registered and not taken by a stop (for tests and diagnostics)."""
        with self._lock:
            return len(self._callbacks)

    @property
    def overstayed(self) -> tuple[str, ...]:
        """The names of the stop's callbacks still running at its deadline."""
        return self._overstayed

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the tool sees a stop or cancel (True) or ``timeout`` passes (False)."""
        return self._requested.wait(timeout)

    def throw_if_requested(self) -> None:
        """Raise ``ToolCancelled`` if the tool sees a stop or cancel."""
        mode = self._mode
        if mode is not None:
            raise ToolCancelled(mode, self._reason)

    def on_stop(self, callback: Callable[[], Any]) -> Registration:
        """Run ``callback`` once when the call is stopped: at once, in this thread, if a stop
        has arrived already; never once the call has ended."""
        with self._lock:
            key = next(self._keys)
            if self._closed:
                return Registration(self, key)
            stopped = self._stopped
            if not stopped:
                self._callbacks[key] = callback
                waiting = len(self._callbacks)
        if not stopped:
            standby.warm(waiting)  # a stop starts them on threads parked now, not on new ones
            return Registration(self, key)
        _run_callback(callback)
        return Registration(self, key)

    def _unregister(self, key: int) -> None:
        with self._lock:
            self._callbacks.pop(key, None)

    def _request(self, mode: Literal["stop", "cancel"], reason: str, then: PhaseOver | None = None) -> bool:
        """Record a request. A cancel sets the flag at once. The first stop starts every
        registered callback, each on a thread of its own, and sets the flag once they have
        all returned or ``callback_deadline`` has passed; then ``then(overstayed)`` is
        called (on whichever thread ended the phase; on this one if there was no callback).
        True if this request started a stop's callback phase (``then`` will be called)."""
        with self._lock:
            if self._closed:
                return False
            if self._mode is None and not self._stopped:  # the first request: its reason is the one
                self._reason = reason
            if mode == "cancel":
                if self._mode is None:
                    self._mode = "cancel"
                    self._requested.set()
                return False
            if self._stopped:
                return False
            self._stopped, self._then = True, then
            callbacks = list(self._callbacks.items())
            self._callbacks.clear()
            self._running = {key: _name(callback) for key, callback in callbacks}
        if not callbacks:
            self._returned.set()
            self._phase_over(())
            return True
        # the timer thread hands the deadline's work (the held outcome's report) to a thread
        self._deadline = standby.later(
            self.callback_deadline, standby.run, self._deadline_passed, "greenroom on_stop deadline"
        )
        for key, callback in callbacks:
            standby.run(functools.partial(self._run_one, key, callback), f"greenroom on_stop {self._running[key]}")
        return True

    def _run_one(self, key: int, callback: Callable[[], Any]) -> None:
        try:
            _run_callback(callback)
        finally:
            with self._lock:
                self._running.pop(key, None)
                last = not self._running
            if last:
                self._returned.set()
                if self._deadline is not None:
                    self._deadline.cancel()
                self._phase_over(())

    def _deadline_passed(self) -> None:
        with self._lock:
            late = tuple(self._running.values())
        if late:
            self._phase_over(late)

    def _phase_over(self, overstayed: tuple[str, ...]) -> None:
        """The stop's callbacks have returned (or ``overstayed``, logged first): the tool sees
        its stop now; nothing if the phase was over already."""
        with self._lock:
            if self._ending:
                return
            self._ending = True
        for name in overstayed:
            log().warning("on_stop callback %s did not return within %g s of the stop; the tool sees its "
                          "stop without waiting for it", name, self.callback_deadline)  # fmt: skip
        with self._lock:
            self._overstayed = overstayed
            self._mode = "stop"
            self._requested.set()
            self._seen.set()
            then, self._then = self._then, None
        if then is not None:
            then(overstayed)

    def _settle(self, timeout: float | None = None) -> bool:
        """If a stop has arrived, wait (at most ``timeout``) until the tool sees it; True
        unless the wait timed out. The runtime's own helpers (``run_command``) call it
        before they look at the flag, so that a stop they noticed first is seen as a stop."""
        return self._seen.wait(timeout) if self._stopped else True

    def _still_running(self) -> tuple[str, ...]:
        """The names of the stop's callbacks that have not returned yet."""
        with self._lock:
            return tuple(self._running.values())

    def callbacks_returned(self, timeout: float | None = None) -> bool:
        """Wait until every callback the stop took has returned (True), or ``timeout`` passes."""
        return self._returned.wait(timeout)

    def _close(self) -> None:
        """The call has ended: drop what is left; no callback of the call starts from now on."""
        with self._lock:
            self._closed = True
            self._callbacks.clear()


def _name(callback: Callable[[], Any]) -> str:
    """A callback's name for the tool message and the log: ``close_index``, ``Index.close``."""
    name = getattr(callback, "__qualname__", None) or getattr(callback, "__name__", None) or repr(callback)
    return str(name).rsplit("<locals>.", 1)[-1]


def _run_callback(callback: Callable[[], Any]) -> None:
    try:
        callback()
    except BaseException:  # noqa: BLE001 - SystemExit from a callback fails that callback alone
        log().exception("an on_stop callback raised; the stop goes on")


class ToolContext:
    """The running call's identity, progress channel and cancellation."""

    def __init__(
        self,
        *,
        turn_id: str,
        root_turn_id: str,
        call_id: str,
        tool_name: str,
        idempotency_key: str,
        attempt: int = 1,
        epoch: int = 0,
        stop_grace: float = 2.0,
        cancellation: Cancellation | None = None,
        progress: Callable[[Any], None] | None = None,
        provider: Any = None,
        child_starter: Callable[[Any], None] | None = None,
        trace_context: dict[str, str] | None = None,
        tokens_left: int | None = None,
        cost_left: float | None = None,
    ) -> None:
        self.turn_id = turn_id
        self.root_turn_id = root_turn_id
        self.call_id = call_id
        self.tool_name = tool_name
        self.idempotency_key = idempotency_key
        self.attempt = attempt  # which run of the call this is (a retry_safe call may run again)
        self.epoch = epoch  # the epoch its turn's host holds the turn at in the store (0: no store)
        self.stop_grace = stop_grace
        self.cancellation = cancellation or Cancellation(stop_grace / 2)
        self.provider = provider
        self.trace_context = trace_context  # W3C carrier of the call's execute_tool span, if traced
        self._progress = progress
        self._child_starter = child_starter
        # what the turn's budgets had left when the call started: each sub-agent gets no more
        self.tokens_left = tokens_left
        self.cost_left = cost_left

    @staticmethod
    def current() -> ToolContext:
        """The context of the tool call running in this thread or task.

        Raises ``ToolContextError`` outside a running tool, including in threads the tool
        started itself (a context is not inherited by new threads).
        """
        ctx = _current.get()
        if ctx is None:
            raise ToolContextError(
                "ToolContext.current() was called outside a running tool call "
                "(it is not inherited by threads a tool starts: pass them what they need)"
            )
        return ctx

    def report_progress(self, data: Any = None) -> None:
        """Send ``data`` (JSON-compatible) to the turn's subscribers as a ``ToolProgress``."""
        if self._progress is not None:
            self._progress(data)

    def _activate(self) -> contextvars.Token[ToolContext | None]:
        return _current.set(self)

    @staticmethod
    def _deactivate(token: contextvars.Token[ToolContext | None]) -> None:
        _current.reset(token)
