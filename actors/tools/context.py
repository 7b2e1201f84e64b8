"""What a running tool can see of its call: ``ToolContext.current()``.

A ``ToolContext`` exists for exactly one tool call, in the ToolActor's process, and is
visible (through a context variable) in the thread or task that runs the tool. It is *not*
inherited by threads the tool starts itself: pass them what they need (the ``Cancellation``
object is thread-safe and may be handed over).

``Cancellation`` is the light channel between the runtime and the tool, as seed ``003``
describes it:

- ``on_stop(callback)`` registers a callback that runs once when the call is stopped; the
  returned ``Registration`` is a context manager, ``close()`` unregisters it (idempotent);
- on stop the callbacks run on a thread of their own, one after the other, never on the
  thread that delivered the stop (a tool process's or a TurnHost's actor thread): one that
  blocks delays neither the stop, nor the grace timer that ends the tool's processes, nor
  any other turn; one still running after ``CALLBACK_DEADLINE`` seconds is logged;
- registering after a stop runs the callback at once, in the registering thread;
- a callback that raises anything (``SystemExit`` included) is logged, and fails that
  callback alone: the others run, the stop goes on, the process lives;
- when the call ends, its remaining registrations are dropped; a stop that comes later
  runs nothing;
- ``throw_if_requested()`` raises ``ToolCancelled`` once stop *or* cancel was requested;
  ``requested`` tells without raising, ``wait(timeout)`` blocks until then. Cancel only
  sets the flag: it runs no callback.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections.abc import Callable
from typing import Any, Literal

from ..errors import ToolCancelled, ToolContextError
from ..logs import logger

__all__ = ["CALLBACK_DEADLINE", "Cancellation", "Registration", "ToolContext"]

CALLBACK_DEADLINE = 5.0  # seconds after which an on_stop callback still running is logged


log = logger("greenroom.tools")


_current: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar("greenroom_tool_context", default=None)


class Registration:
    """One ``on_stop`` callback; ``close()`` (or leaving the ``with`` block) unregisters it."""

    def __init__(self, owner: Cancellation, key: int) -> None:
        self._owner = owner
        self._key = key

    def close(self) -> None:
        """Unregister; a no-op if the callback already ran or the call has ended."""
        self._owner._unregister(self._key)

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Cancellation:
    """Stop/cancel state of one tool call. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], Any]] = {}
        self._keys = itertools.count()
        self._mode: Literal["stop", "cancel"] | None = None
        self._reason = ""
        self._stopped = False
        self._closed = False
        self._requested = threading.Event()
        self._callbacks_done = threading.Event()  # the stop's callbacks have all returned

    @property
    def requested(self) -> bool:
        """True once stop or cancel was requested for this call."""
        return self._mode is not None

    @property
    def mode(self) -> Literal["stop", "cancel"] | None:
        """``"stop"`` or ``"cancel"`` once requested (stop wins over an earlier cancel)."""
        return self._mode

    @property
    def reason(self) -> str:
        return self._reason

    @property
    def registered(self) -> int:
        """How many callbacks are registered and have not run (for tests and diagnostics)."""
        with self._lock:
            return len(self._callbacks)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stop or cancel is requested (True) or ``timeout`` passes (False)."""
        return self._requested.wait(timeout)

    def throw_if_requested(self) -> None:
        """Raise ``ToolCancelled`` if stop or cancel was requested."""
        if self._mode is not None:
            raise ToolCancelled(self._mode, self._reason)

    def on_stop(self, callback: Callable[[], Any]) -> Registration:
        """Run ``callback`` once when the call is stopped (at once if it already was)."""
        with self._lock:
            key = next(self._keys)
            if not self._stopped and not self._closed:
                self._callbacks[key] = callback
                return Registration(self, key)
            run_now = self._stopped
        if run_now:
            _run_callback(callback)
        return Registration(self, key)

    def _unregister(self, key: int) -> None:
        with self._lock:
            self._callbacks.pop(key, None)

    def _request(self, mode: Literal["stop", "cancel"], reason: str) -> None:
        """Record a request; on stop, run every registered callback, each at most once."""
        with self._lock:
            if self._closed:
                return
            if self._mode is None or mode == "stop":
                if self._mode is None:
                    self._reason = reason
                self._mode = mode
                self._requested.set()
            if mode != "stop" or self._stopped:
                return
            self._stopped = True
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        threading.Thread(
            target=_run_callbacks, args=(callbacks, self._callbacks_done), name="greenroom on_stop", daemon=True
        ).start()

    def callbacks_returned(self, timeout: float | None = None) -> bool:
        """Wait until the stop's callbacks have all returned (True), or ``timeout`` passes."""
        return self._callbacks_done.wait(timeout)

    def _close(self) -> None:
        """The call has ended: drop what is left; later stops run nothing."""
        with self._lock:
            self._closed = True
            self._callbacks.clear()


def _run_callback(callback: Callable[[], Any]) -> None:
    try:
        callback()
    except BaseException:  # noqa: BLE001 - SystemExit from a callback fails that callback alone
        log().exception("an on_stop callback raised; the stop goes on")


def _run_callbacks(callbacks: list[Callable[[], Any]], done_all: threading.Event) -> None:
    """The stop's callbacks, on their own thread; a watchdog logs one that overstays."""
    try:
        _run_each(callbacks)
    finally:
        done_all.set()


def _run_each(callbacks: list[Callable[[], Any]]) -> None:
    for callback in callbacks:
        done = threading.Event()
        watchdog = threading.Timer(CALLBACK_DEADLINE, _overstayed, args=(callback, done))
        watchdog.daemon = True
        watchdog.start()
        try:
            _run_callback(callback)
        finally:
            done.set()
            watchdog.cancel()


def _overstayed(callback: Callable[[], Any], done: threading.Event) -> None:
    if not done.is_set():
        name = getattr(callback, "__qualname__", repr(callback))
        log().warning("an on_stop callback (%s) is still running after %g s; the stop went on without it",
                      name, CALLBACK_DEADLINE)  # fmt: skip


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
        stop_grace: float = 2.0,
        cancellation: Cancellation | None = None,
        progress: Callable[[Any], None] | None = None,
        provider: Any = None,
        child_starter: Callable[[Any], None] | None = None,
        trace_context: dict[str, str] | None = None,
    ) -> None:
        self.turn_id = turn_id
        self.root_turn_id = root_turn_id
        self.call_id = call_id
        self.tool_name = tool_name
        self.idempotency_key = idempotency_key
        self.attempt = attempt
        self.stop_grace = stop_grace
        self.cancellation = cancellation or Cancellation()
        self.provider = provider
        self.trace_context = trace_context  # W3C carrier of the call's execute_tool span, if traced
        self._progress = progress
        self._child_starter = child_starter

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
