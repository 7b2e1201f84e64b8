"""``AsyncRuntime``: the Runtime for asyncio code, as httpx's ``AsyncClient`` is for its ``Client``.

Same constructor, same behaviour, one implementation: ``AsyncRuntime`` wraps a ``Runtime``
and awaits what the Runtime would block on. Nothing here blocks the event loop: starting
and closing (which wait for processes) run in a worker thread, commands and events go
through the Runtime's pump thread and come back as futures of the loop, and reading the
store runs in a worker thread.

    async with AsyncRuntime(provider) as rt:
        turn = await rt.run("Weather in Paris?", tools=[get_weather])
        async for event in turn.events():
            ...
        result = await turn.result()

Cancelling a task that awaits ``turn.result()`` does not stop the turn; ``await turn.stop()``
does. ``async for`` over ``turn.events()`` raises ``RuntimeClosedError`` once the runtime
has closed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterable
from typing import Any

from messages import ControlReply, MembershipChanged, NodeInfo, ProviderConfig, TurnEvent, TurnOptions

from ..errors import TurnTimeout
from ..lifecycle import owner
from ..store.sqlite import TurnSummary
from .async_session import AsyncSession
from .busy import Policy
from .conversation import Compact
from .handle import AsyncTurnHandle
from .inputs import History
from .routing import waiting
from .runtime import Runtime, ToolLike
from .starting import admit_later, admitted_as, admitted_key

__all__ = ["AsyncRuntime"]

SWITCH_INTERVAL = 0.0005  # seconds; see AsyncRuntime.start


class AsyncRuntime:
    """An embedded greenroom for asyncio; the constructor is ``Runtime``'s."""

    def __init__(self, provider: ProviderConfig | None = None, **options: Any) -> None:
        self.sync = Runtime(provider, **options)

    async def __aenter__(self) -> AsyncRuntime:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> AsyncRuntime:
        """Start the actor system (in a worker thread; the loop goes on meanwhile).

        The interpreter's switch interval is lowered to 0.5 ms (from 5 ms) unless it is
        already lower: the Runtime's pump is a Python thread, and the loop must never wait
        long for the GIL it holds."""
        if await asyncio.to_thread(self.sync._start_once):
            owner.adopt(self.sync, self.sync.handle_signals)  # signal handlers need the main thread
        if sys.getswitchinterval() > SWITCH_INTERVAL:
            sys.setswitchinterval(SWITCH_INTERVAL)
        return self

    async def close(self) -> None:
        """Close (bounded, in a worker thread); see ``Runtime.close``."""
        await asyncio.to_thread(self.sync.close)

    async def run(
        self,
        messages: History,
        *,
        tools: Iterable[ToolLike] = (),
        provider: ProviderConfig | None = None,
        options: TurnOptions | None = None,
        turn_id: str | None = None,
        system: str | None = None,
        timeout: float = 10.0,
        requires: dict[str, Any] | None = None,
        priority: int = 0,
        tenant: str = "",
        wait: bool = False,
    ) -> AsyncTurnHandle:
        """Start a turn; see ``Runtime.run`` (admission, ``priority``, ``tenant``, ``wait``)."""
        if not self.sync._started:
            await self.start()
        stream, admitted = self.sync._start_turn(
            messages, tools, provider, options, turn_id, system, requires, priority, tenant, wait
        )
        handle = AsyncTurnHandle(self.sync._command, stream)
        if admit_later(self.sync._inbound, self.sync._room, stream, admitted, wait or turn_id is not None):
            return handle  # its host is known to have room: see Runtime.run
        pending = asyncio.wrap_future(admitted)
        pending.add_done_callback(lambda f: self.sync._room.answered_by(stream.host, f))
        while not pending.done():  # the host's answer (its turn's stream ends if its host is lost)
            done, _ = await asyncio.wait({pending}, timeout=0.25 if wait else timeout)
            if not done and (stream.finished or not wait):
                self.sync._inbound.unanswered(admitted_key(stream))  # its Room count too
                if stream.finished:
                    return handle
                raise TurnTimeout(f"the host of turn {stream.turn_id} did not answer within {timeout:g} s")
        if pending.cancelled():  # ``Inbound.unanswered``: the turn has ended, or its host is lost
            return handle
        admitted_as(self.sync._inbound, stream, pending.result())
        if turn_id is not None and stream.admitted == "running":
            await handle._wait_index(0, timeout)  # raises ControlRejected if the id is taken
        return handle

    async def session(
        self,
        session_id: str | None = None,
        *,
        create: bool = False,
        on_busy: Policy = "reject",
        max_messages: int | None = None,
        compact: Compact | None = None,
        **defaults: Any,
    ) -> AsyncSession:
        """A conversation; see ``Runtime.session`` (opened in a worker thread: it reads the store)."""
        if not self.sync._started:
            await self.start()
        sync = await asyncio.to_thread(
            lambda: self.sync.session(
                session_id, create=create, on_busy=on_busy, max_messages=max_messages, compact=compact, **defaults
            )
        )
        return AsyncSession(sync)

    async def fork(self, turn_id: str, at: int | None = None, **kw: Any) -> AsyncTurnHandle:
        """A new turn from another's history up to message ``at`` (or ``at_seq=``); see ``Runtime.fork``."""
        handle = await asyncio.to_thread(lambda: self.sync.fork(turn_id, at, **kw))
        return AsyncTurnHandle(self.sync._command, handle._stream)

    async def attach(self, turn_id: str, since: int = 0, timeout: float = 10.0) -> AsyncTurnHandle:
        """A handle on a turn started elsewhere; see ``Runtime.attach``."""
        stream, subscribed = self.sync._subscribe(turn_id, since, timeout)
        floor = None
        if subscribed is not None:
            try:
                reply = await asyncio.wait_for(asyncio.wrap_future(subscribed), timeout)
            except TimeoutError:
                raise TurnTimeout(f"the host of turn {turn_id} did not answer within {timeout:g} s") from None
            floor = self.sync._subscribed(turn_id, stream, reply)
        return AsyncTurnHandle(self.sync._command, stream, since, floor)

    async def control(self, command: Any, timeout: float = 10.0) -> ControlReply:
        """Send a command to its turn and return the turn's reply; see ``Runtime.control``."""
        try:
            return await asyncio.wait_for(asyncio.wrap_future(self.sync._command(waiting(command, timeout))), timeout)
        except TimeoutError:
            raise TurnTimeout(f"no answer to {command.kind} after {timeout} s") from None

    async def turns(self) -> list[TurnSummary]:
        """Every turn of the store, newest first (needs ``store=``)."""
        return await asyncio.to_thread(self.sync.turns)

    async def updates(self, turn_id: str, since: int = 0) -> list[TurnEvent]:
        """The stored events of a turn from ``seq`` ``since`` on (needs ``store=``)."""
        return await asyncio.to_thread(self.sync.updates, turn_id, since)

    async def nodes(self, timeout: float = 10.0) -> list[NodeInfo]:
        """The nodes that joined this runtime's convention."""
        return await asyncio.to_thread(self.sync.nodes, timeout)

    async def wait_for_node(self, capabilities: dict[str, Any], timeout: float = 30.0) -> str:
        """Wait until a node advertising ``capabilities`` has joined; return its name."""
        return await asyncio.to_thread(self.sync.wait_for_node, capabilities, timeout)

    @property
    def recovered(self) -> list[str]:
        return self.sync.recovered

    @property
    def unrecoverable(self) -> dict[str, str]:
        return self.sync.unrecoverable

    @property
    def membership(self) -> list[MembershipChanged]:
        return self.sync.membership

    @property
    def directory(self) -> Any:
        return self.sync.directory

    @property
    def closed(self) -> bool:
        return self.sync.closed

    @property
    def admin_sid(self) -> int | None:
        return self.sync.admin_sid

    def __repr__(self) -> str:
        return f"<AsyncRuntime pid={os.getpid()} closed={self.closed}>"
