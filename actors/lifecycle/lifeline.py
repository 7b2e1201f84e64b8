"""The lifeline: every process of a runtime's tree ends when its owner ends, however it ends.

The owner (the process that starts a ``Runtime`` or a ``greenroom node``) opens a pipe
before it starts the actor system and holds the only write end. Every process forked into
the tree (Thespian's admin and logger, every actor, every pooled tool process) inherits the
read end, and a watchdog thread in each blocks reading it. Nothing is ever written: when the
owner cuts the lifeline (``Runtime.close()``) or dies in any way (SIGKILL, the OOM killer,
``os._exit``, a broken pipe), the kernel closes the write end, every read returns EOF at
once, and each watchdog ends its own process's descendants (tool subprocesses included,
whatever session or group they moved to) and then its process. No poll, no timer.

Guarantees:

- the write end exists only in the owner: an at-fork hook closes it in every child the
  owner forks (Thespian's admin, and the application's own ``multiprocessing`` children),
  so no child can keep a lifeline alive; both ends are close-on-exec, so programs started
  with ``exec`` hold neither;
- a process joins a tree only if it is forked by a member, or by the owner's thread inside
  ``Lifeline.forking()``; other forks of the owner stay out of it;
- the owner's sockets do not join: the first process of the tree closes every socket it
  inherited from the owner (a server the application runs, its clients' connections).
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import stat
import threading
import warnings
from collections.abc import Callable, Iterator

from .processes import descendants, signal_all

__all__ = ["Lifeline", "in_tree", "is_cut", "on_cut"]

_owned: dict[int, int] = {}  # write fd -> read fd of the lifelines this process owns
_owned_lock = threading.Lock()
_forking: tuple[int, int] | None = None  # (thread ident, read fd) while the owner forks a tree
_member_fd: int | None = None  # the read end this process watches, if it is in a tree
_cleanups: list[Callable[[], None]] = []


class Lifeline:
    """One tree's lifeline, owned by the process that created it."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()  # both close-on-exec
        with _owned_lock:
            _owned[self.write_fd] = self.read_fd

    @contextlib.contextmanager
    def forking(self) -> Iterator[None]:
        """Processes this thread forks inside the block (and all they fork) join the tree."""
        global _forking
        _forking = (threading.get_ident(), self.read_fd)
        try:
            yield
        finally:
            _forking = None

    @property
    def cut(self) -> bool:
        return self.write_fd not in _owned

    def cut_now(self) -> None:
        """End the tree: every member sees EOF at once and ends. Idempotent."""
        with _owned_lock:
            r = _owned.pop(self.write_fd, None)
        if r is not None:
            os.close(self.write_fd)
            os.close(r)


def in_tree() -> bool:
    """True in a process that belongs to a runtime's tree (not in the owner)."""
    return _member_fd is not None


def is_cut() -> bool:
    """True in a member process whose lifeline is cut (its tree is ending): nothing is ever
    written, so a readable read end is at EOF."""
    fd = _member_fd
    if fd is None:
        return False
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def on_cut(cleanup: Callable[[], None]) -> None:
    """Run ``cleanup`` in this member process when its lifeline is cut, before it ends."""
    _cleanups.append(cleanup)


def _end_this_process() -> None:
    for cleanup in _cleanups:
        with contextlib.suppress(BaseException):
            cleanup()
    with contextlib.suppress(BaseException):
        signal_all(descendants(os.getpid()), 9)
    os._exit(0)


def _watch(fd: int) -> None:
    try:
        while os.read(fd, 1):
            pass  # nothing is ever written; only EOF matters
    except OSError:
        pass
    _end_this_process()


def _close_inherited_sockets() -> None:
    """The owner's sockets (its servers, its clients' connections) are not the tree's: a
    process joining the tree lets go of the ones it inherited, so that none outlives the
    owner's own use of it. Pipes and files (the store's lock) are kept.

    Each such descriptor is pointed at /dev/null rather than closed: the inherited Python
    objects that own those numbers may close them later, and a closed number would by then
    belong to some new socket of this process."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            try:
                if fd > 2 and fd != null and stat.S_ISSOCK(os.fstat(fd).st_mode):
                    os.dup2(null, fd, inheritable=False)
            except OSError:
                continue
    finally:
        os.close(null)


def _after_fork_in_child() -> None:
    global _member_fd, _forking
    for w, r in list(_owned.items()):
        with contextlib.suppress(OSError):
            os.close(w)
        if _forking is None or r != _forking[1]:
            with contextlib.suppress(OSError):
                os.close(r)
    _owned.clear()
    if _forking is not None and _forking[0] == threading.get_ident():
        _member_fd = _forking[1]
        _cleanups.clear()
        _close_inherited_sockets()
    _forking = None
    if _member_fd is None:
        return
    # What the process inherited stays shared with its parent only while nothing writes to
    # it, and a collection writes to every object it visits: this process never collects
    # what it was forked with (its modules, the owner's state, its parent's actors).
    gc.freeze()
    # A member forks only from its main thread; the watchdog holds no lock, so forking
    # beside it is safe (Python 3.12+ warns about threads at fork in general).
    warnings.filterwarnings("ignore", message=r".*fork\(\) may lead to deadlocks", category=DeprecationWarning)
    threading.Thread(target=_watch, args=(_member_fd,), name="greenroom-lifeline", daemon=True).start()


os.register_at_fork(after_in_child=_after_fork_in_child)
