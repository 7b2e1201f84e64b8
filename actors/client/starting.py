"""A turn's start as ``Runtime.run`` waits for it: the arguments of admission checked, the
host's answer (started, queued or refused) waited for, and where else a turn may be placed."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

from messages import ControlReply, Finish, RateLimited

from ..errors import ConfigurationError, ControlRejected, Overloaded, TurnTimeout
from .receiving import Inbound
from .routing import Hosts
from .stream import TurnStream

__all__ = ["admission", "admitted_as", "admitted_key", "checked_admission", "elsewhere", "turn_status"]


def admission(
    inbound: Inbound, stream: TurnStream, admitted: concurrent.futures.Future[ControlReply], timeout: float | None
) -> ControlReply | None:
    """The host's answer to a turn's start, within ``timeout`` s (None: without bound);
    None if its host could not be reached (the stream has ended, saying so)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            return admitted.result(0.25 if deadline is None else max(0.0, min(0.25, deadline - time.monotonic())))
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
