"""What a turn store is: four small interfaces, one per concern, and the data they hand back.

A store (``TurnStore``) is the four of them over one database, and its sessions:

- ``log``, the turns' log: per turn its latest snapshot and its events, written before the
  turn acts on them, one transition (``TurnWrite``) at a time;
- ``inbox``: commands written by other processes (the command line, the console), and the
  replies the turns record for them;
- ``owners``: who owns each durable turn (a host and an *epoch*) and who may take it over;
- ``hosts``: the hosts that hold a lease in the store, and the store's own identity;
- ``sessions``: conversations, each the ordered turns it is made of (``SessionLog``);
- ``rates``: the providers' rate limits every host shares (``Rates``, ``rates``).

The rules of ownership (identity, lease, fence, claim, heir, requires) are in ``ownership``.
Every write of a turn names the owner it expects: a write by a host that was cut off and
has since been replaced fails with ``Fenced`` and writes nothing. A store that cannot be
reached raises ``StoreUnavailable`` (the write may or may not have been committed; every
write is idempotent, so it is retried); any other ``StoreError`` is final for that call.

Backends: ``sqlite.SQLiteStore`` (one file, one machine: the embedded default) and
``postgres.PostgresStore`` (a server every node reaches). ``open_store(url)`` picks one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pydantic import BaseModel

from messages import ControlReply, Message, TurnEvent, TurnState, encode_snapshot

from ..errors import StoreError
from ..placement import requirement
from .rates import Rates
from .session_log import SessionLog, SessionOwned, SessionRecord, SessionSummary
from .urls import keep

__all__ = [
    "STORE_SCHEMA", "EncodedEvent", "HostRecord", "HostRegistry", "Inbox", "Ownership", "Owner", "Rates", "Route",
    "SessionLog", "SessionOwned", "SessionRecord", "SessionSummary", "Snapshot", "TurnLog", "TurnStore",
    "TurnSummary", "TurnWrite", "is_url", "refuse_newer", "session_turns", "status_of", "store_location",
]  # fmt: skip

EncodedEvent = tuple[int, str, bytes]  # (seq, kind, msgpack bytes)

# 1: greenroom 0.1.0 (no owners); 2: owners and epochs, hosts and their leases, event times;
# 3: when each turn was last claimed (on the database's clock); 4: sessions (two new tables);
# 5: what each turn requires of its host (turns.requires) and each host's capabilities (hosts.capabilities);
# 6: the providers' rate limits (one new table, ``rates``);
# 7: the session's owner state (``sessions``: running, opening, dropping) and its queue (``session_queue``);
# 8: a host that drains says so with each renewal (``hosts.draining``): no heir is chosen among such hosts.
# Any change to the tables (a column, an index, a table) must come with a new number: a PostgreSQL store
# whose schema row is current is only checked when opened, its statements not run again (``postgres.migrate``).
STORE_SCHEMA = 8


class TurnSummary(BaseModel):
    """One line of ``turns list``."""

    turn_id: str
    status: str
    finish_reason: str | None = None
    round: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    waiting_since: float | None = None
    pending_approvals: list[str] = []
    parent_turn_id: str | None = None
    error: str | None = None
    owner: str | None = None


@dataclass(frozen=True)
class Owner:
    """Who may write a turn: its host's identity (``ownership.identity``) and the epoch that
    host holds it at."""

    host_id: str
    epoch: int


@dataclass(frozen=True)
class Route:
    """Where a turn is, as its store knows: its owner, epoch and status, and the owner's
    address (pickled) while its lease holds (None once it ran out: the turn is an orphan)."""

    turn_id: str
    host_id: str | None
    epoch: int
    status: str
    address: bytes | None = None
    claimed_at: float | None = None  # when the owner claimed it, on the database's clock
    requires: str = ""  # what its host must have (``placement.requirement``)


@dataclass(frozen=True)
class HostRecord:
    """A live host as its store knows it: its identity, node, address (pickled), lease and
    its node's capabilities."""

    host_id: str
    node: str
    address: bytes
    lease_until: float
    capabilities: dict[str, Any] = field(default_factory=dict)
    draining: bool = False  # it takes no turn over: it hands its own to other hosts, then ends


def status_of(state: TurnState) -> str:
    if state.phase == "finished":
        return "finished"
    if state.phase in ("awaiting_approval", "paused"):
        return state.phase
    return "running"


def session_turns(log: TurnLog, turn_ids: Sequence[str]) -> list[dict[str, str | None]]:
    """A session's turns as the turn log has them: each one's phase and finish reason
    (``unknown`` for a turn the log no longer has); the CLI's and the console's view."""
    out: list[dict[str, str | None]] = []
    for turn_id in turn_ids:
        try:
            state = log.load(turn_id)
        except KeyError:
            out.append({"turn_id": turn_id, "status": "unknown", "finish_reason": None})
            continue
        out.append({"turn_id": turn_id, "status": state.phase, "finish_reason": state.finish_reason})
    return out


@dataclass(frozen=True)
class Snapshot:
    """A turn's state as it is written: the columns ``turns list`` reads, and the state encoded."""

    status: str
    finish_reason: str | None
    round: int
    updated_at: float
    waiting_since: float | None
    pending: str
    data: bytes
    parent_turn_id: str | None
    created_at: float
    requires: str = ""  # what its host must have (``placement.requirement``), written with its first row

    @classmethod
    def of(cls, state: TurnState) -> Snapshot:
        """``state`` as of now (it goes on changing; this does not); ``StoreError`` if it
        cannot be encoded."""
        try:
            data = encode_snapshot(state)
        except Exception as exc:  # noqa: BLE001 - a state that cannot be encoded is this turn's failure alone
            raise StoreError(f"cannot encode turn {state.turn_id}: {exc}") from None
        s = state
        return cls(
            status_of(s), s.finish_reason, s.round, s.updated_at or time.time(), s.waiting_since,
            ",".join(s.pending_approvals), data, s.parent_turn_id, s.created_at, requirement(s.requires),
        )  # fmt: skip


@dataclass(frozen=True)
class TurnWrite:
    """One transition of a turn, written in one transaction before it is carried out: its
    new events, its snapshot where the transition needs one, the inbox commands it applied
    (they leave the inbox in the same transaction: ``taken``) and its replies to them.

    Idempotent: written twice, it is stored once (events by ``seq``, the rest by value)."""

    turn_id: str
    events: tuple[EncodedEvent, ...] = ()
    snapshot: Snapshot | None = None
    owner: Owner | None = None
    taken: tuple[int, ...] = ()
    replies: tuple[tuple[int, bytes], ...] = field(default=())  # (command id, encoded ControlReply)

    def then(self, later: TurnWrite) -> TurnWrite:
        """This write and ``later`` (the same turn's next, by the same owner) as one."""
        return replace(
            self,
            events=self.events + later.events,
            snapshot=later.snapshot or self.snapshot,
            taken=self.taken + later.taken,
            replies=self.replies + later.replies,
        )

    @property
    def empty(self) -> bool:
        return not (self.events or self.snapshot or self.taken or self.replies)


def refuse_newer(location: str, found: int) -> None:
    """Raise ``StoreError`` if the store at ``location`` has a schema newer than this code's."""
    if found > STORE_SCHEMA:
        raise StoreError(
            f"the turn store at {location} was written by a newer greenroom (store schema {found}; this "
            f"greenroom knows up to {STORE_SCHEMA}): upgrade greenroom to use it"
        )


def is_url(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` names a PostgreSQL server rather than a SQLite file."""
    return str(location).startswith(("postgresql://", "postgres://"))


def store_location(store: str | os.PathLike[str] | None) -> str | None:
    """Where a store is, as shown: a SQLite file's absolute path, or a URL without its password."""
    if store is None:
        return None
    return keep(str(store)) if is_url(store) else os.path.abspath(os.fspath(store))


class TurnLog(Protocol):
    """The turns' log: snapshots and events."""

    def write(self, write: TurnWrite) -> None:
        """Write one transition atomically; with ``write.owner``, only while the turn is
        still that owner's (else ``Fenced``, nothing written)."""

    def load(self, turn_id: str) -> TurnState:
        """The latest snapshot, its ``next_seq`` past every stored event; ``KeyError`` if
        unknown, ``SnapshotError`` if unreadable."""

    def summaries(self) -> list[TurnSummary]:
        """Every turn, newest first; unreadable ones carry ``error``."""

    def unfinished(self) -> list[str]:
        """Ids of turns that have not ended, oldest first."""

    def exists(self, turn_id: str) -> bool:
        """Whether the store has a record of the turn (readable or not)."""

    def events(self, turn_id: str, since: int = 0) -> list[TurnEvent]:
        """The turn's events with ``seq >= since``, in order."""

    def timed_events(self, turn_id: str, since: int = 0) -> list[tuple[TurnEvent, float | None]]:
        """``events``, each with when it was written (None: before the store kept times)."""

    def event_payloads(self, turn_id: str, since: int = 0, until: int | None = None) -> list[tuple[str, bytes]]:
        """The turn's events with ``since <= seq < until`` as ``(kind, bytes)``, in order."""

    def version(self, turn_id: str | None = None) -> tuple[float, int] | None:
        """A cheap value that changes whenever the store (or one turn) changes."""


class Inbox(Protocol):
    """Commands for turns, written by other processes, and the turns' replies to them."""

    def add(self, turn_id: str, command: Message) -> int:
        """Queue a command for the turn (and wake its owner, where the store can); its id."""

    def pending(self, turn_id: str) -> list[tuple[int, Message]]:
        """The turn's commands not applied yet, in order, with their ids. A turn applies one
        and marks it taken in the write of its effect (``TurnWrite.taken``)."""

    def answer(self, command_id: int, reply: ControlReply) -> None:
        """Take a command without a turn's write (it was answered for a turn that has ended,
        say) and record its reply."""

    def reply_to(self, command_id: int) -> ControlReply | None:
        """The reply recorded for a queued command (None: not applied yet)."""

    def wait_reply(self, command_id: int, timeout: float) -> ControlReply | None:
        """The reply once it is recorded (woken by the store where it can notify); None if
        none was within ``timeout`` seconds."""

    def waiting(self) -> list[str]:
        """Turns for which a command waits."""

    def prune(self, older_than: float) -> int:
        """Drop commands taken ``older_than`` seconds ago, and untaken ones of turns finished
        as long ago; how many."""

    def listen(self, on_command: Callable[[str], None], on_state: Callable[[bool], None]) -> bool:
        """Call ``on_command(turn_id)`` from a thread of the store's whenever a command is
        queued, if the store can notify (True; ``on_state(False)`` while its connection is
        down and being made again, ``on_state(True)`` once it listens again); False: poll
        ``waiting``."""


class Ownership(Protocol):
    """Who owns each durable turn (``ownership`` says the rules)."""

    def claim(self, turn_id: str, host_id: str, force: bool = False) -> int | None:
        """Make ``host_id`` the owner of an unfinished turn it may claim (``CLAIMABLE``; any,
        with ``force``): the new epoch, or None if it may not."""

    def release(self, owner: Owner, turn_id: str) -> None:
        """Give back a claim (its load failed): the turn has no owner, at the same epoch."""

    def route(self, turn_id: str) -> Route | None:
        """Where the turn is (None: unknown)."""

    def owned_by(self, host_id: str) -> list[str]:
        """The unfinished turns whose owner is ``host_id`` (an identity), or any incarnation
        of it (``node/slot``)."""

    def orphans(self) -> list[tuple[str, str]]:
        """Unfinished turns whose owner's lease has run out (or that have no owner), oldest
        first, each with what it requires of its host (``placement.requirement``)."""

    def claim_many(self, turn_ids: Sequence[str], host_id: str) -> list[tuple[str, int]]:
        """``claim`` of each of ``turn_ids`` (a statement per 500): those ``host_id`` now
        owns, each with its new epoch."""


class HostRegistry(Protocol):
    """The hosts holding a lease in the store, and the store's identity."""

    def renew(
        self, host_id: str, node: str, address: bytes, lease: float, capabilities: str = "", draining: bool = False
    ) -> float:
        """``host_id`` is alive for ``lease`` more seconds, at ``address``, with its node's
        ``capabilities`` (``placement.requirement``'s text), ``draining`` or not (``ownership.Heirs``
        skips a host that drains): the seconds the store granted,
        from when it read its clock (its answer, which the host counts from the request's
        start)."""

    def drop(self, host_id: str) -> None:
        """``host_id`` has ended: its turns are orphans at once."""

    def live(self) -> list[HostRecord]:
        """Hosts whose lease has not run out."""

    def identity(self) -> str:
        """A random id the store keeps for ever: two locations with the same id are one store."""


class TurnStore(Protocol):
    """A store: the four concerns over one database. Safe to use from any process; each
    thread has its own connection."""

    location: str  # a file path, or a URL without its password: for messages

    @property
    def log(self) -> TurnLog: ...

    @property
    def inbox(self) -> Inbox: ...

    @property
    def owners(self) -> Ownership: ...

    @property
    def hosts(self) -> HostRegistry: ...

    @property
    def sessions(self) -> SessionLog: ...

    @property
    def rates(self) -> Rates: ...

    def close(self) -> None: ...
