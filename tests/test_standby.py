"""Parked threads and the timer thread a stop uses (actors/tools/standby.py), and the
process tree read that a stop's SIGTERM needs (actors/lifecycle/processes.py)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

import pytest

from actors import Cancellation
from actors.lifecycle import processes
from actors.tools import standby


def _idents() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None}


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


class _Logged(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.seen.set()


def test_a_job_that_raises_is_logged_and_the_next_job_runs() -> None:
    logged, done = _Logged(), threading.Event()
    logging.getLogger("greenroom.tools").addHandler(logged)
    try:
        standby.warm(1)
        standby.run(lambda: sys.exit("a job may not end its process"), "greenroom on_stop fails")
        assert logged.seen.wait(10)
        standby.run(done.set, "next")
        assert done.wait(10)
        assert logged.messages == ["greenroom on_stop fails raised"]
    finally:
        logging.getLogger("greenroom.tools").removeHandler(logged)


def test_later_calls_come_in_time_order_and_a_cancelled_one_never() -> None:
    calls: list[str] = []
    last = threading.Event()
    standby.later(0.03, calls.append, "second")
    cancelled = standby.later(0.01, calls.append, "cancelled")
    standby.later(0.0, calls.append, "first")
    standby.later(0.01, lambda: 1 / 0)  # a call that raises holds up no other
    standby.later(0.05, lambda: (calls.append("third"), last.set()))
    cancelled.cancel()
    assert last.wait(10)
    assert calls == ["first", "second", "third"]


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


def test_the_children_of_a_process_are_read_from_the_kernel_while_its_threads_come_and_go() -> None:
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
        for _ in range(500):
            found = processes._children_listed(os.getpid())
            assert found is not None and child.pid in found  # a thread exiting as it was read is passed over
        assert child.pid in processes.descendants(os.getpid())
    finally:
        stop.set()
        churner.join(10)
        child.kill()
        child.wait(10)
