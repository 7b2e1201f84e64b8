"""A started turn seen from the caller: its events, its result, its controls.

``TurnHandle`` blocks the calling thread; ``AsyncTurnHandle`` has the same methods as
coroutines and never blocks its event loop. Both read one ``TurnStream`` and send commands
through the Runtime's pump, so they behave the same:

- ``events()`` keeps a cursor and yields up to and including the next ``Finish`` it has not
  yielded; it ends at once when the turn has finished and everything was read;
- ``result()`` returns the turn as it is: as of its latest ``Finish`` if nothing has happened
  since; otherwise (the turn has moved on: another process approved, or it is running) it
  waits for the next ``Finish``. It also waits when this handle resumed the turn (the last
  approval of a round, a stop or a cancel of a waiting turn, a ``stop_tool`` that completed
  a paused batch, a ``resume``, input that denied the pending calls), or attached to a turn
  whose decisions are about to resume it; with ``final=True`` it waits for the terminal
  one, whoever resumes the turn (a ``Finish(paused)`` is not terminal either);
- ``TurnTimeout`` means a wait ran out of time, and says how long; a command that could not
  be delivered raises ``HostUnreachable``;
- cancelling the task (or interrupting the thread) that waits in ``result()`` does not stop
  the turn: ``stop()`` does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Literal

from messages import (
    CancelTurn,
    ChatMessage,
    ControlReply,
    Finish,
    PauseTurn,
    RespondToApprovals,
    ResumeTurn,
    SendInput,
    StopTool,
    StopTurn,
    ToolApprovalResponse,
    TurnEvent,
)
from messages.control import Timing

from ..errors import ControlRejected, TurnTimeout
from .routing import waiting
from .starting import turn_status
from .stream import TurnResult, TurnStream

__all__ = ["AsyncTurnHandle", "SendCommand", "TurnHandle", "TurnResult"]

SendCommand = Callable[[Any], concurrent.futures.Future[ControlReply]]


class _Handle:
    """What both faces share: the stream, the cursor, and how commands are built and read."""

    def __init__(
        self, send: SendCommand, stream: TurnStream, since: int | None = None, floor: int | None = None
    ) -> None:
        self.turn_id = stream.turn_id
        self._send_command = send  # the Runtime's: a command to its turn's host, answered in a future
        self._stream = stream
        self._cursor = 0 if since is None else since - stream._base
        self._floor = max(stream._base, floor or 0)  # result() waits for a Finish with this seq or later

    @property
    def all_events(self) -> list[TurnEvent]:
        """Every event received so far, in order (a copy)."""
        with self._stream._cond:
            return list(self._stream.events)

    @property
    def held(self) -> int:
        """Events held here unread (at most ``event_window``: the host keeps the rest till read)."""
        return self._stream.held

    @property
    def rejections(self) -> list[ControlReply]:
        """Refusals nobody awaited (a ``StartTurn`` refused, say)."""
        return list(self._stream.rejections)

    @property
    def finished(self) -> bool:
        """True once the terminal ``Finish`` has arrived."""
        return self._stream.finished

    @property
    def status(self) -> str:
        """``queued``, ``running``, ``rate_limited`` (``RateLimited``), ``awaiting_approval``, ``paused``, ``finished``."""
        return turn_status(self._stream)

    @property
    def dropped(self) -> str | None:
        """Why the turn's host stopped sending to this handle (it fell behind), or None;
        reading past what came then raises ``ReaderDropped``."""
        return self._stream.dropped

    @property
    def host(self) -> str | None:
        """The id of the host running the turn as this handle last knew it (``node/slot``,
        where ``node`` is that node's ``host:port``); None until it is known."""
        return self._stream.host_id

    @property
    def moving(self) -> str | None:
        """Why the turn's events have paused while the Runtime follows it to where it goes on
        (its host could not reach the store and stopped its work, or was lost, or another
        host took it over: ``docs/durable.md``); None while its host is known. Commands sent
        meanwhile wait, and are sent once the turn is found."""
        return self._stream.moving

    def received_at(self, seq: int) -> float | None:
        """When (``time.monotonic()``) this process received event ``seq``, for latency figures."""
        return self._stream.received_at(seq)

    def _exhausted(self) -> bool:
        return self._stream.finished and self._cursor >= len(self._stream.events)

    def _current(self, final: bool) -> TurnResult | None:
        end = self._stream.current_finish(self._floor - self._stream._base, final)
        return self._stream.result_at(end) if end is not None else None

    def _send(self, command: Any) -> concurrent.futures.Future[ControlReply]:
        return self._send_command(command)

    def _after(self, reply: ControlReply) -> ControlReply:
        if not reply.ok:
            raise ControlRejected(reply.code or "invalid", reply.message)
        if reply.resumes_at is not None:
            self._floor = max(self._floor, reply.resumes_at)
        return reply

    @staticmethod
    def _approvals(
        call_id: str, approved: bool, reason: str | None, turn_id: str | None, own: str, by: str | None,
        arguments: Any = None,
    ) -> Any:  # fmt: skip
        response = ToolApprovalResponse(call_id=call_id, approved=approved, reason=reason, arguments=arguments)
        return RespondToApprovals(turn_id=turn_id or own, responses=[response], by=by)

    def _input(
        self, text: str | Sequence[ChatMessage], when: Timing, stop_calls: bool, deny_pending: bool, by: str | None
    ) -> Any:
        messages = [ChatMessage.user(text)] if isinstance(text, str) else list(text)
        return SendInput(
            turn_id=self.turn_id, messages=messages, when=when, stop_calls=stop_calls, deny_pending=deny_pending, by=by
        )

    def _resume(self, text: str | Sequence[ChatMessage] | None, by: str | None) -> Any:
        messages = None if text is None else [ChatMessage.user(text)] if isinstance(text, str) else list(text)
        return ResumeTurn(turn_id=self.turn_id, messages=messages, by=by)

    def _respond(
        self, responses: Sequence[ToolApprovalResponse], deny_rest: bool, reason: str | None, by: str | None
    ) -> Any:
        return RespondToApprovals(
            turn_id=self.turn_id, responses=list(responses), deny_rest=deny_rest, deny_reason=reason, by=by
        )


class TurnHandle(_Handle):
    """A started turn, read and steered from any thread (see the module docstring)."""

    def events(self, timeout: float | None = None) -> Iterator[TurnEvent]:
        """Yield events up to and including the next ``Finish``; ``timeout`` bounds each wait."""
        while not self._exhausted():
            event = self._stream.wait_index(self._cursor, timeout)
            self._cursor += 1
            yield event
            if isinstance(event, Finish):
                return

    __iter__ = events

    def wait_for(self, predicate: Callable[[TurnEvent], bool], timeout: float = 30.0) -> TurnEvent:
        """The first event (from the start) that satisfies ``predicate``; waits for it."""
        index = 0
        deadline = time.monotonic() + timeout
        while True:
            event = self._stream.wait_index(index, max(0.0, deadline - time.monotonic()))
            if predicate(event):
                return event
            index += 1

    def result(self, timeout: float | None = None, *, final: bool = False) -> TurnResult:
        """The turn as it is (see the module docstring for when it waits); ``timeout`` bounds
        each wait for an event."""
        while (found := self._current(final)) is None:
            self._stream.wait_index(len(self._stream.events), timeout)
        return found

    def _command(self, command: Any, timeout: float) -> ControlReply:
        future = self._send(waiting(command, timeout))
        try:
            return self._after(future.result(timeout))
        except concurrent.futures.TimeoutError:
            if not future.done():  # a real timeout (a delivery failure raises HostUnreachable)
                future.cancel()  # and the Runtime forgets it
                raise TurnTimeout(f"no answer to {command.kind} after {timeout:g} s") from None
            raise

    def stop(self, reason: str = "stop requested", timeout: float = 10.0, *, by: str | None = None) -> None:
        """Stop now (idempotent; no effect once the turn has ended); ``by`` names who asked."""
        if not self.finished:
            self._command(StopTurn(turn_id=self.turn_id, reason=reason, by=by), timeout)

    def cancel(
        self, reason: str = "cancel requested", grace: float | None = None, timeout: float = 10.0, *, by: str | None = None
    ) -> None:
        """Cancel at the next safe boundary; a stop after ``grace`` seconds if given."""
        if not self.finished:
            self._command(CancelTurn(turn_id=self.turn_id, reason=reason, grace=grace, by=by), timeout)

    def approve(
        self, call_id: str, reason: str | None = None, *, turn_id: str | None = None, arguments: dict[str, Any] | None = None,
        timeout: float = 10.0, by: str | None = None,
    ) -> None:  # fmt: skip
        """Approve one pending call (of a child turn, with its ``turn_id``), as ``by``, with
        ``arguments`` if the approver edited them; ``ControlRejected`` says why if the turn
        refused (``not_allowed``: ``by`` is not one of the tool's approvers)."""
        self._command(self._approvals(call_id, True, reason, turn_id, self.turn_id, by, arguments), timeout)

    def deny(
        self, call_id: str, reason: str | None = None, *, turn_id: str | None = None, timeout: float = 10.0,
        by: str | None = None,
    ) -> None:  # fmt: skip
        """Deny one pending call, as ``by``; its tool message will be ``Rejected: {reason}``."""
        self._command(self._approvals(call_id, False, reason, turn_id, self.turn_id, by), timeout)

    def respond(
        self,
        responses: Sequence[ToolApprovalResponse],
        *,
        deny_rest: bool = False,
        deny_reason: str | None = None,
        timeout: float = 10.0,
        by: str | None = None,
    ) -> None:
        """Several decisions in one message, all by ``by``; ``deny_rest`` denies every call still undecided."""
        self._command(self._respond(responses, deny_rest, deny_reason, by), timeout)

    def stop_tool(
        self, call_id: str, reason: str = "tool stop requested", timeout: float = 10.0, *, by: str | None = None
    ) -> None:
        """Stop one call; it ends interrupted and the turn goes on."""
        self._command(StopTool(turn_id=self.turn_id, call_id=call_id, reason=reason, by=by), timeout)

    def send_input(
        self, text_or_messages: str | Sequence[ChatMessage], *, when: Timing = "next_call", stop_calls: bool = False,
        deny_pending: bool = False, timeout: float = 10.0, by: str | None = None,
    ) -> ControlReply:  # fmt: skip
        """New input for the running turn (``SendInput``); the reply's ``request_id`` is the one
        its ``InputAccepted`` event carries."""
        return self._command(self._input(text_or_messages, when, stop_calls, deny_pending, by), timeout)

    def pause(self, *, when: Literal["next_step", "now"] = "next_step", reason: str = "pause requested",
              timeout: float = 10.0, by: str | None = None) -> None:  # fmt: skip
        """Hold the turn before its next model call (``PauseTurn``); ``result()`` then returns ``Finish(paused)``."""
        self._command(PauseTurn(turn_id=self.turn_id, when=when, reason=reason, by=by), timeout)

    def resume(
        self, messages: str | Sequence[ChatMessage] | None = None, timeout: float = 10.0, *, by: str | None = None
    ) -> None:
        """Let a paused turn go on, with ``messages`` entering its history first if given."""
        self._command(self._resume(messages, by), timeout)


class AsyncTurnHandle(_Handle):
    """A started turn for asyncio code: ``TurnHandle``'s methods as coroutines."""

    async def _wait_index(self, index: int, timeout: float | None) -> TurnEvent:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ready = self._stream.ready(index)
            if ready is None:
                return self._stream.take(index)
            if deadline is None:
                await ready
                continue
            # one timer on the loop per wait (``asyncio.wait_for`` costs a task and more)
            timer = asyncio.get_running_loop().call_at(
                asyncio.get_running_loop().time() + max(0.0, deadline - time.monotonic()), _expire, ready
            )
            try:
                await ready
            except _Expired:
                raise TurnTimeout(f"turn {self.turn_id}: no event after {timeout:g} s") from None
            finally:
                timer.cancel()

    async def events(self, timeout: float | None = None) -> AsyncIterator[TurnEvent]:
        """Yield events up to and including the next ``Finish``; ``timeout`` bounds each wait."""
        while not self._exhausted():
            event = await self._wait_index(self._cursor, timeout)
            self._cursor += 1
            yield event
            if isinstance(event, Finish):
                return

    def __aiter__(self) -> AsyncIterator[TurnEvent]:
        return self.events()

    async def wait_for(self, predicate: Callable[[TurnEvent], bool], timeout: float = 30.0) -> TurnEvent:
        """The first event (from the start) that satisfies ``predicate``; waits for it."""
        index = 0
        deadline = time.monotonic() + timeout
        while True:
            event = await self._wait_index(index, max(0.0, deadline - time.monotonic()))
            if predicate(event):
                return event
            index += 1

    async def result(self, timeout: float | None = None, *, final: bool = False) -> TurnResult:
        """The turn as it is (see the module docstring); cancelling the awaiting task does not
        stop the turn."""
        while (found := self._current(final)) is None:
            await self._wait_index(len(self._stream.events), timeout)
        return found

    async def _command(self, command: Any, timeout: float) -> ControlReply:
        future = self._send(waiting(command, timeout))
        try:
            reply = await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:  # from wait_for only: a delivery failure raises HostUnreachable
            future.cancel()  # and the Runtime forgets it
            raise TurnTimeout(f"no answer to {command.kind} after {timeout:g} s") from None
        return self._after(reply)

    async def stop(self, reason: str = "stop requested", timeout: float = 10.0, *, by: str | None = None) -> None:
        """Stop now (idempotent; no effect once the turn has ended); ``by`` names who asked."""
        if not self.finished:
            await self._command(StopTurn(turn_id=self.turn_id, reason=reason, by=by), timeout)

    async def cancel(
        self, reason: str = "cancel requested", grace: float | None = None, timeout: float = 10.0, *, by: str | None = None
    ) -> None:
        """Cancel at the next safe boundary; a stop after ``grace`` seconds if given."""
        if not self.finished:
            await self._command(CancelTurn(turn_id=self.turn_id, reason=reason, grace=grace, by=by), timeout)

    async def approve(
        self, call_id: str, reason: str | None = None, *, turn_id: str | None = None, arguments: dict[str, Any] | None = None,
        timeout: float = 10.0, by: str | None = None,
    ) -> None:  # fmt: skip
        """Approve one pending call (of a child turn, with its ``turn_id``), as ``by``, with ``arguments`` if edited."""
        await self._command(self._approvals(call_id, True, reason, turn_id, self.turn_id, by, arguments), timeout)

    async def deny(
        self, call_id: str, reason: str | None = None, *, turn_id: str | None = None, timeout: float = 10.0,
        by: str | None = None,
    ) -> None:  # fmt: skip
        """Deny one pending call, as ``by``; its tool message will be ``Rejected: {reason}``."""
        await self._command(self._approvals(call_id, False, reason, turn_id, self.turn_id, by), timeout)

    async def respond(
        self,
        responses: Sequence[ToolApprovalResponse],
        *,
        deny_rest: bool = False,
        deny_reason: str | None = None,
        timeout: float = 10.0,
        by: str | None = None,
    ) -> None:
        """Several decisions in one message, all by ``by``; ``deny_rest`` denies every call still undecided."""
        await self._command(self._respond(responses, deny_rest, deny_reason, by), timeout)

    async def stop_tool(
        self, call_id: str, reason: str = "tool stop requested", timeout: float = 10.0, *, by: str | None = None
    ) -> None:
        """Stop one call; it ends interrupted and the turn goes on."""
        await self._command(StopTool(turn_id=self.turn_id, call_id=call_id, reason=reason, by=by), timeout)

    async def send_input(
        self, text_or_messages: str | Sequence[ChatMessage], *, when: Timing = "next_call", stop_calls: bool = False,
        deny_pending: bool = False, timeout: float = 10.0, by: str | None = None,
    ) -> ControlReply:  # fmt: skip
        """New input for the running turn (``SendInput``)."""
        return await self._command(self._input(text_or_messages, when, stop_calls, deny_pending, by), timeout)

    async def pause(self, *, when: Literal["next_step", "now"] = "next_step", reason: str = "pause requested",
                    timeout: float = 10.0, by: str | None = None) -> None:  # fmt: skip
        """Hold the turn before its next model call (``PauseTurn``)."""
        await self._command(PauseTurn(turn_id=self.turn_id, when=when, reason=reason, by=by), timeout)

    async def resume(
        self, messages: str | Sequence[ChatMessage] | None = None, timeout: float = 10.0, *, by: str | None = None
    ) -> None:
        """Let a paused turn go on, with ``messages`` entering its history first if given."""
        await self._command(self._resume(messages, by), timeout)


class _Expired(Exception):
    """A wait's deadline passed (raised in the waiting coroutine only)."""


def _expire(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(_Expired())
