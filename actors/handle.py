"""A turn seen from the caller: its events in order, its result, its controls.

``TurnStream`` is the one implementation under both APIs: the pump thread delivers events
into it (in any order, deduplicated, put back in ``seq`` order), and readers wait on it
with a timeout (threads) or a future (asyncio). ``TurnHandle`` is the blocking face.

Guarantees:

- events are yielded in ``seq`` order, each once; a run of events ends with one ``Finish``;
- a reader never waits for ever on a turn that cannot go on: an event lost in transit is
  replaced (after ``GAP_WAIT``) by an ``Error(event_lost)`` once a later ``Finish`` shows
  the run ended; a lost host ends the turn with ``Error(host_lost)`` + ``Finish(error)``;
  a closed runtime raises ``RuntimeClosedError`` in every reader still waiting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from messages import (
    CancelTurn,
    ChatMessage,
    ControlReply,
    Error,
    Finish,
    RespondToApprovals,
    StopTool,
    StopTurn,
    ToolApprovalRequest,
    ToolApprovalResponse,
    TurnEvent,
    Usage,
)
from messages.events import FinishReason

from .errors import ControlRejected, RuntimeClosedError, TurnTimeout
from .history import close_open_calls
from .tools import error_result

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["GAP_WAIT", "TurnHandle", "TurnResult", "TurnStream"]

GAP_WAIT = 1.0  # seconds a missing event may take to arrive once a later Finish is here


def log() -> logging.Logger:
    return logging.getLogger("greenroom.runtime")


@dataclass(frozen=True)
class TurnResult:
    """A turn as of one ``Finish``: its history, why it finished, and what waits."""

    turn_id: str
    finish_reason: FinishReason
    messages: list[ChatMessage]
    usage: Usage
    round: int
    pending_approvals: list[ToolApprovalRequest] = field(default_factory=list)
    error: Error | None = None

    @property
    def text(self) -> str:
        """The last assistant message's text."""
        for m in reversed(self.messages):
            if m.role == "assistant":
                return m.content or ""
        return ""


class TurnStream:
    """The events of one turn in this process, in order. Thread-safe."""

    def __init__(self, turn_id: str, since: int = 0, closed: Callable[[], bool] = lambda: False) -> None:
        self.turn_id = turn_id
        self._closed = closed
        self._cond = threading.Condition(threading.RLock())
        self._base = since  # the seq of events[0]
        self.events: list[TurnEvent] = []
        self._early: dict[int, TurnEvent] = {}
        self._arrived: dict[int, float] = {}
        self._gap_since: float | None = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.rejection: ControlReply | None = None  # the turn's StartTurn was refused
        self.rejections: list[ControlReply] = []

    # -- delivery (pump thread) -----------------------------------------------------------

    def deliver(self, event: TurnEvent) -> bool:
        """Take one event; True if it ended the turn (a terminal ``Finish`` now in order)."""
        arrived = time.monotonic()
        with self._cond:
            nxt = self._base + len(self.events)
            if event.seq < nxt or event.seq in self._early:
                return False
            self._early[event.seq] = event
            self._arrived[event.seq] = arrived
            ended = self._take_in_order()
            self._gap_since = (self._gap_since or arrived) if self._early else None
            self._wake()
            return ended

    def _take_in_order(self) -> bool:
        ended = False
        while self._base + len(self.events) in self._early:
            event = self._early.pop(self._base + len(self.events))
            self.events.append(event)
            ended = ended or (isinstance(event, Finish) and event.terminal)
        return ended

    def fill_gaps(self, now: float) -> bool:
        """Replace events that never came, once a later ``Finish`` is waiting behind them."""
        with self._cond:
            if self._gap_since is None or now - self._gap_since < GAP_WAIT:
                return False
            if not any(isinstance(e, Finish) for e in self._early.values()):
                return False
            last = max(self._early)
            for seq in range(self._base + len(self.events), last):
                if seq not in self._early:
                    log().error("turn %s: event %d never arrived; it is replaced by an error", self.turn_id, seq)
                    self._early[seq] = Error(
                        turn_id=self.turn_id, seq=seq, error_type="event_lost", message=f"event {seq} was lost in transit"
                    )
            ended = self._take_in_order()
            self._gap_since = None
            self._wake()
            return ended

    def end(self, error_type: str, message: str, detail: str | None = None) -> None:
        """End the turn here, after what arrived: ``Error`` + ``Finish(error)``."""
        with self._cond:
            seq = max([self._base + len(self.events) - 1, *self._early]) + 1
            last = next((e for e in reversed(self.events) if isinstance(e, Finish)), None)
            history = list(last.messages) if last is not None else []
            messages = close_open_calls(history, error_result(f"Interrupted: {message} ({detail or error_type})"))
            self.deliver(Error(turn_id=self.turn_id, seq=seq, error_type=error_type, message=message, detail=detail))
            self.deliver(Finish(turn_id=self.turn_id, seq=seq + 1, finish_reason="error", messages=messages))
            self._gap_since = time.monotonic() - GAP_WAIT
            self.fill_gaps(time.monotonic())

    def refuse(self, reply: ControlReply) -> None:
        with self._cond:
            if reply.command == "start_turn":
                self.rejection = reply
            self.rejections.append(reply)
            self._wake()

    def wake(self) -> None:
        with self._cond:
            self._wake()

    def _wake(self) -> None:
        self._cond.notify_all()
        waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_set_done, fut)
            except RuntimeError:
                pass  # that loop has closed

    # -- reading --------------------------------------------------------------------------

    @property
    def next_seq(self) -> int:
        with self._cond:
            return self._base + len(self.events)

    @property
    def finished(self) -> bool:
        with self._cond:
            return any(isinstance(e, Finish) and e.terminal for e in self.events)

    def received_at(self, seq: int) -> float | None:
        return self._arrived.get(seq)

    def _check(self) -> None:
        if self.rejection is not None:
            raise ControlRejected(self.rejection.code or "invalid", self.rejection.message)
        if self._closed():
            raise RuntimeClosedError("the Runtime has shut down")

    def wait_index(self, index: int, timeout: float | None) -> TurnEvent:
        """The event at ``index`` (0 is ``seq`` ``since``), waiting for it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while len(self.events) <= index:
                self._check()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TurnTimeout(f"turn {self.turn_id}: no event after {timeout} s")
                self._cond.wait(0.5 if remaining is None else min(remaining, 0.5))
            return self.events[index]

    def ready(self, index: int) -> asyncio.Future[None] | None:
        """None if the event at ``index`` is here; else a future of the running loop that
        completes when something arrives (or the runtime closes)."""
        with self._cond:
            if len(self.events) > index:
                return None
            self._check()
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, fut))
            return fut

    def result_at(self, end: int) -> TurnResult:
        with self._cond:
            events = self.events[:end]
        finish = events[-1]
        assert isinstance(finish, Finish)
        requests = {e.call_id: e for e in events if isinstance(e, ToolApprovalRequest)}
        errors = [e for e in events if isinstance(e, Error)]
        return TurnResult(
            turn_id=self.turn_id,
            finish_reason=finish.finish_reason,
            messages=list(finish.messages),
            usage=finish.usage,
            round=finish.round,
            pending_approvals=[requests[c] for c in finish.pending_approvals if c in requests],
            error=errors[-1] if errors and finish.terminal else None,
        )

    def finish_after(self, index: int, final: bool) -> int | None:
        """The position just after the last (terminal, if ``final``) ``Finish`` from ``index`` on."""
        with self._cond:
            found = None
            for i in range(index, len(self.events)):
                e = self.events[i]
                if isinstance(e, Finish) and (e.terminal or not final):
                    found = i + 1
            return found


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class TurnHandle:
    """A started turn, read and steered from any thread.

    ``events()`` keeps a cursor and yields up to and including the next ``Finish`` it has
    not yielded (so it ends after the final one, with or without a timeout). ``result()``
    returns the turn as of its latest ``Finish``, waiting for one if there is none yet, or
    if this handle has resumed the turn since (the last approval of a round, a stop or
    cancel of a waiting turn). After ``Finish(awaiting_approval)`` you approve and call
    either again.
    """

    def __init__(self, runtime: Runtime, stream: TurnStream) -> None:
        self.turn_id = stream.turn_id
        self._rt = runtime
        self._stream = stream
        self._cursor = 0
        self._floor = stream._base  # result() waits for a Finish with this seq or later

    @property
    def all_events(self) -> list[TurnEvent]:
        """Every event received so far, in order (a copy)."""
        with self._stream._cond:
            return list(self._stream.events)

    @property
    def rejections(self) -> list[ControlReply]:
        return list(self._stream.rejections)

    @property
    def finished(self) -> bool:
        """True once the terminal ``Finish`` has arrived."""
        return self._stream.finished

    def received_at(self, seq: int) -> float | None:
        """When (``time.monotonic()``) this process received event ``seq``, for latency figures."""
        return self._stream.received_at(seq)

    def events(self, timeout: float | None = None) -> Iterator[TurnEvent]:
        """Yield events up to and including the next ``Finish``; ``timeout`` bounds each wait."""
        while True:
            event = self._stream.wait_index(self._cursor, timeout)
            self._cursor += 1
            yield event
            if isinstance(event, Finish):
                return

    __iter__ = events

    async def aevents(self, timeout: float | None = None) -> AsyncIterator[TurnEvent]:
        """``events()`` for asyncio: the same cursor, awaited instead of blocking."""
        while True:
            ready = self._stream.ready(self._cursor)
            if ready is not None:
                try:
                    await asyncio.wait_for(ready, timeout)
                except asyncio.TimeoutError:
                    raise TurnTimeout(f"turn {self.turn_id}: no event after {timeout} s") from None
                continue
            event = self._stream.events[self._cursor]
            self._cursor += 1
            yield event
            if isinstance(event, Finish):
                return

    def __aiter__(self) -> AsyncIterator[TurnEvent]:
        return self.aevents()

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
        """The turn as of its latest ``Finish`` (see the class docstring for when it waits).

        With ``final=True`` it waits for the turn's terminal ``Finish``, whoever resumes it.
        """
        index = max(0, self._floor - self._stream._base)
        while True:
            self._stream.wait_index(index, timeout)
            end = self._stream.finish_after(index, final)
            if end is not None:
                return self._stream.result_at(end)
            index = len(self._stream.events)

    # -- steering -------------------------------------------------------------------------

    def _command(self, command: Any, timeout: float) -> ControlReply:
        future = self._rt._command(command)
        try:
            reply = future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TurnTimeout(f"no answer to {command.kind} after {timeout} s") from None
        return self._after(reply)

    def _after(self, reply: ControlReply) -> ControlReply:
        if not reply.ok:
            raise ControlRejected(reply.code or "invalid", reply.message)
        if reply.resumes_at is not None:
            self._floor = max(self._floor, reply.resumes_at)
        return reply

    def stop(self, reason: str = "stop requested", timeout: float = 10.0) -> None:
        """Stop now (idempotent; no effect once the turn has ended)."""
        if not self.finished:
            self._command(StopTurn(turn_id=self.turn_id, reason=reason), timeout)

    def cancel(self, reason: str = "cancel requested", grace: float | None = None, timeout: float = 10.0) -> None:
        """Cancel at the next safe boundary; a stop after ``grace`` seconds if given."""
        if not self.finished:
            self._command(CancelTurn(turn_id=self.turn_id, reason=reason, grace=grace), timeout)

    def approve(self, call_id: str, reason: str | None = None, timeout: float = 10.0) -> None:
        """Approve one pending call; ``ControlRejected`` says why if the turn refused."""
        self.respond([ToolApprovalResponse(call_id=call_id, approved=True, reason=reason)], timeout=timeout)

    def deny(self, call_id: str, reason: str | None = None, timeout: float = 10.0) -> None:
        """Deny one pending call; its tool message will be ``Rejected: {reason}``."""
        self.respond([ToolApprovalResponse(call_id=call_id, approved=False, reason=reason)], timeout=timeout)

    def respond(
        self,
        responses: Sequence[ToolApprovalResponse],
        *,
        deny_rest: bool = False,
        deny_reason: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        """Several decisions in one message; ``deny_rest`` denies every call still undecided."""
        command = RespondToApprovals(
            turn_id=self.turn_id, responses=list(responses), deny_rest=deny_rest, deny_reason=deny_reason
        )
        self._command(command, timeout)

    def stop_tool(self, call_id: str, reason: str = "tool stop requested", timeout: float = 10.0) -> None:
        """Stop one call; it ends interrupted and the turn goes on."""
        self._command(StopTool(turn_id=self.turn_id, call_id=call_id, reason=reason), timeout)
