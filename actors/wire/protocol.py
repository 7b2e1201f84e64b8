"""Messages between greenroom's own actors and processes. Not part of the public API.

These carry actor addresses or process details, so they are plain frozen dataclasses that
Thespian pickles, not members of the msgpack catalogue in ``messages``. Class names are
unique across the project (Thespian dispatches on the bare class name), and ``__str__`` is
cheap because Thespian formats every message it sends for its debug log.

Who sends what:

    Runtime  -> Directory   Hello, Configure, Shutdown
    Runtime  -> TurnHost    Shutdown (and the turns' commands)
    Directory -> Runtime    Welcome, Configured, HostReplaced
    TurnHost  -> Runtime    ShutdownDone, SpanBatch
    Directory -> TurnHost   HostConfig, Recover, Relay, Shutdown, PoolsChanged, PoolFound
    TurnHost  -> Directory  HostReady, Recovered, FindPool
    TurnHost  -> ToolPool   LeaseWorkers, ReturnWorkers
    ToolPool  -> TurnHost   WorkersLeased, WorkerExited
    anyone    -> subscriber EventBatch
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from messages import ToolResult, TurnEvent
from messages.codec import decode_many, join_encoded

from ..telemetry.spans import SpanRecord

__all__ = [
    "Configure",
    "Configured",
    "EventBatch",
    "FindPool",
    "Hello",
    "HostConfig",
    "HostGone",
    "HostReady",
    "HostReplaced",
    "LeaseWorkers",
    "PoolConfig",
    "PoolFound",
    "PoolInfo",
    "PoolsChanged",
    "Recover",
    "Recovered",
    "RegisterPool",
    "Relay",
    "ReturnWorkers",
    "Shutdown",
    "ShutdownDone",
    "SpanBatch",
    "Welcome",
    "WorkerExited",
    "WorkerInit",
    "WorkerReady",
    "WorkerResult",
    "WorkersLeased",
]


class _Internal:
    def __str__(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class Hello(_Internal):
    """Ask an actor for the address it sees you at."""


@dataclass(frozen=True)
class Welcome(_Internal):
    """The answer to ``Hello``: your address, and the answering actor's pid and session."""

    address: Any
    pid: int
    sid: int


@dataclass(frozen=True)
class Configure(_Internal):
    """From the Runtime to its directory: start the hosts and the tool pool, recover the
    store's unfinished turns; or, on a member node, forward turn commands to ``upstream``."""

    store_path: str | None = None
    hosts: int = 1
    tool_processes: int = 2
    max_tool_processes: int = 16
    recycle_after: int = 100
    inline_async_tools: bool = False
    node: str = ""
    capabilities: dict[str, Any] = field(default_factory=dict)
    upstream: Any = None


@dataclass(frozen=True)
class Configured(_Internal):
    """Hosts are up and recovery is done: ``hosts[slot]`` runs the turns of that slot."""

    hosts: list[Any]
    recovered: list[str]
    errors: dict[str, str]


@dataclass(frozen=True)
class HostConfig(_Internal):
    """From the directory to a new TurnHost: who it is and what it uses."""

    slot: int
    hosts: int
    store_path: str | None
    pool: Any
    directory: Any
    inline_async_tools: bool = False
    owner: Any = None  # the Runtime's endpoint, which exports the host's spans


@dataclass(frozen=True)
class HostReady(_Internal):
    slot: int


@dataclass(frozen=True)
class HostReplaced(_Internal):
    """To the directory's watchers: the TurnHost of ``slot`` died and ``address`` replaces it.

    ``recovered`` lists the turns the new host took over from the store; every other turn
    of the old host is lost."""

    slot: int
    address: Any
    recovered: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Recover(_Internal):
    """Load these turns from the store and carry them on."""

    turn_ids: list[str]


@dataclass(frozen=True)
class Recovered(_Internal):
    slot: int
    recovered: list[str]
    errors: dict[str, str]


@dataclass(frozen=True)
class Relay(_Internal):
    """``message`` forwarded by an intermediary: answer ``reply_to``, not the sender."""

    message: Any
    reply_to: Any


@dataclass(frozen=True)
class Shutdown(_Internal):
    """The runtime is closing. Without a store every live turn ends stopped (kind
    ``shutdown``); with one, turns are left as they are, to be recovered, and only their
    tools are stopped. Answered with ``ShutdownDone`` once the events are out."""

    keep_turns: bool


@dataclass(frozen=True)
class ShutdownDone(_Internal):
    """A host has stopped its turns and its subscribers have acknowledged their events."""

    slot: int = -1


@dataclass(frozen=True)
class SpanBatch(_Internal):
    """Spans finished in a host's process, for the Runtime's TracerProvider (``telemetry``)."""

    spans: list[SpanRecord]


@dataclass(frozen=True)
class PoolInfo(_Internal):
    """A node's tool pool and the capabilities of its node."""

    node: str
    capabilities: dict[str, Any]
    address: Any


@dataclass(frozen=True)
class PoolsChanged(_Internal):
    pools: list[PoolInfo]


@dataclass(frozen=True)
class RegisterPool(_Internal):
    """From a member node's directory to the leader's: my node's pool, for placed calls."""

    pool: PoolInfo


@dataclass(frozen=True)
class FindPool(_Internal):
    requires: dict[str, Any]


@dataclass(frozen=True)
class PoolFound(_Internal):
    requires: dict[str, Any]
    pool: PoolInfo | None


@dataclass(frozen=True)
class PoolConfig(_Internal):
    """From a directory to its node's tool pool: keep ``spares`` idle processes forked, and
    never more than ``max_processes`` in all."""

    spares: int
    recycle_after: int
    directory: Any
    node: str
    max_processes: int = 16


@dataclass(frozen=True)
class HostGone(_Internal):
    """From the directory to the pool: a TurnHost died; what it had leased comes back."""

    host: Any


@dataclass(frozen=True)
class LeaseWorkers(_Internal):
    """Lend ``count`` idle tool processes to the sender (answered with ``WorkersLeased``)."""

    count: int
    requires: dict[str, Any] = field(default_factory=dict)
    isolate: bool = False  # for one call, retired after it


@dataclass(frozen=True)
class WorkersLeased(_Internal):
    workers: list[Any]
    node: str
    requires: dict[str, Any] = field(default_factory=dict)
    isolate: bool = False


@dataclass(frozen=True)
class ReturnWorkers(_Internal):
    workers: list[Any]


@dataclass(frozen=True)
class WorkerExited(_Internal):
    """A tool process this host had leased has exited (its call, if any, is lost)."""

    worker: Any


@dataclass(frozen=True)
class WorkerInit(_Internal):
    """From the pool to a new tool process: where the directory is, and when to retire."""

    directory: Any
    recycle_after: int
    node: str


@dataclass(frozen=True)
class WorkerReady(_Internal):
    """From a new tool process to its pool: its pid (what it leaves when it dies is the pool's)."""

    pid: int


@dataclass(frozen=True)
class WorkerResult(_Internal):
    """From a tool process to its host: the call's one result; ``retiring``: do not send
    this process another call (it exits and its pool replaces it)."""

    result: ToolResult
    retiring: bool = False


class EventBatch(_Internal):
    """Turn events for one subscriber, msgpack-encoded, in the order they were emitted.

    Batches to a subscriber are sent one at a time: the next leaves when the previous one
    was acknowledged, and a ``Finish``, ``ToolApprovalRequest`` or ``Error`` leaves at once.
    Thespian does not guarantee the order of delivery: order by each event's ``seq``.
    On the wire a batch is one msgpack array of its events' bytes as they were encoded (and
    stored), pickled as one ``bytes``: no second serialization of each event.
    """

    __slots__ = ("_blob", "_payloads")

    def __init__(self, payloads: list[bytes]) -> None:
        self._payloads: list[bytes] | None = payloads
        self._blob: bytes | None = None

    @property
    def blob(self) -> bytes:
        """The events as one msgpack array."""
        if self._blob is None:
            self._blob = join_encoded(self._payloads or [])
        return self._blob

    @property
    def events(self) -> list[TurnEvent]:
        """The decoded events (each validated: ``CodecError`` for one that is not an event)."""
        return decode_many(self.blob)  # type: ignore[return-value]

    def __len__(self) -> int:
        if self._payloads is not None:
            return len(self._payloads)
        head = self.blob[0]
        return head & 0x0F if head < 0xDC else int.from_bytes(self.blob[1 : 3 if head == 0xDC else 5], "big")

    def __getstate__(self) -> bytes:
        return self.blob

    def __setstate__(self, state: bytes | list[bytes]) -> None:
        self._payloads, self._blob = (state, None) if isinstance(state, list) else (None, state)

    def __str__(self) -> str:
        return f"EventBatch({len(self)})"
