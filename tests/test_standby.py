"""Parked threads and the timer thread a stop uses (actors/tools/standby.py), and the
process tree read that a stop's SIGTERM needs (actors/lifecycle/processes.py)."""

from __future__ import annotations

import contextvars
import logging
import os
import subprocess
import sys
import threading
from typing import Any

import pytest

from actors import Cancellation
from actors.lifecycle import processes
from actors.tools import standby

from .helpers import wait_until


def _idents() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None}


def _parked() -> int:
    with standby._state.lock:
        return len(standby._state.idle)


def test_jobs_run_on_threads_parked_before_them_each_on_its_own() -> None:
    standby.warm(2)
    parked = _idents()
    both, release, ran = threading.Barrier(3, timeout=10), threading.Event(), []

    def job() -> None:
        ran.append(threading.get_ident())
        both.wait()  # each waits until the other has started: neither is queued behind the other
        release.wait(10)

    standby.run(job, "first")
    standby.run(job, "second")
    both.wait()
    release.set()
    assert len(set(ran)) == 2 and set(ran) <= parked


def test_more_jobs_than_parked_threads_all_start_at_once() -> None:
    n = standby.KEEP + 2
    started, release = threading.Barrier(n + 1, timeout=10), threading.Event()

    def job() -> None:
        started.wait()
        release.wait(10)

    for i in range(n):
        standby.run(job, f"job {i}")
    started.wait()  # would time out if any job waited for another to end
    release.set()
    assert wait_until(lambda: _parked() == standby.KEEP, 10)  # the others have ended, not parked
    standby.warm(standby.KEEP + 2)
    assert _parked() == standby.KEEP


class _Logged(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.seen.set()


def test_a_job_that_raises_is_logged_and_its_thread_runs_the_next() -> None:
    logged, done, ran = _Logged(), threading.Event(), []
    logging.getLogger("greenroom.tools").addHandler(logged)
    try:
        standby.warm(standby.KEEP)
        threads = _idents()

        def fails() -> None:
            ran.append(threading.get_ident())
            sys.exit("a job may not end its process")

        standby.run(fails, "greenroom on_stop fails")
        assert logged.seen.wait(10)
        assert wait_until(lambda: _parked() == standby.KEEP, 10)  # its thread parked again
        for _ in range(standby.KEEP):
            standby.run(lambda: (ran.append(threading.get_ident()), done.set()), "next")
        assert done.wait(10) and wait_until(lambda: len(ran) == standby.KEEP + 1, 10)
        assert logged.messages == ["greenroom on_stop fails raised"]
        assert ran[0] in ran[1:] and set(ran) <= threads  # no thread was started for the jobs
    finally:
        logging.getLogger("greenroom.tools").removeHandler(logged)


def test_each_job_runs_in_a_context_of_its_own() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    standby.warm(1)
    seen: list[str] = []
    first, second = threading.Event(), threading.Event()
    standby.run(lambda: (seen.append(var.get()), var.set("left by the first job"), first.set()), "first")
    assert first.wait(10) and wait_until(lambda: _parked() >= 1, 10)
    standby.run(lambda: (seen.append(var.get()), second.set()), "second")
    assert second.wait(10)
    assert seen == ["unset", "unset"]


def test_later_calls_come_in_time_order_and_a_cancelled_one_never() -> None:
    calls: list[Any] = []
    last, gate = threading.Event(), threading.Event()
    standby.later(0.0, gate.wait, 10)  # holds the timer thread until every call is queued
    standby.later(1e10, calls.append, "never")  # longer than a Condition may wait: the timer goes on
    standby.later(0.03, calls.append, "third")
    cancelled = standby.later(0.01, calls.append, "cancelled")
    for i in range(3):  # due together: in the order they were asked for
        standby.later(0.0, calls.append, ("first", i))
    standby.later(0.01, lambda: 1 / 0)  # a call that raises holds up no other
    standby.later(0.05, lambda: (calls.append("fourth"), last.set()))
    cancelled.cancel()
    assert cancelled.call[1] == ()  # what it would have been called with is let go
    gate.set()
    assert last.wait(10)
    assert calls == [("first", 0), ("first", 1), ("first", 2), "third", "fourth"]


def test_a_forked_child_runs_jobs_and_timed_calls_on_threads_of_its_own() -> None:
    standby.warm(2)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its parent's parked threads and timer are not in it
        try:
            done = threading.Event()
            standby.run(lambda: standby.later(0.0, done.set), "child job")
            os.write(write, b"ok" if done.wait(5) else b"no")
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 2) == b"ok"
    finally:
        os.close(read)
        os.waitpid(pid, 0)


def test_a_stops_callbacks_start_on_threads_parked_as_they_were_registered() -> None:
    c = Cancellation(callback_deadline=30)
    ran: list[int] = []
    both = threading.Barrier(2, timeout=10)

    def callback() -> None:
        ran.append(threading.get_ident())
        both.wait()

    c.on_stop(callback)
    c.on_stop(callback)
    parked = _idents()
    assert c._request("stop", "user")
    assert c.wait(10) and c.callbacks_returned(10)
    assert len(set(ran)) == 2 and set(ran) <= parked and threading.get_ident() not in ran


def test_the_children_of_a_process_are_found_while_its_threads_come_and_go() -> None:
    if not processes._kernel_lists_children():
        pytest.skip("this kernel does not list children (CONFIG_PROC_CHILDREN)")
    child = subprocess.Popen(["sleep", "30"])
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            t = threading.Thread(target=lambda: None)
            t.start()
            t.join()

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        listed = 0
        for _ in range(500):
            found = processes._children_listed(os.getpid())  # None: the threads kept changing
            assert found is None or child.pid in found
            listed += found is not None
            assert child.pid in processes.children(os.getpid())  # then from a scan of /proc
        assert listed > 0
        assert child.pid in processes.descendants(os.getpid())
    finally:
        stop.set()
        churner.join(10)
        child.kill()
        child.wait(10)


def test_a_child_whose_thread_exits_as_the_children_are_read_is_still_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel moves the children of a thread that exits to the process's first live
    thread: here the main thread, read before the file of the thread that forked them."""
    if not processes._kernel_lists_children():
        pytest.skip("this kernel does not list children (CONFIG_PROC_CHILDREN)")
    started, go, forker_tid = threading.Event(), threading.Event(), []
    children: list[subprocess.Popen[bytes]] = []

    def fork_then_wait() -> None:
        forker_tid.append(threading.get_native_id())
        children.append(subprocess.Popen(["sleep", "30"]))
        started.set()
        go.wait(10)

    forker = threading.Thread(target=fork_then_wait)
    forker.start()
    try:
        assert started.wait(10)
        path, real_open = f"/proc/{os.getpid()}/task/{forker_tid[0]}/children", os.open

        def thread_exits_first(file: Any, *args: Any, **kwargs: Any) -> int:
            if file == path and not go.is_set():  # the main thread's file has been read
                go.set()
                forker.join(10)
                assert wait_until(lambda: not os.path.exists(os.path.dirname(file)), 10)  # gone from the kernel too
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr(os, "open", thread_exits_first)
        found = processes._children_listed(os.getpid())
        monkeypatch.undo()
        assert go.is_set() and not forker.is_alive()  # the race happened
        assert found is not None and children[0].pid in found
    finally:
        go.set()
        forker.join(10)
        for child in children:
            child.kill()
            child.wait(10)
