"""``Runtime.attach``: a handle on a turn started elsewhere or recovered (a base of
``Runtime``)."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from messages import ControlReply, Subscribe

from ..errors import ControlRejected, TurnTimeout
from .handle import TurnHandle
from .receiving import Inbound
from .routing import Hosts, addressed
from .stream import TurnStream

__all__ = ["Attaching"]


class Attaching:
    """``attach`` over what ``Runtime`` holds."""

    _inbound: Inbound
    _hosts: Hosts | None

    def _running(self) -> Hosts:
        raise NotImplementedError

    def _command(self, command: Any) -> concurrent.futures.Future[ControlReply]:
        raise NotImplementedError

    def attach(self, turn_id: str, since: int = 0, timeout: float = 10.0) -> TurnHandle:
        """A handle on a turn started elsewhere (or recovered), with its events from ``since``
        on, then as they happen. An unknown turn raises ``ControlRejected("unknown_turn")``."""
        stream, subscribed = self._subscribe(turn_id, since, timeout)
        floor = None
        if subscribed is not None:
            try:
                reply = subscribed.result(timeout)
            except concurrent.futures.TimeoutError:
                subscribed.cancel()
                raise TurnTimeout(f"the host of turn {turn_id} did not answer within {timeout:g} s") from None
            floor = self._subscribed(turn_id, stream, reply)
        return TurnHandle(self._command, stream, since, floor)

    def _subscribe(
        self, turn_id: str, since: int, timeout: float | None = None
    ) -> tuple[TurnStream, concurrent.futures.Future[ControlReply] | None]:
        """The turn's stream; and the host's answer to our subscription (within ``timeout``
        s), unless we have it."""
        hosts = self._running()
        addressed(Subscribe(turn_id=turn_id))
        mine = self._inbound.stream(turn_id)
        if mine is not None and since >= mine._base:  # started here: already subscribed
            return mine, None
        return hosts.subscribe(turn_id, since, timeout)

    def _subscribed(self, turn_id: str, stream: TurnStream, reply: ControlReply) -> int | None:
        """The host's answer to an attach: a refusal raises; ``resumes_at`` (the turn was
        about to resume when it answered) is where ``result()`` waits from."""
        if not reply.ok:
            self._inbound.drop(turn_id, stream)
            raise ControlRejected(reply.code or "invalid", reply.message)
        stream.host_id = stream.host_id or self._running().host_id(stream.host)
        return reply.resumes_at

    def _forgotten(self, turn_id: str) -> None:
        """A handle's stream was collected before its turn ended: its host may stop sending."""
        if self._hosts is not None:
            self._hosts.unsubscribe(turn_id)
