"""The transport pass as greenroom lightens it (``thespian_compat._lighten_passes``): the
selector each pass polls with answers as the epoll selector it replaces, and a send's delay
is Thespian's own figure."""

from __future__ import annotations

import errno
import math
import os
import resource
import select
import selectors
import socket
from datetime import timedelta

import pytest

from actors.wire import thespian_compat

thespian_compat.check()

from thespian.system.timing import ExpirationTimer, currentTime  # noqa: E402
from thespian.system.transport import TCPTransport, TransmitIntent  # noqa: E402

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_the_pass_polls_with_the_light_selector():
    assert TCPTransport.selectors.DefaultSelector is thespian_compat._PassSelector


def test_nothing_ready_then_readable_then_writable(pair):
    a, b = pair
    sel = thespian_compat._PassSelector()
    sel.register(a.fileno(), selectors.EVENT_READ)
    assert sel.select(0) == []
    b.send(b"x")
    [(key, events)] = sel.select(1)
    assert (key.fd, events) == (a.fileno(), selectors.EVENT_READ)
    sel.close()

    sel = thespian_compat._PassSelector()
    sel.register(a.fileno(), selectors.EVENT_WRITE)
    [(key, events)] = sel.select(None)
    assert (key.fd, events) == (a.fileno(), selectors.EVENT_WRITE)


def test_a_hang_up_is_readable_as_far_as_asked(pair):
    a, b = pair
    b.close()
    sel = thespian_compat._PassSelector()
    sel.register(a.fileno(), selectors.EVENT_READ)
    [(key, events)] = sel.select(0)
    assert events == selectors.EVENT_READ


def both(fd: int, events: int) -> list[list[tuple[int, int]]]:
    """What epoll and the pass's selector say of ``fd`` at once: [epoll's, ours]."""
    answers = []
    for sel in (selectors.EpollSelector(), thespian_compat._PassSelector()):
        sel.register(fd, events)
        answers.append(sorted((key.fd, got) for key, got in sel.select(0)))
        sel.close()
    return answers


@pytest.fixture
def tcp_pair():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname(), timeout=5)
        server, _ = listener.accept()
    yield client, server
    client.close()
    server.close()


def test_urgent_data_alone_is_answered_as_epoll_answers_it(tcp_pair):
    client, server = tcp_pair
    client.send(b"!", socket.MSG_OOB)
    arrived = select.poll()
    arrived.register(server.fileno(), select.POLLPRI)
    assert arrived.poll(5000), "the urgent byte arrived"
    for events in (selectors.EVENT_READ, selectors.EVENT_WRITE, selectors.EVENT_READ | selectors.EVENT_WRITE):
        epoll, ours = both(server.fileno(), events)
        assert ours == epoll, events


@pytest.mark.parametrize(
    "events", [selectors.EVENT_READ, selectors.EVENT_WRITE, selectors.EVENT_READ | selectors.EVENT_WRITE]
)
def test_a_peer_gone_is_answered_as_epoll_answers_it(pair, events):
    a, b = pair
    b.close()
    epoll, ours = both(a.fileno(), events)
    assert ours == epoll and ours, events


class Recording:
    """A stand-in for ``select.poll()`` that notes each timeout it is given."""

    def __init__(self) -> None:
        self.timeouts: list[int | None] = []

    def register(self, fd: int, mask: int) -> None:
        pass

    def poll(self, timeout: int | None) -> list[tuple[int, int]]:
        self.timeouts.append(timeout)
        return []


@pytest.mark.parametrize("timeout", [1e-7, 0.0005, 0.001, 0.001001, 0.0100004, 1.001, 14.9999])
def test_a_timeout_is_rounded_up_to_the_millisecond_never_early(timeout):
    sel = thespian_compat._PassSelector()
    sel._poll = Recording()
    sel.select(timeout)
    [ms] = sel._poll.timeouts
    assert ms == math.ceil(timeout * 1e3) and ms / 1e3 >= timeout


def test_no_timeout_waits_and_a_spent_one_does_not():
    sel = thespian_compat._PassSelector()
    sel._poll = Recording()
    for timeout in (None, 0, -3.5):
        sel.select(timeout)
    assert sel._poll.timeouts == [None, 0, 0]


def test_a_closed_fd_fails_with_ebadf_as_epoll_does():
    fd = resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 1  # the highest allowed: no thread holds it
    with pytest.raises(OSError):
        os.fstat(fd)
    epoll = selectors.EpollSelector()
    with pytest.raises(OSError) as real:
        epoll.register(fd, selectors.EVENT_READ)
    epoll.close()
    sel = thespian_compat._PassSelector()
    sel.register(fd, selectors.EVENT_READ)
    with pytest.raises(OSError) as ours:
        sel.select(0)
    assert ours.value.errno == real.value.errno == errno.EBADF
    with pytest.raises(OSError):  # what Thespian's pass checks each fd with, to find the bad one
        TCPTransport.TCPTransport._check_fd(fd)


def test_bad_registrations_fail_as_the_selectors_do(pair):
    a, _ = pair
    sel = thespian_compat._PassSelector()
    with pytest.raises(ValueError):
        sel.register(-1, selectors.EVENT_READ)
    sel.register(a, selectors.EVENT_READ)  # a file object, by its fileno
    with pytest.raises(KeyError):
        sel.register(a.fileno(), selectors.EVENT_WRITE)


def intents():
    fresh = TransmitIntent("somewhere", "m", maxPeriod=timedelta(seconds=5))
    retrying = TransmitIntent("somewhere", "m", maxPeriod=timedelta(seconds=5))
    retrying.retry()
    paused = TransmitIntent("somewhere", "m", maxPeriod=timedelta(seconds=5))
    paused.backoffPause(startPausing=True)
    waiting = TransmitIntent("somewhere", "m", maxPeriod=timedelta(seconds=5))
    waiting.awaitingTXSlot()
    over = TransmitIntent("somewhere", "m", maxPeriod=timedelta(seconds=5))
    over._quitTime = ExpirationTimer(timedelta(seconds=-1))
    over_waiting = TransmitIntent("somewhere", "m", maxPeriod=timedelta(seconds=5))
    over_waiting._quitTime = ExpirationTimer(timedelta(seconds=-1))
    over_waiting.awaitingTXSlot()
    return [fresh, retrying, paused, waiting, over, over_waiting]


@pytest.mark.parametrize("later", [0.0, 0.004, 0.3, 2.6, 10.0])
def test_a_sends_delay_is_thespians_own(later):
    slow = TransmitIntent.delay.__wrapped__
    now = currentTime()
    for intent in intents():
        assert TransmitIntent.delay(intent, now + later) == slow(intent, now + later)
    figures = [TransmitIntent.delay(i, now + later) for i in intents()]
    assert all(isinstance(f, timedelta) and f >= timedelta(0) for f in figures)
