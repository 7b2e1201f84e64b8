"""Admission as a host's registry carries it out (a base of ``registry.TurnRegistry``): a new
turn starts, waits in the host's queue, waits for room, or is refused, as the pure rules of
``admission`` decide; a queued turn takes a stop, a cancel or a ``Subscribe`` (see
``registry``'s docstring)."""

from __future__ import annotations

from typing import Any

from messages import CancelTurn, StartTurn, StopTurn, Subscribe, reply_for

from . import admission as adm
from .ports import RegistryHost
from .turn_actor import TurnActor

__all__ = ["Admitting", "Queued"]


class Admitting:
    """The admission half of ``TurnRegistry``: what it holds is the registry's."""

    host: RegistryHost
    turns: dict[str, TurnActor]
    ended: Any
    suspended: dict[str, str | None]
    admission: adm.Admission
    queued: dict[str, Queued]

    def _start(self, msg: StartTurn, sender: Any, later: list[tuple[Any, Any]]) -> None:
        raise NotImplementedError

    def limit(self, limits: adm.Limits) -> None:
        self.admission = adm.Admission(limits)

    def start(self, msg: StartTurn, sender: Any) -> None:
        tid, host = msg.turn_id, self.host
        taken = tid in self.turns or tid in self.ended or tid in self.suspended or tid in self.queued
        if taken:  # a stored id: at its first write
            host.reply(sender, reply_for(msg, False, "invalid", f"turn id {tid} is already in use"))
            return
        if host.shutting_down is not None:  # a straggler: it ends as the others did
            return self._start(msg, sender, [])
        self.queued[tid] = Queued(msg, sender)
        self._admit(self.admission.handle(adm.Arrived(tid, msg.priority, msg.tenant, msg.wait)))

    def _admit(self, decisions: list[adm.Decision]) -> None:
        """Carry out what admission decided (``admission``)."""
        for d in decisions:
            entry = self.queued.get(d.turn_id)
            if entry is None:
                continue
            msg, sender = entry.start, entry.sender
            if isinstance(d, adm.Queued):
                entry.answered = True
                if msg.request_id is not None:
                    self.host.reply(sender, self._admitted(msg, "queued"))
            elif isinstance(d, adm.Refused):
                del self.queued[d.turn_id]
                why = f"host {self.host.host_id} is full: {d.why}; try later, or run(..., wait=True)"
                self.host.reply(sender, reply_for(msg, False, "overloaded", why))
            elif isinstance(d, (adm.Start, adm.Withdrawn)):
                del self.queued[d.turn_id]
                if isinstance(d, adm.Start) and not entry.answered and msg.request_id is not None:
                    self.host.answer_start(sender, self._admitted(msg, "running"))  # with its first events
                self._start(msg, sender, entry.later)
            # adm.Waits: held, unanswered, until there is room

    def _admitted(self, msg: StartTurn, how: str) -> Any:
        """The answer to a start that was queued or started: with the host's room after it."""
        return reply_for(msg, True, None, how).model_copy(update={"room": self.admission.room})

    def start_queued(self) -> None:
        """The host is closing: every queued or waiting turn starts, to end as the others do."""
        for tid in list(self.queued):
            entry = self.queued.pop(tid)
            self.admission.handle(adm.Withdraw(tid))
            self._start(entry.start, entry.sender, entry.later)

    def park(self, turn: TurnActor, parked: bool) -> None:
        """``turn`` waits for approval or is paused (``parked``), or goes on: its slot is freed or taken."""
        tid = turn.turn_id
        self._admit(self.admission.handle(adm.Parked(tid) if parked else adm.Resumed(tid)))

    def _gone(self, turn_id: str) -> None:
        """A turn has ended here or left this host: its slot is free."""
        self._admit(self.admission.handle(adm.Ended(turn_id)))

    def _to_queued(self, turn_id: str, msg: Any, sender: Any) -> None:
        """A message for a turn that has not started: see the module docstring."""
        entry = self.queued[turn_id]
        if isinstance(msg, Subscribe):
            if msg.request_id is not None:
                self.host.reply(sender, reply_for(msg, True, None, "queued: its events follow once it starts"))
            entry.later.append((msg.model_copy(update={"request_id": None}), sender))
        elif isinstance(msg, (StopTurn, CancelTurn)):
            entry.later.append((msg, sender))
            self._admit(self.admission.handle(adm.Withdraw(turn_id)))
        else:
            why = f"turn {turn_id} is queued on host {self.host.host_id}: it takes a stop or a cancel until it starts"
            self.host.reply(sender, reply_for(msg, False, "queued", why))

    @property
    def counts(self) -> tuple[int, int]:
        """(turns running, turns queued or waiting) as admission counts them."""
        return len(self.admission.running), len(self.queued)


class Queued:
    """A new turn that has not started: its ``StartTurn``, its sender, what came for it since."""

    __slots__ = ("answered", "later", "sender", "start")

    def __init__(self, start: StartTurn, sender: Any) -> None:
        self.start, self.sender = start, sender
        self.later: list[tuple[Any, Any]] = []  # a Subscribe, or the stop or cancel it starts with
        self.answered = False  # its sender was told it is queued
