"""Every place greenroom leans on Thespian's internals, checked before anything is changed.

greenroom uses Thespian as it is meant (actors, messages, timers, fd watches, conventions)
and, in a few places, reaches below its public API. Each such place is listed here, and
``check()`` verifies, before the first one is used, that this Thespian is a version the
project was tested with and that every internal it needs is where it expects it; otherwise
it fails loudly, naming the version and what is missing. Thespian is pinned in
``pyproject.toml`` to the versions in ``TESTED``.

What greenroom patches or calls, and why:

- ``TCPTransport.serializer`` (the module's and the method), ``ReceiveBuffer``,
  ``MAX_INCOMING_SOCKET_PERIOD``, ``_acceptNewIncoming``, ``_handlePossibleIncoming`` and
  ``_processReceivedEnvelope``: frames sealed and opened by ``frames``, lengths read within
  bounds, connections limited, a resent frame acknowledged and dropped (``transport``);
- ``TCPTransport._addedDataToIncoming``, ``_check_XMIT_4_done``, the ``_XMITStep*`` stages,
  a transport's ``_waitingTransmits`` and ``_safeSocketShutdown``: a frame for another
  incarnation of its endpoint answered with a notice, and a notice making its message (and
  those queued behind it) sealed again and sent at once (``transport``, ``incarnation``);
- ``TCPTransport._next_XMIT_1`` and ``_finishIntent``, ``opsKey``, ``_finished_intents``,
  ``TransmitIntent``'s ``awaitingTXSlot``, ``result`` and its ``_awaitingTXSlot`` and
  ``_retryTime`` (set to an ``ExpirationTimer(0)`` to be stepped at the next pass of
  ``_processIntentTimeouts``): messages to one target leave one at a time and in the order
  they were sent. Thespian could have two in flight to one target (on the connection it
  opened and on one the target opened to it) and sent a message again behind those sent
  after it (``ordering.in_order``);
- ``IPActorAddress.bindArgs``: binds sockets to the configured interface; its
  ``__getstate__`` (and a ``__setstate__``): a pickled address carries its endpoint's
  incarnation (``transport``);
- ``convention`` timer globals: notice a lost node in seconds, not minutes (``tune_convention``);
- ``TransmitIntent.__init__``'s default retry period and the transport's
  ``DEFAULT_MAX_TRANSMIT_PERIOD``: a message whose ACK was lost is sent again in a fraction
  of a second, not 35 s, and gives up after the configured time (``tune_delivery``);
- ``NewActorResponse.transmit_failed``: an outside ``createActor`` whose request's ACK was
  lost gets its answer, then Thespian closes its transport, which fails the resend still
  pending; that late failure made an answered request raise ``ActorSystemFailure``. It is
  ignored once the answer is in (``tune_delivery``);
- ``MultiProcReplicator._childExited``: once an actor has handled a child's exit, Thespian
  collected every other child it then found dead and dropped it unreported (a tool process
  killed while its pool handled another's exit was never reported, and its call never
  ended); now only that child is dropped, and the others are left to the SIGCHLD check,
  which reports them (``report_child_exits``);
- ``TransmitIntent.identify`` and ``ReceiveEnvelope.identify``: Thespian formats every
  message it sends or an actor receives (``str()`` of the whole message, a turn's history
  included) for a debug line it rarely writes; this names the message's type instead;
- ``ActorManager._send_intent`` with completion callbacks: event batches clocked by ACKs
  (``outbox``);
- ``systemBase.external_clone``, ``_run_transport``, ``transport.set_watch`` and
  ``scheduleTransmit``: the owner's non-blocking endpoint (``endpoint``);
- ``MultiProcReplicator._startChildActor``'s record of each child it forks (``ChildInfo``:
  the address ``createActor`` returned and the process): the pid of a tool process the pool
  has just forked (``child_pid``);
- ``TCPTransport.selectors`` (the module the transport's pass takes its selector from) and
  ``TransmitIntent.delay``: each pass of Thespian's transport loop made a new epoll selector,
  registered every socket with it (a system call each) and closed it, and asked every send
  under way for its delay through three timer views and three ``timedelta`` objects; a pass
  now polls its sockets in one system call (``_PassSelector``) and a send's delay is the same
  figure from the timers' floats (``_delay``), see docs/benchmarks.md "The cost of a turn";
- ``TCPTransport.close``: Thespian's own never closes a socket (its static
  ``_safeSocketShutdown`` tests ``isinstance(socket.error, Exception)``, false on Python 3,
  and the idle connections it keeps for reuse, ``_openSockets``, are not even shut down), so
  every closed transport (one per ``createActor``, ``ask``, endpoint, system) left its sockets
  to the garbage collector: a ``ResourceWarning`` each under ``python -W default``
  (``_closing_sockets``).
"""

from __future__ import annotations

import errno
import importlib.metadata
import math
import select
import selectors
import types
from datetime import timedelta
from typing import Any

from ..errors import ConfigurationError

__all__ = ["TESTED", "check", "child_pid", "report_child_exits", "tune_convention", "tune_delivery"]

TESTED = ("4.0.1",)

_checked = False
_answered_creates_kept = False


def _internals() -> list[tuple[object, str]]:
    from thespian.system import actorManager, multiprocCommon, systemBase, timing
    from thespian.system import transport as transport_package
    from thespian.system.admin import convention
    from thespian.system.transport import IPBase, ReceiveEnvelope, TCPTransport, TransmitIntent, streamBuffer

    return [
        (TCPTransport, "serializer"),
        (TCPTransport, "ReceiveBuffer"),
        (TCPTransport, "MAX_INCOMING_SOCKET_PERIOD"),
        (TCPTransport, "TCPIncoming"),
        (TCPTransport, "TCPIncomingPersistent"),
        (TCPTransport, "Thespian__UpdateWork"),
        (TCPTransport.TCPTransport, "_acceptNewIncoming"),
        (TCPTransport.TCPTransport, "_handlePossibleIncoming"),
        (TCPTransport.TCPTransport, "_processReceivedEnvelope"),
        (TCPTransport.TCPTransport, "_addedDataToIncoming"),
        (TCPTransport.TCPTransport, "_check_XMIT_4_done"),
        (TCPTransport.TCPTransport, "_next_XMIT_1"),
        (TCPTransport.TCPTransport, "_finishIntent"),
        (TCPTransport, "opsKey"),
        (TransmitIntent, "awaitingTXSlot"),
        (TransmitIntent, "expired"),
        (TCPTransport.TCPTransport, "_processIntentTimeouts"),
        (timing, "ExpirationTimer"),
        (TCPTransport.TCPTransport, "_XMITStepSendConnect"),
        (TCPTransport.TCPTransport, "_XMITStepRetry"),
        (TCPTransport, "_safeSocketShutdown"),
        (IPBase.IPActorAddress, "__getstate__"),
        (TCPTransport.TCPTransport, "serializer"),
        (streamBuffer, "toSendBuffer"),
        (streamBuffer, "ackPacket"),
        (TCPTransport.TCPTransport, "set_watch"),
        (TCPTransport.TCPTransport, "scheduleTransmit"),
        (IPBase.IPActorAddress, "bindArgs"),
        (IPBase, "thisSystem"),
        (convention, "CONVENTION_REREGISTRATION_PERIOD"),
        (convention, "CONVENTION_RESTART_PERIOD"),
        (convention, "CONVENTION_REGISTRATION_MISS_MAX"),
        (TransmitIntent, "identify"),
        (transport_package, "DEFAULT_MAX_TRANSMIT_PERIOD"),
        (ReceiveEnvelope, "identify"),
        (actorManager.ActorManager, "_send_intent"),
        (systemBase.systemBase, "external_clone"),
        (systemBase.NewActorResponse, "transmit_failed"),
        (systemBase.ExternalOpsToActors, "_run_transport"),
        (multiprocCommon.MultiProcReplicator, "_startChildActor"),
        (multiprocCommon.MultiProcReplicator, "_childExited"),
        (multiprocCommon.MultiProcReplicator, "_checkChildLiveness"),
        (multiprocCommon, "ChildInfo"),
        (TCPTransport.TCPTransport, "close"),
        (TCPTransport, "selectors"),
        (TransmitIntent, "delay"),
    ]


def check() -> None:
    """Fail loudly unless this Thespian is one greenroom was tested with, internals included."""
    global _checked
    if _checked:
        return
    version = importlib.metadata.version("thespian")
    if version not in TESTED:
        raise ConfigurationError(
            f"greenroom relies on Thespian internals and was tested with Thespian {', '.join(TESTED)}, "
            f"not {version}: install thespian=={TESTED[-1]}"
        )
    missing = [
        f"{getattr(owner, '__name__', owner)}.{name}" for owner, name in _internals() if not hasattr(owner, name)
    ]
    if missing:
        raise ConfigurationError(f"Thespian {version} lacks what greenroom patches: {', '.join(missing)}")
    from thespian.system.transport import ReceiveEnvelope, TransmitIntent

    TransmitIntent.identify = lambda self: f"{type(self.message).__name__} to {self.targetAddr}"
    ReceiveEnvelope.identify = lambda self: f"{type(self.message).__name__} from {self.sender}"
    from thespian.system.transport.TCPTransport import TCPTransport

    TCPTransport.close = _closing_sockets(TCPTransport.close)
    _lighten_passes()
    _checked = True


def _lighten_passes() -> None:
    """Each pass of the transport loop polls in one system call and asks its sends' delays
    from floats (see the module docstring); what a pass decides is unchanged."""
    from thespian.system.transport import TCPTransport, TransmitIntent

    TCPTransport.selectors = types.SimpleNamespace(
        DefaultSelector=_PassSelector, EVENT_READ=selectors.EVENT_READ, EVENT_WRITE=selectors.EVENT_WRITE
    )
    TransmitIntent.delay = _delay(TransmitIntent.delay)


class _PassSelector:
    """What a pass of Thespian's transport loop asks of a selector (register, select, close)
    over one ``poll()``: registering costs no system call, and there is nothing to close.

    It answers as the epoll selector it replaces: an fd that is not open fails with EBADF
    (epoll refuses it when registered, poll marks it POLLNVAL: raised from ``select``, which
    Thespian's pass handles by finding the bad fd, checking each with a selector of this
    kind); a hang-up or an error makes an fd both readable and writable, as far as asked; a
    timeout is rounded up to the millisecond. Where it does not: an fd closed between
    ``register`` and ``select`` (epoll forgets it) fails with EBADF too, and a regular file
    (epoll refuses it, EPERM) polls as ready; neither happens as greenroom runs a pass (one
    thread owns each transport, and it watches only sockets, pipes and, in a TurnHost, its
    stream loop's epoll descriptor, which polls as a pipe does and is never closed)."""

    __slots__ = ("_poll", "_events")

    _READ = select.POLLIN  # what epoll registers for reading: urgent data alone wakes neither
    _WRITE = select.POLLOUT

    def __init__(self) -> None:
        self._poll = select.poll()
        self._events: dict[int, int] = {}

    def register(self, fd: int, events: int, data: Any = None) -> None:
        if not isinstance(fd, int):
            fd = fd.fileno()
        if fd < 0:
            raise ValueError(f"Invalid file descriptor: {fd}")
        if fd in self._events:
            raise KeyError(f"{fd!r} (FD {fd}) is already registered")
        self._events[fd] = events
        mask = (self._READ if events & selectors.EVENT_READ else 0) | (
            self._WRITE if events & selectors.EVENT_WRITE else 0
        )
        self._poll.register(fd, mask)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            ms = None
        elif timeout <= 0:
            ms = 0
        else:
            ms = math.ceil(timeout * 1e3)  # rounded up, as the selectors do: never early
        ready = []
        for fd, got in self._poll.poll(ms):
            if got & select.POLLNVAL:
                raise OSError(errno.EBADF, f"Bad file descriptor: {fd}")
            wanted = self._events[fd]
            events = (selectors.EVENT_WRITE if got & ~self._READ else 0) | (
                selectors.EVENT_READ if got & ~self._WRITE else 0
            )
            if events & wanted:
                ready.append((selectors.SelectorKey(fd, fd, wanted, None), events & wanted))
        return ready

    def close(self) -> None:
        self._events.clear()


def _delay(slow: Any) -> Any:
    """``TransmitIntent.delay`` computed from its timers' expiry times: the same
    ``timedelta`` (the time left before its next retry, its pause's end or its give-up,
    whichever is first, never below zero; half its time left, at least 10 ms, while it waits
    for a slot), without a view and a ``timedelta`` per timer. A timer without an end is left
    to Thespian's own."""
    from thespian.system.timing import currentTime

    zero, least = timedelta(0), timedelta(milliseconds=10)

    def delay(self: Any, current_time: float | None = None) -> timedelta:
        quit_at = self._quitTime._time_to_quit
        retry, pause = getattr(self, "_retryTime", None), getattr(self, "_pauseUntil", None)
        retry_at = quit_at if retry is None else retry._time_to_quit
        pause_at = quit_at if pause is None else pause._time_to_quit
        if quit_at is None or retry_at is None or pause_at is None:
            return slow(self, current_time)
        now = current_time or currentTime()
        if getattr(self, "_awaitingTXSlot", False):
            if now >= quit_at:
                return zero
            return max(least, timedelta(seconds=quit_at - now) / 2)
        return timedelta(seconds=max(min(quit_at, retry_at, pause_at) - now, 0))

    delay.__wrapped__ = slow  # type: ignore[attr-defined]
    return delay


def _closing_sockets(close: Any) -> Any:
    """``TCPTransport.close`` that also closes the listening socket, the connections of sends
    still in flight (Thespian's close fails them) and the idle connections kept for reuse,
    before Thespian's own close drops them (it runs from ``__del__`` too, so it needs nothing
    but the transport's own attributes)."""

    def close_all(self: Any) -> None:
        idle = getattr(self, "_openSockets", None) or {}
        sending = [*(getattr(self, "_transmitIntents", None) or {}).values(), *getattr(self, "_waitingTransmits", ())]
        held = [getattr(self, "socket", None), *(getattr(i, "socket", None) for i in [*idle.values(), *sending])]
        for sock in held:
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass
        idle.clear()
        close(self)

    return close_all


def tune_convention(period: float = 2.0, misses: int = 2) -> None:
    """Notice a crashed member after ``period * misses`` seconds instead of ~22 minutes.

    Thespian's convention re-registers every 7 min 22 s and declares a member dead after 3
    missed registrations. These module globals are read when timers start, so setting them
    before the ActorSystem starts is enough (admins are forked from this process).
    """
    check()
    from thespian.system.admin import convention

    convention.CONVENTION_REREGISTRATION_PERIOD = timedelta(seconds=period)
    convention.CONVENTION_RESTART_PERIOD = timedelta(seconds=period)
    convention.CONVENTION_REGISTRATION_MISS_MAX = misses


def child_pid(actor: Any, address: Any) -> int | None:
    """The pid of the process Thespian forked for ``actor``'s child ``address`` (what
    ``createActor`` returned), from Thespian's own record of it; None if it has none (the
    child could not be started, or it has exited and been collected)."""
    for info in reversed(getattr(getattr(actor, "_myRef", None), "_child_procs", None) or ()):
        if info.childAddr is address or info.childAddr == address:
            pid = getattr(info.childProc, "pid", None)
            return pid if isinstance(pid, int) else None
    return None


def tune_delivery(retry_every: float, deliver_within: float) -> None:
    """Resend a message whose ACK was lost after ``retry_every`` seconds (then 2x, 3x, ...),
    and fail it once ``deliver_within`` seconds have passed since it was sent. Set before the
    ActorSystem starts: every process of the tree is forked from this one."""
    check()
    from thespian.system import transport as transport_package
    from thespian.system.transport import TransmitIntent

    defaults = TransmitIntent.__init__.__defaults__
    if defaults is None or len(defaults) != 4 or not isinstance(defaults[3], timedelta):
        raise ConfigurationError(f"Thespian's TransmitIntent takes other defaults than greenroom knows: {defaults!r}")
    TransmitIntent.__init__.__defaults__ = (*defaults[:3], timedelta(seconds=retry_every))
    transport_package.DEFAULT_MAX_TRANSMIT_PERIOD = timedelta(seconds=deliver_within)
    _keep_answered_creates()


def report_child_exits() -> None:
    """Every child's exit is reported to its parent actor, however close together children
    die (see the module docstring). Set before the ActorSystem starts."""
    check()
    from thespian.system.multiprocCommon import MultiProcReplicator

    def child_exited(self: Any, child: Any) -> None:
        def kept(info: Any) -> bool:  # another child, or this one if it has not exited yet
            if child in (info.childAddr, getattr(info, "childRealAddr", None)):
                return bool(self._checkChildLiveness(info))
            return True

        self._child_procs = [info for info in getattr(self, "_child_procs", []) if kept(info)]

    MultiProcReplicator._childExited = child_exited


def _keep_answered_creates() -> None:
    """An outside ``createActor`` that got its answer succeeds, whatever its request's resend
    does after (see the module docstring)."""
    global _answered_creates_kept
    if _answered_creates_kept:
        return
    from thespian.system.systemBase import NewActorResponse

    failed = NewActorResponse.transmit_failed

    def transmit_failed(self: Any, result: Any, intent: Any) -> None:
        if self._newActorAddress is None:  # no answer yet: the request did fail
            failed(self, result, intent)

    NewActorResponse.transmit_failed = transmit_failed
    _answered_creates_kept = True
