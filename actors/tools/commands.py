"""Run an external command for a tool so that a stop ends all of it, grandchildren included.

``run_command`` starts the command in its own session (so its own process group). When the
call is stopped, the group gets SIGTERM at once and SIGKILL after the stop grace; when the
command ends on its own, whatever it left running in its group is killed too. A tool built
on it leaves no orphan.

After a stop ``run_command`` raises ``ToolCancelled``, so the call ends as interrupted.
It returns when the command itself exits, even if something it started in the background
still holds its output: that is ended with the group, and the output read so far returned.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ToolContextError
from . import standby
from .context import ToolContext

__all__ = ["CommandResult", "kill_group", "run_command"]


@dataclass(frozen=True)
class CommandResult:
    """How the command ended and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to process group ``pgid``; False if the group is already gone."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def _terminate(pgid: int, grace: float) -> None:
    """SIGTERM the group now, SIGKILL it after ``grace`` seconds. Does not wait."""
    if not kill_group(pgid, signal.SIGTERM):
        return
    standby.later(grace, kill_group, pgid, signal.SIGKILL)


def run_command(
    args: str | Sequence[str],
    *,
    shell: bool = False,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
    grace: float | None = None,
    on_start: Callable[[subprocess.Popen[str]], None] | None = None,
) -> CommandResult:
    """Run ``args`` to completion in its own process group and return its output.

    Inside a tool call the group is ended on stop (SIGTERM, then SIGKILL after ``grace``,
    by default the turn's ``stop_grace``) and ``ToolCancelled`` is raised. ``timeout``
    ends the group the same way and raises ``subprocess.TimeoutExpired``. ``on_start`` is
    called with the process once it runs (its ``pid`` is also the group id).
    """
    try:
        ctx: ToolContext | None = ToolContext.current()
    except ToolContextError:
        ctx = None
    if grace is None:
        grace = ctx.stop_grace if ctx is not None else 2.0
    proc = subprocess.Popen(
        args,
        shell=shell,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    pgid = proc.pid  # the session leader's pid is the group id
    registration = ctx.cancellation.on_stop(lambda: _terminate(pgid, grace)) if ctx is not None else None
    out = _Reader(proc.stdout)
    err = _Reader(proc.stderr)
    try:
        if on_start is not None:
            on_start(proc)
        if input is not None:
            _feed(proc, input)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_group(pgid)
            proc.wait()
            raise
    finally:
        if registration is not None:
            registration.close()
        kill_group(pgid)  # whatever the command left behind in its group, holding its output or not
    if ctx is not None:
        ctx.cancellation._settle()  # a stop that ended the command: seen once its callbacks are over
        ctx.cancellation.throw_if_requested()
    return CommandResult(proc.returncode, out.text(), err.text())


class _Reader:
    """Reads a pipe to EOF in a thread; ``text()`` gives what it read, without waiting for
    ever on a pipe that something outside the command's group still holds."""

    def __init__(self, pipe: Any) -> None:
        self._parts: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: Any) -> None:
        with pipe:
            for chunk in iter(lambda: pipe.read(65536), ""):
                self._parts.append(chunk)

    def text(self, linger: float = 1.0) -> str:
        self._thread.join(linger)
        return "".join(self._parts)


def _feed(proc: subprocess.Popen[str], data: str) -> None:
    def write() -> None:
        assert proc.stdin is not None
        try:
            with proc.stdin:
                proc.stdin.write(data)
        except (BrokenPipeError, OSError):
            pass  # the command did not read it all

    threading.Thread(target=write, daemon=True).start()
