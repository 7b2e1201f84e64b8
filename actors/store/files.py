"""The files beside a store: its lock, and how the command line finds the runtime using it.

- ``turns.db.lock``: held (``flock``) by the runtime using the store, taken before its
  actor system starts so that every process of the tree inherits it; the kernel frees it
  only when the last of them is gone, and the lifeline makes them go with their owner;
- ``turns.db.runtime.json``: the owner's pid, admin address and transport key, mode 0600,
  written through a fresh temporary file (``O_EXCL``), removed at close. A file whose pid
  is dead or whose lock is free is stale: the command line then writes to the store.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from typing import Any

from ..errors import ConfigurationError

__all__ = ["lock_store", "remove_runtime_file", "running_runtime", "runtime_file", "store_in_use", "write_runtime_file"]


def _lock_path(store_path: str) -> str:
    return os.path.abspath(store_path) + ".lock"


def lock_store(store_path: str) -> int:
    """Take the store's exclusive lock, or raise ``ConfigurationError`` naming its holder."""
    fd = os.open(_lock_path(store_path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = running_runtime(store_path)
        who = f" (pid {holder['pid']})" if holder else ""
        raise ConfigurationError(
            f"the store {store_path} is used by another running runtime{who}; use the command line or attach to it"
        ) from None
    return fd


def store_in_use(store_path: str) -> bool:
    """True if a live runtime holds the store's lock."""
    path = _lock_path(store_path)
    if not os.path.exists(path):
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def runtime_file(store_path: str) -> str:
    """Where a runtime using ``store_path`` says how to reach it."""
    return os.path.abspath(store_path) + ".runtime.json"


def write_runtime_file(store_path: str, info: dict[str, Any]) -> None:
    """Write ``info`` readable by this user only, through a temporary file nobody else made."""
    path = runtime_file(store_path)
    tmp = f"{path}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_runtime_file(store_path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(runtime_file(store_path))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_runtime(store_path: str) -> dict[str, Any] | None:
    """How to reach the live runtime that holds the store, or None (none, or a stale file)."""
    try:
        with open(runtime_file(store_path)) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not isinstance(info.get("pid"), int) or not _pid_alive(info["pid"]):
        return None
    if not store_in_use(store_path):
        return None
    return info
