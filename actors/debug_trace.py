"""A cheap event trace for diagnosing ordering problems, off unless asked for.

``GREENROOM_TRACE_DIR=dir``: ``trace(...)`` appends one line per call to
``dir/trace-<pid>.log``, written directly (not through Thespian's logger actor).
``GREENROOM_TRACE_RING=1``: ``trace(...)`` only appends to an in-memory ring of the last
5,000 entries, and SIGUSR2 dumps the ring to ``/tmp/greenroom-ring-<pid>.log``; this
changes timing least.
"""

from __future__ import annotations

import collections
import os
import signal
import time

__all__ = ["enable", "trace"]

_DIR = os.environ.get("GREENROOM_TRACE_DIR")
_RING = os.environ.get("GREENROOM_TRACE_RING") == "1"
_fd: dict[int, int] = {}
_ring: collections.deque[tuple[float, tuple[object, ...]]] = collections.deque(maxlen=5000)
_ring_pid: int | None = None


def _dump(signum: int, frame: object) -> None:
    with open(f"/tmp/greenroom-ring-{os.getpid()}.log", "w") as f:
        f.writelines(f"{t:.6f} " + " ".join(str(p) for p in parts) + "\n" for t, parts in list(_ring))


def enable(directory: str | None) -> None:
    """Trace to ``directory`` from now on, in this process and every process forked from it
    (the files open for an earlier directory are closed: nothing more goes there)."""
    global _DIR
    _DIR = directory
    for fd in _fd.values():
        try:
            os.close(fd)
        except OSError:
            pass  # one inherited across a fork and closed by then
    _fd.clear()


def trace(*parts: object) -> None:
    global _ring_pid
    if _RING:
        pid = os.getpid()
        if _ring_pid != pid:  # first use in this process (or after a fork)
            _ring_pid = pid
            _ring.clear()
            try:
                signal.signal(signal.SIGUSR2, _dump)
            except ValueError:
                pass  # not the main thread: the owner installs it on its first trace
        _ring.append((time.monotonic(), parts))
        return
    if not _DIR:
        return
    pid = os.getpid()
    fd = _fd.get(pid)
    if fd is None:
        fd = os.open(os.path.join(_DIR, f"trace-{pid}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _fd[pid] = fd
    os.write(fd, (f"{time.monotonic():.6f} " + " ".join(str(p) for p in parts) + "\n").encode())
