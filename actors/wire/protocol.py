"""Messages between greenroom's own actors and processes. Not part of the public API.

These carry actor addresses or process details, so they are frozen dataclasses that
Thespian pickles (``EventBatch`` pickles as one msgpack blob of its encoded events), not
members of the msgpack catalogue in ``messages``. Class names are unique across the project
(Thespian dispatches on the bare class name), and ``__str__`` is cheap because Thespian
formats every message it sends for its debug log.

Who sends what:

    Runtime   -> Directory  Hello, Configure, Shutdown
    Runtime   -> TurnHost   Shutdown (and the turns' commands)
    Directory -> Runtime    Welcome, Configured, HostReplaced, NodesChanged
    TurnHost  -> Runtime    ShutdownDone, SpanBatch, MetricBatch (``telemetry.metrics``)
    Directory -> TurnHost   HostConfig, Recover, Relay, Shutdown, NodesChanged, PoolFound, Locate, Found
    TurnHost  -> Directory  HostReady, Recovered, FindPool, Find, Located
    TurnHost  -> TurnHost   Relay (a message for a turn another host owns)
    Directory -> Directory  RegisterNode (member to leader), NodesChanged (leader to member), Relay
    Directory -> ToolPool   PoolConfig, HostGone, Shutdown
    TurnHost  -> ToolPool   LeaseWorkers, ReturnWorkers
    ToolPool  -> TurnHost   WorkersLeased, WorkerExited
    ToolPool  -> tool proc. WorkerInit;  tool proc. -> ToolPool  WorkerReady
    TurnHost  -> tool proc. RunTool, InterruptTool (``messages``); tool proc. -> TurnHost  WorkerResult
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
    "Find",
    "FindPool",
    "Found",
    "Hello",
    "HostConfig",
    "HostGone",
    "HostReady",
    "HostReplaced",
    "LeaseWorkers",
    "Locate",
    "Located",
    "NodeRecord",
    "NodesChanged",
    "PoolConfig",
    "PoolFound",
    "Recover",
    "Recovered",
    "RegisterNode",
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
    """From the Runtime (or ``greenroom node``) to its directory: start the hosts and the
    tool pool, recover the store's unfinished turns; on a member node, register with the
    leader's directory (``upstream``)."""

    store: str | None = None  # a SQLite file's path or a PostgreSQL URL
    hosts: int = 1
    tool_processes: int = 1  # tools.pool.DEFAULT_TOOL_PROCESSES (the Runtime and greenroom node pass theirs)
    max_tool_processes: int = 16  # tools.pool.DEFAULT_MAX_TOOL_PROCESSES
    command_hold: float = 30.0
    recycle_after: int = 100
    inline_async_tools: bool = False
    node: str = ""
    capabilities: dict[str, Any] = field(default_factory=dict)
    upstream: Any = None
    max_running: int = 256  # per host: the defaults of ``host.admission``
    max_queued: int = 1024


@dataclass(frozen=True)
class Configured(_Internal):
    """The node's hosts are up (``hosts[slot]`` is host ``node/slot``) and recovery is done;
    ``store_id`` is the identity of the store they share (None: no store)."""

    hosts: list[Any]
    recovered: list[str]
    errors: dict[str, str]
    store_id: str | None = None


@dataclass(frozen=True)
class HostConfig(_Internal):
    """From the directory to a new TurnHost: who it is and what it uses."""

    slot: int
    store: str | None
    pool: Any
    directory: Any
    inline_async_tools: bool = False
    owner: Any = None  # the Runtime's endpoint, which exports the host's spans
    node: str = ""  # its node's name: the host's id is node/slot
    hold: float = 30.0  # seconds a command may wait for its turn's start (held.HeldCommands)
    max_running: int = 256  # admission (``host.admission``)
    max_queued: int = 1024
    capabilities: dict[str, Any] = field(default_factory=dict)  # its node's: kept with its lease in the store


@dataclass(frozen=True)
class HostReady(_Internal):
    slot: int
    identity: str | None = None  # with a store: the host's identity there (``store.ownership``)


@dataclass(frozen=True)
class HostReplaced(_Internal):
    """To the directory's watchers: the TurnHost of ``slot`` died and ``address`` replaces it.

    ``recovered`` lists the turns the new host took over from the store; every other turn
    of the old host is lost."""

    slot: int
    address: Any
    recovered: list[str] = field(default_factory=list)
    host_id: str = ""


@dataclass(frozen=True)
class Recover(_Internal):
    """Claim these turns in the store (``force``: from whoever held them; else only those whose
    owner is gone), load them and carry them on."""

    turn_ids: list[str]
    force: bool = True


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
class NodeRecord(_Internal):
    """A node as the cluster knows it: its capabilities, its tool pool, its TurnHosts (by
    slot; the id of ``hosts[i]`` is ``node/i``) and the identity of its hosts' store (None:
    they keep no store)."""

    node: str
    capabilities: dict[str, Any]
    pool: Any
    hosts: tuple[Any, ...] = ()
    store_id: str | None = None
    draining: bool = False  # the node drains: no new turn is placed on its hosts (``wire.draining``)

    def host_ids(self) -> list[tuple[str, Any]]:
        return [(f"{self.node}/{slot}", address) for slot, address in enumerate(self.hosts)]


@dataclass(frozen=True)
class NodesChanged(_Internal):
    """Every node the leader knows, after a change: to hosts (their pools), Runtimes (their
    placement) and member directories (their routes); ``owner`` is the leader's Runtime,
    where hosts send their spans and metrics."""

    nodes: list[NodeRecord]
    owner: Any = None


@dataclass(frozen=True)
class RegisterNode(_Internal):
    """From a member node's directory to the leader's: my node, its pool and hosts. Sent
    again every few seconds: a leader that restarted learns the node again."""

    record: NodeRecord


@dataclass(frozen=True)
class Find(_Internal):
    """From a host to its directory: a message came for ``turn_id``, which does not run here."""

    turn_id: str


@dataclass(frozen=True)
class Found(_Internal):
    """The directory's answer to ``Find``: the host that runs the turn (None: no host does)."""

    turn_id: str
    host: Any


@dataclass(frozen=True)
class Locate(_Internal):
    """From a directory to every host it knows: is ``turn_id`` running on you?"""

    turn_id: str


@dataclass(frozen=True)
class Located(_Internal):
    """A host's answer to ``Locate``."""

    turn_id: str
    here: bool


@dataclass(frozen=True)
class FindPool(_Internal):
    requires: dict[str, Any]


@dataclass(frozen=True)
class PoolFound(_Internal):
    requires: dict[str, Any]
    pool: NodeRecord | None


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

    A batch to the host's owner (its node's Runtime, or the leader's) may also carry the
    ``ControlReply`` to a turn's start, ahead of its first events (``host.answers``); one to any other
    subscriber (a supervisor actor, a tool's sub-agent) holds events only.
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
