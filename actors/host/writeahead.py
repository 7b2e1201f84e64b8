"""A durable turn's write-ahead: every transition stored before any of its decisions is carried out.

For each input a TurnActor's rules return decisions; with a store, the transition they make
(its new events, its snapshot where it needs one, the inbox commands it applied and its
replies to them: ``transition``) is written through the host's ``Journal`` first. Meanwhile
the decisions wait here, in order, each for its own write and for every write before it;
the turn goes on handling its mailbox. So no event is emitted, no reply sent, no call or
stream started, no end reported, that the store does not have. Only what stops work (an
``Abort`` of the stream, an ``Interrupt`` of a call) is carried out at once: stopping
needs no record, and a stop must act whatever the store does.

A write the store answers with ``Fenced`` or refuses (a final ``StoreError``) is handed to
the turn (``failed``), which stops its work here; what waited behind it is dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from messages import TurnEvent, TurnState, encode

from ..store.base import Owner, Snapshot, TurnWrite
from ..turn.decisions import Abort, Decision, Interrupt, Persist, Reply
from .durable import StoredSender
from .journal import Journal

__all__ = ["WriteAhead", "transition"]

Encoded = list[tuple[TurnEvent, bytes]]
CarryOut = Callable[[list[Decision], Encoded, Any], None]


def transition(
    state: TurnState, owner: Owner | None, decisions: list[Decision], encoded: Encoded, sender: Any
) -> TurnWrite | None:
    """What the store writes for ``decisions`` (None: nothing); ``StoreError`` if the state
    cannot be encoded. A command from the inbox (``StoredSender``) leaves it in this write."""
    persist = any(isinstance(d, Persist) for d in decisions)
    taken: tuple[int, ...] = ()
    replies: tuple[tuple[int, bytes], ...] = ()
    if isinstance(sender, StoredSender):
        taken = (sender.command_id,)
        replies = tuple((sender.command_id, encode(d.reply)) for d in decisions if isinstance(d, Reply))
    if not (encoded or persist or taken):
        return None
    events = tuple((e.seq, e.kind, b) for e, b in encoded)
    return TurnWrite(state.turn_id, events, Snapshot.of(state) if persist else None, owner, taken, replies)


@dataclass
class _Held:
    decisions: list[Decision]
    encoded: Encoded
    sender: Any
    written: bool = False
    command: Any = None  # the command these decisions answer, if one does


class WriteAhead:
    """One turn's decisions waiting for their writes; see the module docstring."""

    def __init__(self, journal: Journal, carry_out: CarryOut, failed: Callable[[BaseException], None]) -> None:
        self._journal = journal
        self._carry_out = carry_out
        self._failed = failed
        self._waiting: deque[_Held] = deque()
        self.stored_once = False  # a write of this turn was stored (a new turn's id is its own)
        self.stopped = False

    def apply(
        self, decisions: list[Decision], encoded: Encoded, sender: Any, write: TurnWrite | None, command: Any = None
    ) -> None:
        """Carry ``decisions`` (made for ``command``, if a command made them) out once
        ``write`` (theirs; None: nothing to write) and every write before it are stored;
        what stops work, at once."""
        if self.stopped:
            return
        stops: list[Decision] = [d for d in decisions if isinstance(d, (Abort, Interrupt))]
        if stops:
            self._carry_out(stops, [], None)
            decisions = [d for d in decisions if not isinstance(d, (Abort, Interrupt))]
        held = _Held(decisions, encoded, sender, written=write is None, command=command)
        self._waiting.append(held)
        if write is None:
            self._release()
        else:
            self._journal.write(write, lambda _, error: self._written(held, error), self)

    def stop(self) -> list[tuple[Any, Any]]:
        """Nothing more is carried out or written for this turn here (its writes not yet
        done are dropped); the commands whose
        answers waited (``(command, sender)``: their effect is not stored, or not known to
        be), to be sent again to whoever carries the turn on. One from the store's inbox is
        left there: it is read again with the turn."""
        self.stopped = True
        self._journal.forget(self)
        unanswered = [
            (h.command, h.sender) for h in self._waiting
            if h.command is not None and h.sender is not None and not isinstance(h.sender, StoredSender)
        ]  # fmt: skip
        self._waiting.clear()
        return unanswered

    def _written(self, held: _Held, error: BaseException | None) -> None:
        if self.stopped:
            return
        if error is not None:
            return self._failed(error)
        held.written = self.stored_once = True
        self._release()

    def _release(self) -> None:
        while self._waiting and self._waiting[0].written and not self.stopped:
            held = self._waiting.popleft()
            self._carry_out(held.decisions, held.encoded, held.sender)
