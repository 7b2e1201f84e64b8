"""What greenroom knows about processes, read from ``/proc``, and how it ends them.

Everything here works by PID on processes greenroom started (or their descendants): it
never matches processes by name. Linux only (``/proc``, ``prctl``).

- ``session_processes``, ``group_processes``: live members of a session or process group;
- ``children`` and ``descendants``: a process's tree, through ``/proc/<pid>/task/*/children``
  (cheap) with a full ``/proc`` scan as the fallback;
- ``end_processes``: SIGKILL a list of PIDs and wait (bounded) until they are gone;
- ``become_subreaper``: orphaned descendants of this process are re-parented to it instead
  of to init, so a tool's double-forked daemon stays in reach;
- ``dies_with_parent``: a command line that runs a program which gets SIGKILL when the
  thread that started it ends, for a child that is not ours to watch (an MCP server).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import random
import shutil
import signal
import socket
import sys
import time
from collections.abc import Iterable

__all__ = [
    "alive",
    "become_subreaper",
    "children",
    "descendants",
    "dies_with_parent",
    "end_processes",
    "free_port",
    "group_processes",
    "reap_children",
    "session_processes",
    "signal_all",
    "wait_gone",
]

_PR_SET_CHILD_SUBREAPER = 36


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return None


def _exited(pid: int | str, fields: list[str]) -> bool:
    """A zombie whose threads have all exited: it holds no file, no lock, nothing.

    A multi-threaded process killed by a signal can show its main thread as a zombie while
    its other threads are still exiting and still hold the process's files (and locks)."""
    if fields[0] != "Z":
        return False
    try:
        return len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return True


def alive(pid: int) -> bool:
    """True until ``pid`` has exited completely (a zombie whose threads are all gone)."""
    fields = _stat_fields(pid)
    return fields is not None and not _exited(pid, fields)


def _live_processes(index: int, value: int) -> list[int]:
    """Live processes whose stat field ``index`` (after the name) equals ``value``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is not None and not _exited(entry, fields) and int(fields[index]) == value:
            found.append(int(entry))
    return found


def session_processes(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``."""
    return _live_processes(3, sid)


def group_processes(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    return _live_processes(2, pgid)


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (zombies included)."""
    found = _children_listed(pid)
    return found if found is not None else _by_parent().get(pid, [])


def _children_listed(pid: int) -> list[int] | None:
    """``pid``'s children from ``/proc/<pid>/task/*/children``; None on a kernel without
    CONFIG_PROC_CHILDREN, or if its threads kept changing as they were read (so only a scan
    of ``/proc`` finds them).

    The kernel lists a child under the thread that forked it, and moves it to another thread
    of the process when that one exits: a thread that exits between the listing of the
    threads and the read of its file may have handed its children to a thread read already.
    So the threads are listed again after the reads, and the read is made again if they
    changed or a file could not be read."""
    if not _kernel_lists_children():
        return None
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for _ in range(3):
        out: list[int] = []
        whole = True
        for tid in tasks:
            found = _read_children(pid, tid)
            if found is None:
                whole = False
                break
            out += found
        try:
            again = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return []  # the process has ended
        if whole and again == tasks:
            return out
        tasks = again
    return None


def _read_children(pid: int, tid: str) -> list[int] | None:
    try:
        fd = os.open(f"/proc/{pid}/task/{tid}/children", os.O_RDONLY)
    except OSError:
        return None
    try:
        return [int(x) for x in _read_all(fd).split()]
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, 65536):
        parts.append(chunk)
    return b"".join(parts)


_children_files: bool | None = None


def _kernel_lists_children() -> bool:
    """Whether this kernel has ``/proc/<pid>/task/<tid>/children`` (CONFIG_PROC_CHILDREN)."""
    global _children_files
    if _children_files is None:
        _children_files = os.path.exists(f"/proc/self/task/{os.getpid()}/children")
    return _children_files


def _by_parent() -> dict[int, list[int]]:
    """Every process's children, from one scan of ``/proc``."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(entry)
            if fields is not None:
                out.setdefault(int(fields[1]), []).append(int(entry))
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, parents before their children (zombies included): one
    scan of ``/proc`` where the kernel does not list children (not one per process found)."""
    tree: dict[int, list[int]] | None = None
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        below = _children_listed(parent) if tree is None else tree.get(parent, [])
        if below is None:  # not listed (or its threads kept changing): scan once, from here on
            tree = _by_parent()
            below = tree.get(parent, [])
        for child in below:
            if child not in out:
                out.append(child)
                todo.append(child)
    return out


def signal_all(pids: Iterable[int], sig: int) -> None:
    """Send ``sig`` to each PID that still exists."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait until none of ``pids`` is alive (zombies count as gone); return those left."""
    left = [p for p in pids if alive(p)]
    deadline = time.monotonic() + timeout
    delay = 0.001
    while left and time.monotonic() < deadline:
        time.sleep(delay)  # polling the process table: there is nothing to wait on
        delay = min(delay * 2, 0.02)
        left = [p for p in left if alive(p)]
    return left


def end_processes(pids: Iterable[int], timeout: float = 2.0) -> list[int]:
    """SIGKILL ``pids`` and wait until they are gone; return any still alive after ``timeout``."""
    pids = list(pids)
    signal_all(pids, signal.SIGKILL)
    return wait_gone(pids, timeout)


def reap_children(keep: Iterable[int] = ()) -> None:
    """Collect the exit status of this process's exited children, except those in ``keep``."""
    keep = set(keep)
    for pid in children(os.getpid()):
        if pid not in keep:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants; False if not supported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


# Run as ``python -I -S -c _GUARD PPID PATH ARGV0 ARGS...``: ask for SIGKILL when the parent
# thread ends (PR_SET_PDEATHSIG = 1; it survives exec), give up if the parent is already
# gone, then become the program; a program that cannot be run is named in one line.
_GUARD = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]): os._exit(1)\n"
    "try: os.execv(sys.argv[2], sys.argv[3:])\n"
    "except OSError as e: print(f'greenroom: cannot run {sys.argv[2]}: {e.strerror}', file=sys.stderr); os._exit(127)\n"
)


def dies_with_parent(argv: list[str], cwd: str | None = None, path: str | None = None) -> list[str]:
    """``argv`` wrapped so that its program is SIGKILLed when the calling thread ends (its
    process killed with it), even if it ignores SIGTERM and the end of its input. Start it
    from a thread that lives as long as the program should (a host's event-loop thread).
    The program is resolved here, as ``execvp`` in the child would (against ``path``,
    default ``$PATH``, or, when it holds a slash, against ``cwd``): a missing one raises
    ``FileNotFoundError`` now, as starting it would."""
    program, *args = argv
    base = cwd or os.getcwd()
    found: str | None
    if os.sep in program:
        candidate = os.path.join(base, program)
        found = candidate if os.access(candidate, os.X_OK) and not os.path.isdir(candidate) else None
    else:
        found = shutil.which(program, path=path if path is not None else os.environ.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    resolved = os.path.normpath(os.path.join(base, found))
    return [sys.executable, "-I", "-S", "-c", _GUARD, str(os.getpid()), resolved, program, *args]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago, below the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` or as the source port of an outgoing
    connection can be taken again by any of them before the caller binds it (the actor
    processes of a runtime open many); a port below that range is only taken by a program
    that asks for it by number."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(64):
        port = rng.randrange(10000, low) if low > 11000 else 0
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
