"""What the parts of a TurnHost need of each other, as protocols: no part imports the host.

The ``TurnHost`` (``turn_host``) holds its TurnActors, its LLMActor and its ``ToolRunner``;
they reach back to it only through these faces, so each can be read (and built) alone and
the imports run one way: ``turn_host`` imports the parts, the parts import this module.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

from messages import ControlReply, InterruptTool, RunTool, TurnState

from ..mailbox import Kernel
from ..store.base import TurnStore
from ..turn.decisions import SetTimer
from .durable import Durable
from .journal import Journal
from .outbox import Outboxes
from .timers import Timers

__all__ = ["Actor", "HostedTurn", "RegistryHost", "ToolCalls", "ToolHost", "TurnHostFace"]


class Actor(Protocol):
    """An in-process actor: a mailbox that takes messages."""

    def tell(self, message: Any, sender: Any = None) -> None: ...


class HostedTurn(Actor, Protocol):
    """A TurnActor as the tool side sees it: its id, its state, its mailbox."""

    @property
    def turn_id(self) -> str: ...

    @property
    def state(self) -> TurnState: ...


class ToolCalls(Protocol):
    """The host's tool side as a turn sees it."""

    def run(self, turn: HostedTurn, run: RunTool) -> None: ...

    def interrupt(self, msg: InterruptTool) -> None: ...


class TurnHostFace(Protocol):
    """What a TurnActor needs of its host."""

    @property
    def kernel(self) -> Kernel: ...

    @property
    def store(self) -> TurnStore | None: ...

    @property
    def durable(self) -> Durable | None: ...

    @property
    def journal(self) -> Journal | None: ...

    @property
    def host_id(self) -> str: ...

    def forget(self, turn: HostedTurn) -> None: ...

    def suspended(self, turn: Any, kind: Any, why: str) -> None: ...

    def redeliver(self, message: Any, sender: Any) -> None: ...

    @property
    def llm(self) -> Actor: ...

    @property
    def tools(self) -> ToolCalls: ...

    def deliver(self, key: str, to: Any, payload: bytes, kind: str) -> None: ...

    def hold_outbox(self, key: str) -> None: ...

    def release_outbox(self, key: str) -> None: ...

    def reply(self, to: Any, reply: ControlReply) -> None: ...

    def set_timer(self, turn: HostedTurn, timer: SetTimer) -> None: ...

    def turn_ended(self, turn: HostedTurn) -> None: ...

    def parked(self, turn: Any, parked: bool) -> None: ...

    def hand_on(self, turn: Any) -> bool: ...


class ToolHost(Protocol):
    """What the ``ToolRunner`` needs of its host: the actor's sends and timers, its pool and
    directory, and the thread-safe hand-off to its actor thread."""

    @property
    def kernel(self) -> Kernel: ...

    @property
    def pool(self) -> Any: ...

    @property
    def directory(self) -> Any: ...

    @property
    def inline_async_tools(self) -> bool: ...

    def send(self, to: Any, message: Any) -> None: ...

    def wakeupAfter(self, timePeriod: timedelta, payload: Any = None) -> None: ...

    def put(self, item: Any) -> None: ...

    def progress(self, turn: HostedTurn, run: RunTool, data: Any) -> None: ...


class RegistryHost(TurnHostFace, Protocol):
    """What the ``TurnRegistry`` needs of its host, besides a turn's needs: its outboxes,
    where its directory is, its sends and timers."""

    @property
    def outboxes(self) -> Outboxes: ...

    def answer_start(self, to: Any, reply: ControlReply) -> None: ...

    @property
    def directory(self) -> Any: ...

    @property
    def myAddress(self) -> Any: ...

    @property
    def slot(self) -> int: ...

    @property
    def shutting_down(self) -> Any: ...

    @property
    def timers(self) -> Timers: ...

    def send(self, to: Any, message: Any) -> None: ...

    def every(self, name: str, seconds: float) -> None: ...

    def wakeupAfter(self, timePeriod: timedelta, payload: Any = None) -> None: ...
