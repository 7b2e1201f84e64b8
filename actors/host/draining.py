"""A TurnHost that drains: its node leaves (``greenroom node``, SIGTERM) without interrupting a call.

On ``Drain`` (from its node's directory) the host says in the store that it drains (with
every renewal from then on: no host picks it as an heir, ``ownership.Heirs``), takes over
no orphan, and looks at each of its turns at each of the turn's boundaries: when it is
handed ``Drain``, at each step (``TurnActor`` asks ``hand_on`` before it takes one), when
it comes to wait for approvals or pauses, and when it ends. What it does with each turn is
``ownership.Drain.step``'s:

- a **durable** turn is handed on at its next safe boundary, nothing in flight: its work
  here stops (``TurnActor.suspend("moved")``: nothing runs to interrupt, its readers are
  told it moved), then its ownership is given up at the epoch it holds (owner NULL: the
  store has every event it wrote, the release comes after them in the journal), and its
  heir claims it at its next look (within a ``TICK``), one epoch up; readers follow it
  there from their next ``seq``;
- a durable turn that comes to a step before the store has the host's mark waits for it
  (one write), then is handed on: no host may pick this one as its heir meanwhile;
- a turn that is **not durable** is left to finish;
- at the **bound** (a second ``Drain`` with ``within`` 0), a turn not durable still here is
  stopped with ``DRAINED`` as its reason, and a durable one still in a call is handed on
  now (its call interrupted, as a fenced host's are).

Once no turn runs here any more the host answers ``Drained(slot)``, once.
"""

from __future__ import annotations

from typing import Any

from messages import StopTurn, TurnState

from ..logs import logger
from ..store.ownership import DRAINED, Drain
from ..wire.draining import Drain as DrainMessage
from ..wire.draining import Drained

__all__ = ["HostDraining", "in_flight", "logged_reply"]

log = logger("greenroom.host")


def logged_reply(command_id: int) -> Any:
    """The ``done`` of a reply recorded for a command from the store's inbox."""

    def answered(_: Any, error: BaseException | None) -> None:
        if error is not None:
            log().warning("could not record the reply to command %d: %s", command_id, error)

    return answered


def in_flight(state: TurnState) -> int:
    """What of a turn is under way and would be cut by a move: its stream, its running calls."""
    calls = sum(1 for cs in state.batch or () if cs.status in ("running", "stopping"))
    return calls + (1 if state.phase == "streaming" else 0)


class HostDraining:
    """The drain of a ``TurnHost`` (a base of it); see the module docstring."""

    drain: Drain | None = None
    drain_to: Any = None  # who asked: answered ``Drained`` once
    drain_marked = False  # the store has the drain's mark: turns may be handed on
    releasing = 0  # releases not yet written

    def receiveMsg_Drain(self, msg: DrainMessage, sender: Any) -> None:
        host: Any = self
        first = self.drain is None
        self.drain, self.drain_to = Drain(msg.within), sender
        if not first:  # the bound: look at every turn again
            return self._look_at_all()
        log().warning("host %s drains: its turns go to other hosts, or finish, within %g s", host.host_id, msg.within)
        if host.durable is None:
            self.drain_marked = True
            return self._look_at_all()

        def marked() -> None:
            self.drain_marked = True
            self._look_at_all()

        host.durable.drain(marked)

    def _look_at_all(self) -> None:
        host: Any = self
        for turn in list(host.turns.values()):
            self.hand_on(turn)
        self._maybe_drained()

    def hand_on(self, turn: Any) -> bool:
        """At one of ``turn``'s boundaries: True if the turn was handed on (it takes no step
        here); a turn not durable may be stopped here (the bound has come)."""
        drain = self.drain
        if drain is None:
            return False
        host: Any = self
        durable = turn.owner is not None and host.durable is not None
        if not self.drain_marked:  # its step waits for the store's mark, then it is handed on
            stored = turn.ahead is None or turn.ahead.stored_once
            return durable and stored and not turn.ended and not turn.gone
        if turn.ended or turn.gone:
            self._maybe_drained()
            return False
        if turn.ahead is not None and not turn.ahead.stored_once:
            return False  # its start is not in the store yet: handed on at its next boundary
        step = drain.step(durable, turn.state.phase, in_flight(turn.state))
        if step == "end":
            turn.tell(StopTurn(turn_id=turn.turn_id, reason=DRAINED, cause="shutdown"), None)
        elif step == "hand_off":
            owner, turn_id = turn.owner, turn.turn_id
            turn.suspend(f"host {host.host_id} drains: the turn goes on at another host", "moved")

            def released(_: Any, error: BaseException | None) -> None:
                self.releasing -= 1
                if error is not None:  # its lease, no longer renewed once the host ends, frees it then
                    log().warning("host %s could not hand turn %s on: %s", host.host_id, turn_id, error)
                self._maybe_drained()

            self.releasing += 1
            host.durable.journal.read(lambda store: store.owners.release(owner, turn_id), released, retry=True)
            return True
        return False

    def _maybe_drained(self) -> None:
        host: Any = self
        if self.drain_to is None or any(not t.ended and not t.gone for t in host.turns.values()):
            return
        if self.releasing:
            return  # a release is still on its way: answered once it is written
        host.send(self.drain_to, Drained(host.slot))
        self.drain_to = None
