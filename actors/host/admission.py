"""Admission: which new turns of one host run now, wait in its queue, or are refused.

Plain state and one function of (state, event) -> decisions (``Admission.handle``); the
TurnHost carries the decisions out (``registry``). No actor system, no clock, no I/O: the
table test (``tests/test_admission_rules.py``) drives it alone.

The rules (``max_running`` >= 1, ``max_queued`` >= 0, both per host):

- a turn *counts* from its start until it ends, except while it is parked (``Finish`` of
  ``awaiting_approval`` or ``paused``): a parked turn frees its slot, and takes one again
  when it resumes, even if that puts the host over ``max_running`` for a while (a resumed
  turn is never queued: its caller is already waiting on it), and so does a turn the host
  takes over from its store (``Adopted``: a restart, a failover); no new turn starts until
  the count is below the limit again;
- a new turn starts at once if fewer than ``max_running`` count; else it is queued if the
  queue has fewer than ``max_queued``; else it *waits* for room in the queue if its caller
  asked to (``wait=True``, first come first served), or is refused at once (``Overloaded``,
  naming the limit);
- the order in which queued turns start: the highest ``priority`` first; among equal
  priorities, *round-robin over tenants*, one turn of each tenant in turn, the tenants in the
  order they joined that priority's queue (a tenant whose queued turns have all started
  leaves the ring, and joins at its tail when it queues again); a tenant's own turns in the
  order they arrived. So one tenant's 1,000 queued turns delay another's 5 by at most 5
  turns of theirs, never by 1,000;
- a queued (or waiting) turn that is stopped or cancelled leaves the queue at once
  (``Withdrawn``: its host starts it with the command behind its start, so it ends stopped
  or cancelled before any step, without a model call); it never counted;
- every event names a turn id; an event for a turn this state does not know is ignored
  (idempotent: a second ``Ended`` changes nothing).

Waiting turns enter the queue (``Queued``) as its turns start or leave it, oldest first.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

__all__ = [
    "Admission",
    "Adopted",
    "Arrived",
    "Decision",
    "Ended",
    "Event",
    "Limits",
    "Parked",
    "Queued",
    "Refused",
    "Resumed",
    "Start",
    "Waits",
    "Withdraw",
    "Withdrawn",
    "checked_limits",
]

DEFAULT_MAX_RUNNING = 256
"""Turns running at once per host: a streaming turn costs 0.2-0.85 MiB of unique memory
(``docs/benchmarks.md``, scale: 0.55 MiB added per turn at 200, 0.02-0.04 at 1,000), so 256
is at most ~140 MiB a host, and a 2-core node of 2 hosts stays under 300 MiB."""
DEFAULT_MAX_QUEUED = 1024
"""Turns queued per host: a queued turn is its ``StartTurn`` only (its history and tool
specs: a few KiB, 64 KiB for a long history), so 1,024 is 64 MiB at worst."""


@dataclass(frozen=True)
class Limits:
    max_running: int = DEFAULT_MAX_RUNNING
    max_queued: int = DEFAULT_MAX_QUEUED


def checked_limits(max_running: object, max_queued: object) -> Limits:
    """``Limits``, or ``ValueError`` saying which argument is wrong and why."""
    if isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1:
        raise ValueError(f"max_running must be an int >= 1 (turns running at once per host), not {max_running!r}")
    if isinstance(max_queued, bool) or not isinstance(max_queued, int) or max_queued < 0:
        raise ValueError(f"max_queued must be an int >= 0 (turns queued per host), not {max_queued!r}")
    return Limits(max_running, max_queued)


# -- events ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrived:
    """A new turn asks to start."""

    turn_id: str
    priority: int = 0
    tenant: str = ""
    wait: bool = False


@dataclass(frozen=True)
class Parked:
    """A counted turn waits for approval or is paused: its slot is free."""

    turn_id: str


@dataclass(frozen=True)
class Resumed:
    """A parked turn goes on: it counts again."""

    turn_id: str


@dataclass(frozen=True)
class Ended:
    """A started turn has ended (or left this host)."""

    turn_id: str


@dataclass(frozen=True)
class Adopted:
    """A turn this host took over from the store (a restart, a failover): it counts at once,
    like a resumed turn (its callers follow it; it is never queued)."""

    turn_id: str


@dataclass(frozen=True)
class Withdraw:
    """A stop or a cancel for a turn that may be queued or waiting."""

    turn_id: str


Event = Arrived | Parked | Resumed | Adopted | Ended | Withdraw


# -- decisions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """Start the turn now (it counts)."""

    turn_id: str


@dataclass(frozen=True)
class Queued:
    """The turn is in the queue: tell its caller."""

    turn_id: str


@dataclass(frozen=True)
class Waits:
    """The queue is full and the caller asked to wait: hold the turn, unanswered."""

    turn_id: str


@dataclass(frozen=True)
class Refused:
    """The queue is full: refuse the turn (``Overloaded``); ``why`` gives the counts and limits."""

    turn_id: str
    why: str


@dataclass(frozen=True)
class Withdrawn:
    """The turn left the queue (stopped or cancelled there): start it, uncounted, with its
    command behind its start."""

    turn_id: str


Decision = Start | Queued | Waits | Refused | Withdrawn


@dataclass
class _Level:
    """The queued turns of one priority: a ring of tenants, each with its turns in order."""

    tenants: OrderedDict[str, deque[str]] = field(default_factory=OrderedDict)

    def push(self, tenant: str, turn_id: str) -> None:
        self.tenants.setdefault(tenant, deque()).append(turn_id)

    def pop(self) -> str:
        tenant, turns = next(iter(self.tenants.items()))
        turn_id = turns.popleft()
        del self.tenants[tenant]
        if turns:
            self.tenants[tenant] = turns  # to the ring's tail
        return turn_id

    def remove(self, tenant: str, turn_id: str) -> None:
        turns = self.tenants[tenant]
        turns.remove(turn_id)
        if not turns:
            del self.tenants[tenant]


class Admission:
    """The admission state of one host; ``handle`` applies an event and says what to do."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.running: set[str] = set()  # counted
        self.parked: set[str] = set()  # started, not counted
        self.levels: dict[int, _Level] = {}  # priority -> its queued turns
        self.queued: dict[str, tuple[int, str]] = {}  # turn id -> (priority, tenant)
        self.waiting: OrderedDict[str, tuple[int, str]] = OrderedDict()  # beyond the queue, oldest first

    @property
    def room(self) -> int:
        """How many more turns this host would start at once (not queue)."""
        return max(0, self.limits.max_running - len(self.running) - len(self.queued) - len(self.waiting))

    def status(self, turn_id: str) -> str | None:
        """``queued``, ``waiting``, ``running``, ``parked``, or None (not known here)."""
        if turn_id in self.queued:
            return "queued"
        if turn_id in self.waiting:
            return "waiting"
        if turn_id in self.running:
            return "running"
        return "parked" if turn_id in self.parked else None

    def handle(self, event: Event) -> list[Decision]:
        """Apply ``event``; the decisions, in the order they are to be carried out."""
        tid = event.turn_id
        if isinstance(event, Arrived):
            if self.status(tid) is not None:
                return []
            if len(self.running) < self.limits.max_running and not self.queued:
                self.running.add(tid)
                return [Start(tid)]
            if len(self.queued) < self.limits.max_queued:
                self._enqueue(tid, event.priority, event.tenant)
                return [Queued(tid)] + self._fill()
            if event.wait:
                self.waiting[tid] = (event.priority, event.tenant)
                return [Waits(tid)]
            return [Refused(tid, self.overloaded())]
        if isinstance(event, Parked):
            if tid in self.running:
                self.running.discard(tid)
                self.parked.add(tid)
            return self._fill()
        if isinstance(event, Resumed):
            if tid in self.parked:
                self.parked.discard(tid)
                self.running.add(tid)
            return []
        if isinstance(event, Adopted):
            if self.status(tid) is None:
                self.running.add(tid)
            return []
        if isinstance(event, Ended):
            self.running.discard(tid)
            self.parked.discard(tid)
            return self._fill()
        # Withdraw
        if tid in self.queued:
            priority, tenant = self.queued.pop(tid)
            self.levels[priority].remove(tenant, tid)
            if not self.levels[priority].tenants:
                del self.levels[priority]
            return [Withdrawn(tid)] + self._fill()
        if tid in self.waiting:
            del self.waiting[tid]
            return [Withdrawn(tid)]
        return []

    def overloaded(self) -> str:
        """Why a turn is refused: the counts and the limits."""
        n, q = self.limits.max_running, self.limits.max_queued
        return f"{len(self.running)} turns running (max_running={n}) and {len(self.queued)} queued (max_queued={q})"

    def _enqueue(self, turn_id: str, priority: int, tenant: str) -> None:
        self.queued[turn_id] = (priority, tenant)
        self.levels.setdefault(priority, _Level()).push(tenant, turn_id)

    def _fill(self) -> list[Decision]:
        """Start queued turns while slots are free; move waiting turns into the room made."""
        out: list[Decision] = []
        while self.queued and len(self.running) < self.limits.max_running:
            top = max(self.levels)
            level = self.levels[top]
            tid = level.pop()
            if not level.tenants:
                del self.levels[top]
            del self.queued[tid]
            self.running.add(tid)
            out.append(Start(tid))
        while self.waiting:
            free = len(self.running) < self.limits.max_running and not self.queued
            if not free and len(self.queued) >= self.limits.max_queued:
                break
            tid, (priority, tenant) = self.waiting.popitem(last=False)
            if free:
                self.running.add(tid)
                out.append(Start(tid))
            else:
                self._enqueue(tid, priority, tenant)
                out.append(Queued(tid))
        return out
