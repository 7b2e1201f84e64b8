"""What the owning process does for its runtimes when it is told to end.

SIGTERM (a redeploy, ``docker stop``, systemd) and SIGINT (Ctrl-C) close every live
runtime of the process gracefully (turns persisted, or ended ``stopped`` without a store),
then the signal does what it did before: the previous handler runs, or the default action
(SIGTERM ends the process). Interpreter exit closes them too. Handlers are installed once,
from the main thread, by the first ``Runtime(handle_signals=True)`` (the default); an
application that installs its own handlers passes ``handle_signals=False`` and calls
``close()`` itself. Dying without any of this (SIGKILL, the OOM killer) is the lifeline's
job: the tree ends with its owner anyway.
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import threading
import weakref
from types import FrameType
from typing import Any, Protocol

__all__ = ["Closeable", "adopt", "close_all"]


class Closeable(Protocol):
    """What the owner closes: a ``Runtime`` (or anything that ends its processes in ``close``)."""

    def close(self) -> None: ...


_live: weakref.WeakSet[Closeable] = weakref.WeakSet()
_previous: dict[int, Any] = {}
_lock = threading.RLock()
_atexit_registered = False


def adopt(runtime: Closeable, handle_signals: bool) -> None:
    """Close ``runtime`` on SIGTERM, SIGINT (if ``handle_signals``) and interpreter exit."""
    global _atexit_registered
    with _lock:
        _live.add(runtime)
        if not _atexit_registered:
            atexit.register(close_all)
            _atexit_registered = True
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                if sig not in _previous:
                    _previous[sig] = signal.getsignal(sig)
                    signal.signal(sig, _on_signal)


def close_all() -> None:
    """Close every live runtime of this process."""
    for runtime in list(_live):
        with contextlib.suppress(Exception):
            runtime.close()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    close_all()
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
