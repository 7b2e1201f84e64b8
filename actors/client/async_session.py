"""``Session`` and ``Queued`` for asyncio: the same objects, with awaitable methods that never
block the event loop (what may wait, on the store or on a stop's answer, runs in a worker thread).
The properties (``history``, ``turns``, ``queued``) read the session as its owner has it: with
a store, one short transaction each."""

from __future__ import annotations

import asyncio
from typing import Any

from messages import ChatMessage

from .conversation import Queued, Session
from .handle import AsyncTurnHandle, TurnHandle
from .inputs import History
from .stream import TurnResult

__all__ = ["AsyncQueued", "AsyncSession"]


class AsyncSession:
    """``Session`` for asyncio: the same session, with awaitable methods that never block the loop."""

    def __init__(self, sync: Session) -> None:
        self.sync = sync
        self.session_id = sync.session_id

    @property
    def history(self) -> list[ChatMessage]:
        return self.sync.history

    @property
    def turns(self) -> list[str]:
        return self.sync.turns

    @property
    def queued(self) -> list[str]:
        return self.sync.queued

    async def run(self, messages: History, **kw: Any) -> AsyncTurnHandle | AsyncQueued:
        """See ``Session.run`` (in a worker thread: a rollback waits for the stop's answer)."""
        out = await asyncio.to_thread(lambda: self.sync.run(messages, **kw))
        if isinstance(out, Queued):
            return AsyncQueued(out)
        return _async(self.sync, out)

    async def withdraw(self, message_id: str) -> None:
        await asyncio.to_thread(self.sync.withdraw, message_id)  # a decision: with a store, a transaction

    async def wait_idle(self, timeout: float = 30.0) -> list[ChatMessage]:
        return await asyncio.to_thread(self.sync.wait_idle, timeout)


class AsyncQueued:
    """``Queued`` for asyncio."""

    def __init__(self, sync: Queued) -> None:
        self.sync = sync
        self.turn_id = self.message_id = sync.message_id

    async def withdraw(self) -> None:
        await asyncio.to_thread(self.sync.withdraw)

    async def handle(self, timeout: float | None = None) -> AsyncTurnHandle:
        return _async(self.sync._session, await asyncio.to_thread(self.sync.handle, timeout))

    async def result(self, timeout: float | None = None, *, final: bool = False) -> TurnResult:
        return await (await self.handle(timeout)).result(timeout, final=final)


def _async(session: Session, handle: TurnHandle) -> AsyncTurnHandle:
    return AsyncTurnHandle(session._command, handle._stream)
