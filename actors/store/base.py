"""What a turn store is: the interface every backend implements, and what it hands back.

A store keeps, per turn, its latest snapshot and its event log, written before the turn
acts on them; a command inbox for commands written by other processes; and who owns each
turn: the host that runs it and an *epoch*, raised each time another host takes the turn
over. Every write of a turn names the owner it expects (``Owner``): a write by a host that
was cut off and has since been replaced fails with ``Fenced`` and writes nothing, so a turn
never has two hosts acting on it. Hosts hold a lease in the store (``renew_host``); the
unfinished turns of a host whose lease ran out are ``orphans``, which a live host claims.

Backends: ``sqlite.SQLiteStore`` (one file, one machine: the embedded default) and
``postgres.PostgresStore`` (a server every node reaches). ``open_store(url)`` picks one:
``postgresql://...`` or ``postgres://...`` for PostgreSQL, anything else is a file path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel

from messages import ControlReply, Message, TurnEvent, TurnState

from ..errors import StoreError

__all__ = [
    "STORE_SCHEMA",
    "EncodedEvent",
    "HostRecord",
    "Owner",
    "Route",
    "TurnStore",
    "TurnSummary",
    "is_url",
    "refuse_newer",
    "status_of",
]

EncodedEvent = tuple[int, str, bytes]  # (seq, kind, msgpack bytes)

STORE_SCHEMA = 2  # 1: greenroom 0.1.0 (no owners); 2: owners and epochs, hosts and their leases, event times


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
    """Who may write a turn: its host and the epoch that host holds it at."""

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


@dataclass(frozen=True)
class HostRecord:
    """A live host as its store knows it: its id, node, address (pickled) and lease."""

    host_id: str
    node: str
    address: bytes
    lease_until: float


def status_of(state: TurnState) -> str:
    if state.phase == "finished":
        return "finished"
    if state.phase == "awaiting_approval":
        return "awaiting_approval"
    return "running"


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


class TurnStore(Protocol):
    """What the runtime needs from a store. Every method is safe to call from any process."""

    location: str  # a file path, or a URL without its password: for messages

    def save(self, state: TurnState, events: Sequence[EncodedEvent], owner: Owner | None = None) -> None:
        """Write the snapshot and append the (already encoded) events, atomically; with
        ``owner``, only while the turn is still that owner's (else ``Fenced``). On any
        failure nothing is written and ``StoreError`` says why."""

    def append(self, turn_id: str, events: Sequence[EncodedEvent], owner: Owner | None = None) -> None:
        """Append events without a snapshot (text deltas), with the same guarantees."""

    def load(self, turn_id: str) -> TurnState:
        """The latest snapshot, its ``next_seq`` past every stored event; ``KeyError`` if
        unknown, ``SnapshotError`` if unreadable."""

    def summaries(self) -> list[TurnSummary]:
        """Every turn, newest first; unreadable ones carry ``error``."""

    def unfinished(self) -> list[str]:
        """Ids of turns that have not ended."""

    def exists(self, turn_id: str) -> bool:
        """Whether the store has a record of the turn (readable or not)."""

    def events(self, turn_id: str, since: int = 0) -> list[TurnEvent]:
        """The turn's events with ``seq >= since``, in order."""

    def event_payloads(self, turn_id: str, since: int = 0, until: int | None = None) -> list[tuple[str, bytes]]:
        """The turn's events with ``since <= seq < until`` as ``(kind, bytes)``, in order."""

    def add_command(self, turn_id: str, command: Message) -> int:
        """Queue a command for the turn (and tell its owner, where the store can); its id."""

    def take_commands(self, turn_id: str) -> list[tuple[int, Message]]:
        """The turn's queued commands in order, with their ids, marked as taken."""

    def record_reply(self, command_id: int, reply: ControlReply) -> None:
        """The turn's reply to a queued command, for whoever queued it (``reply_to``)."""

    def reply_to(self, command_id: int) -> ControlReply | None:
        """The reply recorded for a queued command (None: not applied yet)."""

    def wait_reply(self, command_id: int, timeout: float) -> ControlReply | None:
        """The reply to a queued command once it is recorded (woken by the store where it can
        notify); None if none was within ``timeout`` seconds."""

    def timed_events(self, turn_id: str, since: int = 0) -> list[tuple[TurnEvent, float | None]]:
        """``events``, each with when it was written (None: before the store kept times)."""

    def version(self, turn_id: str | None = None) -> tuple[float, int] | None:
        """A cheap value that changes whenever the store (or one turn) changes."""

    def pending_commands(self, turn_id: str) -> list[Message]:
        """The turn's queued commands in order, not taken."""

    def prune_commands(self, older_than: float) -> int:
        """Drop commands taken ``older_than`` seconds ago, and untaken ones of turns finished
        as long ago; how many."""

    def has_commands(self, turn_id: str) -> bool:
        """Whether any command waits for the turn (cheap: checked at every step)."""

    def turns_with_commands(self) -> list[str]:
        """Turns for which a command waits."""

    def claim(self, turn_id: str, host_id: str, force: bool = False) -> int | None:
        """Make ``host_id`` the owner of an unfinished turn whose owner is gone (its lease
        ran out; or any owner, with ``force``): the new epoch, or None if it is not."""

    def route(self, turn_id: str) -> Route | None:
        """Where the turn is (None: unknown)."""

    def owned_by(self, host_id: str) -> list[str]:
        """The unfinished turns whose owner is ``host_id`` (a restarted host claims them)."""

    def identity(self) -> str:
        """A random id the store keeps for ever: two locations with the same id are one store."""

    def renew_host(self, host_id: str, node: str, address: bytes, lease: float) -> None:
        """``host_id`` is alive for ``lease`` more seconds, at ``address``."""

    def drop_host(self, host_id: str) -> None:
        """``host_id`` has ended: its turns are orphans at once."""

    def live_hosts(self) -> list[HostRecord]:
        """Hosts whose lease has not run out."""

    def orphans(self) -> list[str]:
        """Unfinished turns whose owner's lease has run out (or that have no owner)."""

    def listen(self, on_command: Callable[[str], None]) -> bool:
        """Call ``on_command(turn_id)`` from a thread of the store's whenever a command is
        queued for a turn, if the store can notify (True); False: poll ``turns_with_commands``."""

    def close(self) -> None: ...
