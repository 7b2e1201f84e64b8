"""A turn's start as ``Runtime.run`` waits for it: the arguments of admission checked, the
host's answer (started, queued or refused) waited for, and where else a turn may be placed."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

from messages import ControlReply, Finish, RateLimited

from ..errors import ConfigurationError, ControlRejected, Overloaded, TurnTimeout
from .receiving import Inbound
from .routing import Hosts
from .stream import TurnStream

__all__ = [
    "Room",
    "admit_later",
    "admission",
    "admitted_as",
    "admitted_key",
    "checked_admission",
    "elsewhere",
    "turn_status",
]


class Room:
    """How many more turns each host last said it would start at once (``ControlReply.room``),
    less the starts sent to it since without waiting for their answer: a start its host is
    known to start at once need not wait for the answer (``Runtime.run``); one it may queue
    or refuse does, so that ``run()`` says which (``status``, ``Overloaded``).

    A host's room is shared with every other caller of that host (other runtimes, nodes,
    sub-agents, takeovers): one of them may take it meanwhile, and a start that did not wait
    is then queued (``status`` says so once the answer comes) or refused after ``run()``
    returned (its handle ends with ``Error(overloaded)``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._room: dict[str, int] = {}  # host address -> its room, as last answered
        self._ahead: dict[str, int] = {}  # host address -> starts sent since, not answered

    def sent(self, host: Any) -> bool:
        """A start was sent to ``host`` (counted until it is answered): True if ``host`` would
        start it at once, as far as is known."""
        key = str(host)
        with self._lock:
            ahead = self._ahead.get(key, 0)
            self._ahead[key] = ahead + 1
            return host is not None and self._room.get(key, 0) - ahead > 0

    def answered_by(self, host: Any, future: Any) -> ControlReply | None:
        """``answered`` with what ``future`` (done: concurrent or asyncio) holds; that reply."""
        reply = None if future.cancelled() or future.exception() is not None else future.result()
        self.answered(host, reply)
        return reply

    def answered(self, host: Any, reply: ControlReply | None) -> None:
        """``host`` answered a start (``reply``; None: it never will)."""
        key = str(host)
        with self._lock:
            self._ahead[key] = max(0, self._ahead.get(key, 0) - 1)
            if reply is not None:
                self._room[key] = reply.room if reply.ok and reply.room is not None else 0


def admit_later(
    inbound: Inbound, room: Room, stream: TurnStream, admitted: concurrent.futures.Future[ControlReply], wait: bool
) -> bool:
    """True if the start need not wait for its host's answer (not ``wait``, and its host has room:
    ``Room.sent``): the answer, once it comes, updates the handle's status, and a refusal ends its
    stream with ``Error(overloaded)`` (or the code given). False: the caller waits for it."""
    if not room.sent(stream.host) or wait:
        return False

    def answered(future: concurrent.futures.Future[ControlReply]) -> None:
        reply = room.answered_by(stream.host, future)
        if reply is None:
            return
        if reply.ok:
            stream.admitted = "queued" if reply.message == "queued" else "running"
            return
        inbound.drop(stream.turn_id, stream)
        stream.lost(f"its host refused it: {reply.message}", error_type=reply.code or "overloaded")

    stream.admitted = "running"  # until its host says it is queued
    admitted.add_done_callback(answered)
    return True


def admission(
    inbound: Inbound,
    room: Room,
    stream: TurnStream,
    admitted: concurrent.futures.Future[ControlReply],
    timeout: float | None,
) -> ControlReply | None:
    """The host's answer to a turn's start, within ``timeout`` s (None: without bound);
    None if its host could not be reached (the stream has ended, saying so) or the turn
    ended before its answer came."""
    reply = None
    try:
        reply = _answer(inbound, stream, admitted, timeout)
        return reply
    finally:
        room.answered(stream.host, reply)


def _answer(
    inbound: Inbound, stream: TurnStream, admitted: concurrent.futures.Future[ControlReply], timeout: float | None
) -> ControlReply | None:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            return admitted.result(0.25 if deadline is None else max(0.0, min(0.25, deadline - time.monotonic())))
        except concurrent.futures.CancelledError:  # ``Inbound.unanswered``: the turn ended, or its host is lost
            return None
        except concurrent.futures.TimeoutError:
            if stream.finished:
                inbound.forget(admitted_key(stream))
                return None
            if deadline is not None and time.monotonic() >= deadline:
                inbound.forget(admitted_key(stream))
                raise TurnTimeout(f"the host of turn {stream.turn_id} did not answer within {timeout:g} s") from None


def admitted_as(inbound: Inbound, stream: TurnStream, reply: ControlReply) -> None:
    """The host's answer to a turn's start: refused raises (``Overloaded`` when full)."""
    if not reply.ok:
        inbound.drop(stream.turn_id, stream)
        if reply.code == "overloaded":
            raise Overloaded(reply.message)
        raise ControlRejected(reply.code or "invalid", reply.message)
    stream.admitted = "queued" if reply.message == "queued" else "running"


def elsewhere(here: str, hosts: Hosts, requires: dict[str, Any]) -> str | None:
    """The other nodes than ``here`` a turn with ``requires`` may be placed on (by
    ``placement``, among the hosts of this store), as words; None if only this node's may."""
    nodes = sorted({h.rpartition("/")[0] for h in hosts.placeable(requires)} - {here})
    if not nodes:
        return None
    return f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {', '.join(nodes)}"


def admitted_key(stream: TurnStream) -> str:
    """The key of the future that gets a turn's admission (its ``StartTurn``'s request id)."""
    return f"start:{stream.turn_id}"


def checked_admission(priority: object, tenant: object, wait: object) -> None:
    """``ConfigurationError`` for a ``priority`` that is not an int, a ``tenant`` that is not a
    string, a ``wait`` that is not a bool."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ConfigurationError(f"priority must be an int (higher starts first), not {priority!r}")
    if not isinstance(tenant, str):
        raise ConfigurationError(f"tenant must be a string (its name), not {tenant!r}")
    if not isinstance(wait, bool):
        raise ConfigurationError(f"wait must be True or False, not {wait!r}")


def turn_status(stream: TurnStream) -> str:
    """A handle's ``status``, as of the events its stream received."""
    with stream._cond:
        if stream.finished:
            return "finished"
        events = stream.events
        if not events:
            return "queued" if stream.admitted == "queued" else "running"
        last = events[-1]
        if isinstance(last, Finish) and last.finish_reason in ("awaiting_approval", "paused"):
            return last.finish_reason
        return "rate_limited" if isinstance(last, RateLimited) else "running"
