"""Tools the tests offer to turns. Module level, so ToolActors import them by path."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from pathlib import Path
from typing import Any

from actors import ToolContext, run_command, tool


def append_line(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


@tool
def timed_echo(text: str, seconds: float, log: str) -> dict[str, Any]:
    """Echo ``text`` after ``seconds``; append when it ran, and where, to the file ``log``."""
    started = time.time()
    time.sleep(seconds)  # the tool's own work
    with open(log, "a") as f:
        f.write(f"{text} {started} {time.time()} {os.getpid()}\n")
    return {"echo": text}


@tool
def boom(message: str = "kaboom") -> None:
    """Always fails."""
    raise ValueError(message)


@tool
def shell(command: str, marker: str | None = None) -> dict[str, Any]:
    """Run a shell command through run_command; reports its process group first.

    With ``marker``, an on_stop callback appends a line to that file each time it runs.
    """
    ctx = ToolContext.current()
    if marker is not None:
        ctx.cancellation.on_stop(lambda: append_line(marker, "stopped"))
    result = run_command(["sh", "-c", command], on_start=lambda p: ctx.report_progress({"pgid": p.pid}))
    return {"returncode": result.returncode, "stdout": result.stdout}


@tool
def count_child_output() -> int:
    """Read a number from a child that prints it after 300 s: the child dies on a stop's
    SIGTERM first, and ``int("")`` raises."""
    import subprocess

    ctx = ToolContext.current()
    child = subprocess.Popen(["sh", "-c", "sleep 300; echo 1"], stdout=subprocess.PIPE, text=True)
    ctx.report_progress({"child": child.pid})
    return int(child.communicate()[0])


@tool
def wait_for_stop(marker: str) -> str:
    """Register an on_stop callback that writes ``marker``, wait until it ran, then leave as
    stopped (the tool sees its stop once its callbacks have returned)."""
    ctx = ToolContext.current()
    stopped = threading.Event()

    def on_stop() -> None:
        with open(marker, "a") as f:
            f.write("stopped\n")
        stopped.set()

    with ctx.cancellation.on_stop(on_stop):
        ctx.report_progress("registered")
        stopped.wait(60)
    ctx.cancellation.wait(10)
    ctx.cancellation.throw_if_requested()
    return "returned"


@tool
def cooperative(marker: str, steps: int = 600) -> str:
    """Work in small steps, checking for cancellation between them."""
    ctx = ToolContext.current()
    ctx.report_progress("working")
    for _ in range(steps):
        ctx.cancellation.throw_if_requested()
        time.sleep(0.05)  # one step of work
    Path(marker).write_text("finished")
    return "done"


@tool
async def async_sleeper(seconds: float = 60.0, marker: str | None = None) -> str:
    """An async tool that sleeps; a stop cancels its task (noted in ``marker``)."""
    ToolContext.current().report_progress({"pid": os.getpid()})
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if marker is not None:
            append_line(marker, "cancelled")
        raise
    return "woke"


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (needs approval)."""
    os.remove(path)
    return f"deleted {path}"


def outside_sandbox(arguments: dict[str, Any]) -> bool:
    """Approval predicate: writes outside /tmp/sandbox need a human."""
    return not str(arguments.get("path", "")).startswith("/tmp/sandbox/")


@tool(requires_approval=outside_sandbox)
def write_file(path: str, text: str) -> str:
    """Write ``text`` to ``path``."""
    return f"would write {len(text)} bytes to {path}"


def _record_key(path: str) -> str:
    ctx = ToolContext.current()
    append_line(path, ctx.idempotency_key)
    if ctx.attempt == 1:
        ctx.report_progress("recorded")
        threading.Event().wait(300)  # a first attempt is killed here by the test
    return f"recorded on attempt {ctx.attempt}"


@tool
def record_key(path: str) -> str:
    """Append this call's idempotency key to ``path`` (a side effect), then wait."""
    return _record_key(path)


@tool(retry_safe=True)
def record_key_safely(path: str) -> str:
    """The same side effect, declared safe to run again with the same idempotency key."""
    return _record_key(path)


@tool(requires={"sandbox": True})
def where_am_i() -> dict[str, Any]:
    """Say which process and network namespace this call runs in (placed on a sandbox node)."""
    return {"pid": os.getpid(), "netns": os.readlink("/proc/self/ns/net")}


@tool
def delegate(task: str) -> str:
    """Hand ``task`` to a child agent that may run shell commands; return its answer."""
    from actors.tools.subagents import run_subagent

    return run_subagent(task, tools=[shell], system="You are a helper agent.")


@tool(requires={"sandbox": True})
def sandbox_shell(command: str) -> dict[str, Any]:
    """``shell`` placed on a sandbox node; reports its process group and network namespace."""
    ctx = ToolContext.current()
    netns = os.readlink("/proc/self/ns/net")
    result = run_command(["sh", "-c", command], on_start=lambda p: ctx.report_progress({"pgid": p.pid, "netns": netns}))
    return {"returncode": result.returncode, "stdout": result.stdout}


@tool
def delegate_work(marker: str) -> str:
    """Hand long, cooperative work to a child agent; return its answer."""
    from actors.tools.subagents import run_subagent

    return run_subagent(f"do the work, then write {marker}", tools=[cooperative])


@tool
def spawn_naive(stubborn: bool = True) -> str:
    """Start children the naive ways, report every pid, then wait in a stubborn command.

    A plain ``Popen``; a shell that backgrounds a ``sleep`` and exits (the sleep is orphaned);
    a double-forked daemon in its own session that ignores SIGTERM; a ``multiprocessing``
    child; then, with ``stubborn``, a ``run_command`` group that ignores SIGTERM, which the
    call waits for (otherwise it returns once its children are started).
    """
    import multiprocessing
    import subprocess

    ctx = ToolContext.current()
    pids = [subprocess.Popen(["sleep", "300"]).pid]
    background = "sleep 300 >/dev/null 2>&1 & echo $!"
    pids.append(int(subprocess.run(["sh", "-c", background], capture_output=True, text=True).stdout))
    daemon = "setsid sh -c 'trap \"\" TERM; sleep 300' >/dev/null 2>&1 & echo $!"
    pids.append(int(subprocess.run(["sh", "-c", daemon], capture_output=True, text=True).stdout))
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(300,))
    child.start()
    pids.append(child.pid)  # type: ignore[arg-type]
    if not stubborn:
        ctx.report_progress({"pids": pids, "worker": os.getpid()})
        return "started"
    run_command(
        ["sh", "-c", "trap '' TERM; sleep 300"],
        on_start=lambda p: ctx.report_progress({"pids": [*pids, p.pid], "worker": os.getpid()}),
    )
    return "the stubborn command ended"


@tool(requires_approval=True)
def append_key(path: str) -> str:
    """Append this call's idempotency key to ``path`` (a side effect that needs approval)."""
    append_line(path, ToolContext.current().idempotency_key)
    return "appended"


@tool
def weird_text() -> str:
    """A file name that is not UTF-8, as ``os.listdir`` returns it (a lone surrogate)."""
    return os.fsdecode(b"report-\xff.txt")


@tool
def unencodable_progress() -> str:
    """Report progress that is not JSON data, then answer normally."""
    ToolContext.current().report_progress(object())
    return "reported"


@tool(inline=True)
async def host_pid(wait: bool = False) -> int:
    """Runs inline, in the turn's host process: report that process's pid (and wait if asked)."""
    ToolContext.current().report_progress({"pid": os.getpid()})
    if wait:
        await asyncio.sleep(300)
    return os.getpid()


def _private_dirty_kib() -> int:
    with open("/proc/self/smaps_rollup") as f:
        return sum(int(line.split()[1]) for line in f if line.startswith("Private_Dirty:"))


def _collection_cost() -> dict[str, int]:
    """What a full collection dirties in this process: with what the process inherited at its
    fork frozen (as greenroom leaves it), then with it unfrozen. Leaves it unfrozen."""
    frozen = gc.get_freeze_count()
    before = _private_dirty_kib()
    gc.collect()
    frozen_kib = _private_dirty_kib() - before
    gc.unfreeze()
    before = _private_dirty_kib()
    gc.collect()
    return {"frozen": frozen, "frozen_kib": frozen_kib, "unfrozen_kib": _private_dirty_kib() - before}


@tool
def collection_cost() -> dict[str, int]:
    """Runs in a tool process: ``_collection_cost`` there."""
    return _collection_cost()


@tool(inline=True)
async def host_collection_cost() -> dict[str, int]:
    """Runs inline, in the turn's host process: ``_collection_cost`` there."""
    return _collection_cost()


@tool
def show_env(name: str) -> str | None:
    """The value of an environment variable as the tool's process sees it."""
    return os.environ.get(name)


def _wait_for_line(log: str, prefix: str) -> None:
    while not (os.path.exists(log) and any(x.startswith(prefix) for x in Path(log).read_text().splitlines())):
        time.sleep(0.01)  # the other call has not written it yet (the tool's own wait)


@tool
def handshake_echo(text: str, log: str, wait_for: str | None = None) -> dict[str, Any]:
    """Write ``<text> started <pid>`` to ``log``, wait for a line starting with ``wait_for``
    there, then write ``<text> done`` and echo: two calls that order themselves, untimed."""
    append_line(log, f"{text} started {os.getpid()}")
    if wait_for is not None:
        _wait_for_line(log, wait_for)
    append_line(log, f"{text} done")
    return {"echo": text}


@tool
def wait_for_file(path: str) -> str:
    """Return once ``path`` exists (the test creates it when it is ready)."""
    ToolContext.current().report_progress("waiting")
    while not os.path.exists(path):
        time.sleep(0.01)  # the test has not created it yet
    return "found"


@tool
def append_key_now(path: str) -> str:
    """Append this call's idempotency key to ``path`` (a side effect that needs no approval)."""
    append_line(path, ToolContext.current().idempotency_key)
    return "appended"


@tool
def delegate_gated(path: str) -> str:
    """Hand a task to a child agent whose tool needs a person's approval; return its answer."""
    from actors.tools.subagents import run_subagent

    return run_subagent(f"record the key in {path}", tools=[append_key])


@tool
def big_result(size: int) -> str:
    """A result of ``size`` characters."""
    return "x" * size


@tool
def big_progress(size: int) -> str:
    """Report one progress of ``size`` characters, then answer."""
    ToolContext.current().report_progress("x" * size)
    return "reported"


@tool
def many_progress(count: int, marker: str) -> str:
    """Report ``count`` progress events, then write ``marker`` and answer."""
    ctx = ToolContext.current()
    for i in range(count):
        ctx.report_progress(i)
    Path(marker).write_text("done")
    return "reported"


def _block_until(path: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)  # the test creates it when the callback may return


@tool
def child_and_blocking_on_stop(release: str, marker: str) -> str:
    """Start a child process (reported as progress), register an on_stop callback that blocks
    until ``release`` exists and then writes ``marker``, and wait to be stopped."""
    import subprocess

    ctx = ToolContext.current()
    child = subprocess.Popen(["sleep", "300"])
    ctx.cancellation.on_stop(lambda: (_block_until(release), append_line(marker, "callback returned")))
    ctx.report_progress({"child": child.pid})
    ctx.cancellation.wait(120)
    return "stopped"


@tool(inline=True)
async def inline_blocking_on_stop(release: str) -> str:
    """Inline: an on_stop callback that blocks (on its own thread) until ``release`` exists."""
    ctx = ToolContext.current()
    ctx.cancellation.on_stop(lambda: _block_until(release))
    ctx.report_progress({"pid": os.getpid()})
    await asyncio.sleep(300)
    return "woke"


def _exit() -> None:
    raise SystemExit("an on_stop callback tried to end the process")


@tool(inline=True)
async def inline_exiting_on_stop() -> str:
    """Inline: an on_stop callback that raises SystemExit."""
    ctx = ToolContext.current()
    ctx.cancellation.on_stop(_exit)
    ctx.report_progress({"pid": os.getpid()})
    await asyncio.sleep(300)
    return "woke"


def _stop_callbacks(log: str) -> tuple[Any, Any]:
    """The callbacks of issue 36's scenario, registered on the running call: ``a`` raises,
    ``b`` is plain, ``c`` is closed before the stop. Returns (the cancellation, note)."""
    cancel = ToolContext.current().cancellation

    def note(line: str) -> None:
        append_line(log, line)

    def raises() -> None:
        note("a")
        raise RuntimeError("callback a raises")

    cancel.on_stop(raises)
    cancel.on_stop(lambda: note("b"))
    closed = cancel.on_stop(lambda: note("c"))
    closed.close()
    return cancel, note


@tool
def stop_callbacks(log: str) -> str:
    """Issue 36: register a, b, c (closed), then w while waiting to be stopped, then d."""
    cancel, note = _stop_callbacks(log)
    with cancel.on_stop(lambda: note("w")):
        ToolContext.current().report_progress("waiting")
        while not cancel.requested:
            time.sleep(0.005)  # the tool's own work, until it sees its stop
    cancel.on_stop(lambda: note("d"))  # after the stop: runs at once, here
    note("d-returned")
    cancel.throw_if_requested()
    return "never"


@tool(inline=True)
async def inline_stop_callbacks(log: str) -> str:
    """``stop_callbacks`` as an inline ``async def`` tool: its task is cancelled when it sees its stop."""
    cancel, note = _stop_callbacks(log)
    with cancel.on_stop(lambda: note("w")):
        ToolContext.current().report_progress("waiting")
        try:
            while not cancel.requested:
                await asyncio.sleep(0.005)  # the tool's own work, until it sees its stop
        except asyncio.CancelledError:
            pass  # seen as a cancelled task: the tool still has its cleanup to do
    cancel.on_stop(lambda: note("d"))
    note("d-returned")
    cancel.throw_if_requested()
    return "never"


@tool
def returns_during_stop(log: str) -> str:
    """Return while the stop's callback still runs: the callback notes that it started, waits
    for the tool to have returned, then notes that it is done."""
    ctx = ToolContext.current()

    def slow_cleanup() -> None:
        append_line(log, "cleanup started")
        _wait_for_line(log, "tool returned")
        append_line(log, "cleanup done")

    ctx.cancellation.on_stop(slow_cleanup)
    ctx.report_progress("registered")
    _wait_for_line(log, "cleanup started")
    append_line(log, "tool returned")
    return "done"


@tool
def ignores_stop(release: str) -> str:
    """A blocking tool that never looks at its flag, with an on_stop callback that blocks too;
    both until ``release`` exists."""
    ctx = ToolContext.current()

    def close_index() -> None:
        _block_until(release)

    ctx.cancellation.on_stop(close_index)
    ctx.report_progress({"pid": os.getpid()})
    _block_until(release, limit=60)
    return "released"
