"""Who owns a durable turn, and for how long: identity, lease, fence, claim, heir and reconcile.

On a store every node reaches (PostgreSQL) any host may run any durable turn. Each turn has
an *owner* in the store, a host's identity, and an *epoch* that every claim raises. These
are the rules, all of them here; the SQL of the store uses the three texts below (``HELD``,
``CLAIMABLE``, ``ORPHANED``) and nothing else to decide who may write or take a turn:

- **identity**: a host is ``node/slot`` (where the Runtime looks for it, the same after a
  restart) and an *incarnation*, random at each start: ``node/slot#incarnation``
  (``identity``). No two processes share one, whatever their addresses.
- **lease**: a host renews its lease every ``TICK`` seconds, for ``LEASE`` seconds on the
  *database's* clock. The host counts a lease from the *start* of the request that renewed
  it (the database read its clock no earlier than that), for as long as the database said:
  ``Lease.confirmed(started, granted)``.
- **fence**: ``FENCE_AFTER`` seconds after the start of its last confirmed renewal a host
  stops the work of every turn it runs (streams aborted, calls interrupted), whatever its
  threads are doing (``Lease.must_fence``, checked on its actor thread, which never waits
  for the store), so its calls have ``LEASE - FENCE_AFTER`` seconds to end before any other
  host may claim them: they are stopped with a grace of ``STOP_WITHIN`` at most, whatever
  their ``stop_grace``. Every write of a turn holds only while the writer is its owner at
  its epoch (``HELD``): a host that was cut off and replaced can never write it again.
- **claim**: a host takes an unfinished turn whose owner is nobody, itself, or a host whose
  lease has run out (``CLAIMABLE``); never one whose owner's lease is live, whatever its
  address. A claim raises the epoch and records when, on the database's clock. A claim
  whose load fails is given back.
- **requires**: a turn keeps in the store what its host must have (``StartTurn.requires``,
  as ``placement.requirement``'s canonical text), each host its node's capabilities; a turn
  is only ever taken over by a host whose capabilities satisfy it (``placement.satisfies``).
  An orphan no live host can run waits, unclaimed, for one that can (``turns show`` says so).
- **heir**: an orphan (an unfinished turn whose owner's lease ran out) goes to one live host
  that can run it: among those, sorted by ``node/slot``, the one at the position a hash of
  the turn's id gives (``Heirs``); the other hosts leave it alone. Every host computes the
  same heirs from the same live hosts; sorting them once, a host finds the heir of each
  orphan in O(1), and claims all of its own in one statement: a look costs O(orphans),
  whatever the number of hosts.
- **drain**: a host that drains says so with each renewal (``hosts.draining``) and is never
  an heir; it hands each of its durable turns on at the turn's next safe boundary (waiting
  for approvals, paused, or between steps with no call running): it stops running it
  ("moved"), then gives up ownership at the epoch it holds (owner NULL, no epoch raised:
  written after the turn's last events), and the heir claims it at its next look, one epoch up. Its turns that are not durable finish, or
  end at the bound; so does a durable turn still in a call then (``Drain``).
- **reconcile**: a host that renews after a lapse checks the turns it runs against the
  store: those another host claimed meanwhile are lost to it, and its own that it stopped
  are to be claimed again (``reconcile``).

The clock is injected (``Lease(clock=...)``), so the timing is tested without waiting.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigurationError
from ..placement import satisfies
from .base import HostRecord, Owner, Route

__all__ = [
    "CLAIMABLE",
    "DRAINED",
    "Drain",
    "DrainStep",
    "FENCE_AFTER",
    "HELD",
    "LEASE",
    "ORPHANED",
    "STOP_WITHIN",
    "TICK",
    "Lease",
    "Reconciled",
    "host_of",
    "identity",
    "new_incarnation",
    "Heirs",
    "heir",
    "reconcile",
]

LEASE = 5.0  # seconds a renewal keeps a host's lease, on the database's clock
TICK = 1.0  # seconds between two renewals
FENCE_AFTER = LEASE / 2  # seconds after a confirmed renewal's start at which a host stops its turns' work
STOP_WITHIN = LEASE - FENCE_AFTER - 0.5  # seconds a fenced host's calls have to end (their stop grace, at most)

HELD = "turn_id = ? AND owner = ? AND epoch = ?"
"""The fencing condition, the one text of it: the row of a turn its writer still holds
(parameters: ``held(turn_id, owner)``)."""

CLAIMABLE = (
    "status != 'finished' AND (owner IS NULL OR owner = ? OR owner NOT IN"
    " (SELECT host_id FROM hosts WHERE lease_until > {now}))"
)
"""The row of a turn a host may claim (parameter: its identity; ``{now}``: the database's clock)."""

ORPHANED = (
    "status != 'finished' AND (owner IS NULL OR owner NOT IN (SELECT host_id FROM hosts WHERE lease_until > {now}))"
)
"""The row of an orphan: unfinished, its owner's lease run out, or no owner (``{now}``: the database's clock)."""


class Heirs:
    """Who takes over each orphan, among ``live`` hosts (``HostRecord``s) that do not drain;
    see the module docstring. Of two incarnations of one slot (one just replaced the other), the one
    renewed last counts."""

    def __init__(self, live: Iterable[HostRecord]) -> None:
        newest: dict[str, HostRecord] = {}
        for record in live:
            if record.draining:  # it hands its turns on: it takes none
                continue
            slot = host_of(record.host_id)
            if slot not in newest or record.lease_until > newest[slot].lease_until:
                newest[slot] = record
        self._hosts = [newest[slot] for slot in sorted(newest)]
        self._capable: dict[str, list[HostRecord]] = {}  # requirement -> the hosts that meet it

    def of(self, turn_id: str, required: str = "") -> str | None:
        """The identity of the host that takes ``turn_id`` over (``required``: what it
        requires, ``placement.requirement``'s text); None while no live host can."""
        hosts = self._capable.get(required)
        if hosts is None:
            hosts = self._capable[required] = [h for h in self._hosts if satisfies(h.capabilities, required)]
        if not hosts:
            return None
        digest = hashlib.blake2b(turn_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        return hosts[int.from_bytes(digest, "big") % len(hosts)].host_id


def heir(turn_id: str, live: Iterable[HostRecord], required: str = "") -> str | None:
    """``Heirs(live).of(turn_id, required)``, for one turn."""
    return Heirs(live).of(turn_id, required)


def held(turn_id: str, owner: Owner) -> tuple[str, str, int]:
    """The parameters of ``HELD``."""
    return (turn_id, owner.host_id, owner.epoch)


def new_incarnation() -> str:
    return secrets.token_hex(6)


def identity(host_id: str, incarnation: str) -> str:
    """``node/slot#incarnation``: the owner a host writes as."""
    return f"{host_id}#{incarnation}"


def host_of(owner: str) -> str:
    """``node/slot`` of an identity (an identity from before incarnations is its own)."""
    return owner.split("#", 1)[0]


@dataclass(frozen=True)
class Reconciled:
    """What a host that renewed after a lapse does with its turns."""

    lost: list[str]  # turns it runs that another host or epoch holds now: their work stops here
    again: list[str]  # its own turns it does not run (it stopped them): to be claimed again


def reconcile(running: Mapping[str, Owner], routes: Mapping[str, Route | None], mine: Iterable[str]) -> Reconciled:
    """``running``: the turns a host runs, each with the owner it writes as; ``routes``: what
    the store says of each; ``mine``: the unfinished turns the store says this host owns."""
    lost = [
        turn_id
        for turn_id, owner in running.items()
        if (route := routes.get(turn_id)) is not None and (route.host_id, route.epoch) != (owner.host_id, owner.epoch)
    ]
    return Reconciled(lost, [t for t in mine if t not in running])


class Lease:
    """One host's lease as the host knows it, on its own monotonic clock. Thread-safe: the
    thread that renews confirms, the actor thread reads and fences."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, fence_after: float = FENCE_AFTER) -> None:
        self._clock = clock
        self._fence_after = fence_after
        self._lock = threading.Lock()
        self._born = clock()  # before a first renewal, the lease is counted from here
        self._started: float | None = None  # the start of the last confirmed renewal
        self._granted = LEASE
        self._fenced = False

    def now(self) -> float:
        return self._clock()

    def confirmed(self, started: float, granted: float) -> bool:
        """A renewal that started at ``started`` was answered: the lease holds ``granted``
        seconds from then. True if it had lapsed (the host had fenced, or its previous lease
        ran out before this renewal started): the host reconciles its turns. An answer that
        comes after its own fence point counts for nothing (the host fences, or has)."""
        with self._lock:
            if self._clock() >= started + min(self._fence_after, granted):
                return False
            previous = self._started
            lapsed = self._fenced or (previous is not None and started >= previous + self._granted)
            if previous is None or started > previous:
                self._started, self._granted = started, granted
            self._fenced = False
            return lapsed

    def _from(self) -> float:
        return self._born if self._started is None else self._started

    @property
    def fence_at(self) -> float:
        """When the host must stop its turns' work unless it renews first."""
        with self._lock:
            return self._from() + min(self._fence_after, self._granted)

    @property
    def expires_at(self) -> float:
        """When other hosts may claim this host's turns at the earliest, on this clock."""
        with self._lock:
            return self._from() + self._granted

    @property
    def fenced(self) -> bool:
        with self._lock:
            return self._fenced

    def must_fence(self) -> bool:
        """True once, when the fence is due and the host has not fenced: it fences now."""
        with self._lock:
            if self._fenced or self._clock() < self._from() + min(self._fence_after, self._granted):
                return False
            self._fenced = True
            return True


DRAINED = "this node drained: the turn could not be handed on or finish within the drain's bound"
"""The reason a turn ends with when its node drains and the bound comes first."""

DrainStep = Literal["wait", "hand_off", "end"]


class Drain:
    """A host that drains, over ``within`` seconds on an injected clock: what to do with each
    of its turns now (``step``). ``hand_off``: suspend ("moved"), then release ownership at
    the same epoch; ``end``: finish the turn with ``DRAINED``; ``wait``: look again at the
    turn's next boundary, or at the bound. Once ``step`` said ``end`` or ``hand_off`` for
    every turn, the host is drained."""

    def __init__(self, within: float, clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(within, bool) or not isinstance(within, (int, float)) or not within >= 0:
            raise ConfigurationError(f"a drain's bound must be a number of seconds >= 0, not {within!r}")
        self._clock = clock
        self.until = clock() + float(within)

    @property
    def overdue(self) -> bool:
        """The bound has come: every turn still here ends (or, if durable, is handed on now)."""
        return self._clock() >= self.until

    def step(self, durable: bool, phase: str, in_flight: int) -> DrainStep:
        """``phase``: the turn's (``TurnState.phase``); ``in_flight``: its tool calls and LLM
        stream under way. A durable turn is handed on at a safe boundary, nothing in flight
        (waiting for approvals, paused, or between two steps), never in a call before the
        bound; at the bound, one still in a call is handed on (its call is interrupted, as a
        fenced host's is), which beats waiting out a lease. A turn that is not durable is
        left to finish, and ends at the bound."""
        if phase == "finished":
            return "wait"  # nothing to do: it is gone at its next look
        if durable:
            return "hand_off" if in_flight == 0 or self.overdue else "wait"
        return "end" if self.overdue else "wait"
