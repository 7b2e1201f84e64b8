"""Run an external command for a tool so that a stop ends all of it, grandchildren included.

``run_command`` starts the command in its own session (so its own process group). When the
call is stopped, the group gets SIGTERM at once and SIGKILL after the stop grace; when the
command ends on its own, whatever it left running in its group is killed too. A tool built
on it leaves no orphan.

After a stop ``run_command`` raises ``ToolCancelled``, so the call ends as interrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .errors import ToolContextError
from .tool_context import ToolContext

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
    timer = threading.Timer(grace, kill_group, args=(pgid, signal.SIGKILL))
    timer.daemon = True
    timer.start()


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
    try:
        if on_start is not None:
            on_start(proc)
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(pgid)
            proc.communicate()
            raise
    finally:
        if registration is not None:
            registration.close()
        kill_group(pgid)  # whatever the command left behind in its group
    if ctx is not None:
        ctx.cancellation.throw_if_requested()
    return CommandResult(proc.returncode, out, err)
