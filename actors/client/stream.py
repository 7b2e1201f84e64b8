"""The events of one turn as this process receives them: ordered, complete, awaitable.

The pump thread delivers events into a ``TurnStream`` in any order; the stream puts them
back in ``seq`` order, drops duplicates, and wakes its readers, whether they wait with a
timeout (threads) or on a future of their event loop (asyncio).

Guarantees:

- events are read in ``seq`` order, each once; a run of events ends with one ``Finish``;
- the history is whole: ``Finish`` events carry what is new since the previous one, and
  the stream joins them (``TurnResult.messages`` is always the whole history);
- flow control: with a ``window``, the stream tells the turn's host (``consumed(seq)``)
  each time its readers have read half a window more, and says where they are
  (``unread_from``) whenever it asks again, so a reader that stops reading holds at most a
  window of events here (``held``), each as its bytes until it is read (``records``); a
  reader dropped by the host (``reader_dropped``) raises ``ReaderDropped`` once it has read
  what came;
- a gap is asked for again: an event still missing ``GAP_WAIT`` seconds after a later one
  came is asked of the host (``resend``, a ``Subscribe`` from there; again every
  ``GAP_WAIT``); a stream that has heard nothing for ``QUIET`` seconds asks likewise (its
  host may have let go of it when a partition outlasted ``deliver_within``);
- a reader never waits for ever on a turn that cannot go on: an event still missing after
  ``LOST_AFTER`` is replaced by an ``Error(event_lost)`` once a later ``Finish`` shows the
  run ended; a lost host ends the turn with ``Error(host_lost)`` + ``Finish(error)``,
  with a tool message for every call it left open; a closed runtime raises
  ``RuntimeClosedError`` in every reader still waiting.
"""

from __future__ import annotations

import asyncio
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from messages import (
    ChatMessage,
    ControlReply,
    Error,
    Finish,
    ToolApprovalRequest,
    ToolFinished,
    TurnEvent,
    Usage,
    extend_history,
    host_lost,
)
from messages.events import FinishReason

from ..errors import ControlRejected, ReaderDropped, RuntimeClosedError, TurnTimeout
from ..logs import logger
from ..providers.formats import WireApi, messages_as
from ..turn.history import close_open_calls
from ..turn.reorder import Reorder
from ..turn.results import error_result
from .records import EventRecords, Record

__all__ = ["GAP_WAIT", "LOST_AFTER", "QUIET", "TurnResult", "TurnStream", "wake_all"]

GAP_WAIT = 1.0  # seconds a missing event may take to arrive before it is asked for again
LOST_AFTER = 30.0  # seconds after which one still missing is given up, once a later Finish is here
QUIET = 30.0  # seconds of silence after which a stream of a turn not ended asks for what follows

Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]  # an asyncio reader's future


log = logger("greenroom.runtime")


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

    def messages_as(self, api: WireApi) -> Any:
        """The history in a provider's wire format (``"openai"`` or ``"anthropic"``); ``run()``
        takes it back as the history of a new turn."""
        return messages_as(self.messages, api)


class TurnStream:
    """The events of one turn in this process, in order. Thread-safe."""

    def __init__(
        self,
        turn_id: str,
        since: int = 0,
        closed: Callable[[], bool] = lambda: False,
        window: int | None = None,
        consumed: Callable[[int], None] = lambda seq: None,
        resend: Callable[[int, int], None] = lambda seq, unread_from: None,
    ) -> None:
        self.turn_id = turn_id
        self._closed = closed
        self._cond = threading.Condition(threading.RLock())
        self._base = since  # the seq of events[0]
        self.events = EventRecords(turn_id, since)  # in order; compact, decoded when read (``records``)
        self._arrived = array("d")  # when each of ``events`` arrived (time.monotonic())
        self._order: Reorder[tuple[str, Record]] = Reorder(since)  # (kind, record) by seq
        self._gap_since: float | None = None
        self._resend = resend
        self._asked_at = time.monotonic()  # when the missing events were last asked for
        self.asked = self.held_most = 0  # how many times they were asked for; the most ever ``held``
        self._heard = self._asked_at  # when the last event arrived
        self._finished = False  # a terminal Finish is in ``events``
        self.ended = threading.Event()  # the same, for whoever outlives the stream (its finalizer)
        self._history: list[ChatMessage] = []  # the whole history as of the last Finish in events
        self._history_at: dict[int, int] = {}  # index of a Finish in events -> history length then
        self.window = window
        self._consumed = consumed
        self._read = 0  # events[:_read] were read
        self._reported = since  # the host was told seq < _reported were read
        self._dropped: str | None = None  # why the host dropped this reader
        self._waiters: list[Waiter] = []
        self.host: Any = None  # the address of the turn's host, where known (``routing``)
        self.host_id: str | None = None  # and its id, ``node/slot``
        self.moving: str | None = None  # why its host let it go, while it is followed to where it goes on
        self.admitted: str | None = None  # its host's answer to its start: "running" or "queued"
        self.rejection: ControlReply | None = None  # the turn's StartTurn was refused
        self.rejections: list[ControlReply] = []

    # -- delivery (pump thread) -----------------------------------------------------------

    def deliver(self, event: TurnEvent, wake: bool = True) -> bool:
        """Take one event; True if it ended the turn (a terminal ``Finish`` now in order).
        With ``wake=False`` the readers are not woken: the caller calls ``wake()`` once it
        has delivered the rest of a batch."""
        return self.deliver_record(event.seq, event.kind, event, wake)

    def deliver_record(self, seq: int, kind: str, record: Record, wake: bool = True) -> bool:
        """``deliver`` for an event as its record (``records.batch_records``): kept as it is."""
        arrived = self._heard = time.monotonic()
        with self._cond:
            ready = self._order.add(seq, (kind, record))
            if not ready:
                if seq in self._order.early:
                    self._gap_since = self._gap_since or arrived
                    self._count_held()
                return False  # early, a duplicate, or one already read
            ended = self._append(ready, arrived)
            self._gap_since = (self._gap_since or arrived) if self._order.waiting else None
            if wake:
                self._wake()
            return ended

    def _append(self, ready: list[tuple[str, Record]], arrived: float) -> bool:
        ended = False
        for kind, event in ready:
            if isinstance(event, Finish):
                if event.history_from > len(self._history):  # cannot happen: the first one is whole
                    log().error("turn %s: a Finish starts its history at %d of %d", self.turn_id,
                                event.history_from, len(self._history))  # fmt: skip
                extend_history(self._history, event)
                self._history_at[len(self.events)] = len(self._history)
                ended = ended or event.terminal
            self.events.append(event, kind)
            self._arrived.append(arrived)
        if ended:
            self._finished = True
            self.ended.set()
        self._count_held()
        return ended

    def _count_held(self) -> None:
        self.held_most = max(self.held_most, len(self.events) - self._read + len(self._order.early))

    def fill_gaps(self, now: float) -> bool:
        """Ask again for events missing ``GAP_WAIT``; replace those missing ``LOST_AFTER``,
        once a later ``Finish`` is waiting behind them. True if that ended the turn."""
        if self._gap_since is None:  # no gap; read without the lock, which is safe because only
            if self._finished or self._dropped or now - max(self._heard, self._asked_at) < QUIET:  # the pump
                return False  # thread (deliver, fill_gaps, lost) writes it
            with self._cond:
                self._asked_at = now
                self._ask_again()
            return False
        with self._cond:
            if self._gap_since is None or now - self._gap_since < GAP_WAIT:
                return False
            if now - self._gap_since < LOST_AFTER:
                if now - self._asked_at >= GAP_WAIT:
                    self._asked_at = now
                    log().warning("turn %s: event %d is late; asked for again", self.turn_id, self._order.next)
                    self._ask_again()
                return False
            if not any(isinstance(e, Finish) for _, e in self._order.early.values()):
                return False

            def lost(seq: int) -> tuple[str, Record]:
                log().error("turn %s: event %d never arrived; it is replaced by an error", self.turn_id, seq)
                return "error", Error(
                    turn_id=self.turn_id, seq=seq, error_type="event_lost", message=f"event {seq} was lost in transit"
                )

            ended = self._append(self._order.fill_gaps(lost), now)
            self._gap_since = None
            self._wake()
            return ended

    def _ask_again(self) -> None:
        """Ask the host for what follows the last event in order, saying where the readers
        are (``unread_from``), so that the answer never holds more than the window unread."""
        self.asked += 1
        self._resend(self._order.next, self.unread_from)

    def lost(self, detail: str, error_type: str = "host_lost") -> None:
        """End the turn here, after what arrived: its host was lost (``messages.host_lost``),
        or its store could not be reached for too long (``error_type="store_unavailable"``),
        with a tool message for every call the history left open."""
        with self._cond:
            seq = max([self._order.next - 1, *self._order.early]) + 1
            results: dict[str, list[str]] = {}
            if self._base == 0:  # every ToolFinished of the turn is here
                for e in self.events.of_kind("tool_finished"):
                    if isinstance(e, ToolFinished):
                        results.setdefault(e.call_id, []).append(e.content)
            interrupted = error_result(f"Interrupted: Agent run lost ({detail})")
            history = close_open_calls(self._history, interrupted, results)
            for event in host_lost(self.turn_id, seq, detail, history, error_type):
                self.deliver(event)
            self._gap_since = time.monotonic() - LOST_AFTER
            self.fill_gaps(time.monotonic())

    def drop(self, why: str) -> None:
        """The host stopped sending to this reader: readers raise ``ReaderDropped`` once they
        have read what came."""
        with self._cond:
            self._dropped = why
            self._wake()

    def refuse(self, reply: ControlReply) -> None:
        with self._cond:
            if reply.command == "start_turn":
                self.rejection = reply
            self.rejections.append(reply)
            self._wake()

    def wake(self, later: list[Waiter] | None = None) -> None:
        """Wake the readers; with ``later``, the asyncio readers' futures are put there, for
        ``wake_all`` to complete with one callback per event loop."""
        with self._cond:
            self._wake(later)

    def _wake(self, later: list[Waiter] | None = None) -> None:
        self._cond.notify_all()
        waiters, self._waiters = self._waiters, []
        if later is not None:
            later.extend(waiters)
        else:
            wake_all(waiters)

    # -- reading --------------------------------------------------------------------------

    @property
    def next_seq(self) -> int:
        with self._cond:
            return self._order.next

    @property
    def unread_from(self) -> int:
        """The seq of the first event the readers have not read (a window counts from it)."""
        with self._cond:
            return self._base + self._read

    @property
    def held(self) -> int:
        """How many events are held here that the readers have not read: those in order
        past the read point and those that came early (at most the window, if one is set)."""
        with self._cond:
            return len(self.events) - self._read + len(self._order.early)

    @property
    def dropped(self) -> str | None:
        return self._dropped

    @property
    def finished(self) -> bool:
        """True once the terminal ``Finish`` is in order (a flag: reading it costs nothing)."""
        return self._finished

    def received_at(self, seq: int) -> float | None:
        index = seq - self._base
        return self._arrived[index] if 0 <= index < len(self._arrived) else None

    def _check(self) -> None:
        if self.rejection is not None:
            raise ControlRejected(self.rejection.code or "invalid", self.rejection.message)
        if self._dropped is not None:
            raise ReaderDropped(self._dropped)
        if self._closed():
            raise RuntimeClosedError("the Runtime has shut down")

    def _note_read(self, upto: int) -> None:
        """Readers have read ``events[:upto]``; tell the host each half window (under the lock)."""
        if upto <= self._read:
            return
        self._read = upto
        if self.window is not None and self._base + upto - self._reported >= max(1, self.window // 2):
            self._reported = self._base + upto
            self._consumed(self._reported - 1)

    def take(self, index: int) -> TurnEvent:
        """The event at ``index``, which is here; it counts as read."""
        with self._cond:
            self._note_read(index + 1)
            return self.events[index]

    def wait_index(self, index: int, timeout: float | None) -> TurnEvent:
        """The event at ``index`` (0 is ``seq`` ``since``), waiting for it; it counts as read."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._note_read(min(index, len(self.events)))  # a reader waiting at index has done with those before
            while len(self.events) <= index:
                self._check()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TurnTimeout(f"turn {self.turn_id}: no event after {timeout} s")
                self._cond.wait(0.5 if remaining is None else min(remaining, 0.5))
            self._note_read(index + 1)
            return self.events[index]

    def ready(self, index: int) -> asyncio.Future[None] | None:
        """None if the event at ``index`` is here; else a future of the running loop that
        completes when something arrives (or the runtime closes)."""
        with self._cond:
            if len(self.events) > index:
                return None
            self._note_read(len(self.events))  # a reader waiting at index has done with those before
            self._check()
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, fut))
            return fut

    def current_finish(self, floor: int, final: bool) -> int | None:
        """If the turn's events so far end with a ``Finish`` (terminal if ``final``) at or after
        position ``floor``, the position just after it: the turn is as that ``Finish`` says.
        None while the turn has moved on since its latest ``Finish`` (or made none yet)."""
        with self._cond:
            if not self.events or len(self.events) <= floor or not self.events.is_model(-1):
                return None  # a Finish is kept as its model: one kept as bytes is not one
            last = self.events[-1]
            if isinstance(last, Finish) and (last.terminal or not final):
                self._note_read(len(self.events))
                return len(self.events)
            return None

    def result_at(self, end: int) -> TurnResult:
        with self._cond:
            finish = self.events[end - 1]
            asked = self.events.of_kind("tool_approval_request", end)
            errors = [e for e in self.events.of_kind("error", end) if isinstance(e, Error)]
            history = self._history[: self._history_at[end - 1]]
        assert isinstance(finish, Finish)
        requests = {e.call_id: e for e in asked if isinstance(e, ToolApprovalRequest) and e.child_turn_id is None}
        return TurnResult(
            turn_id=self.turn_id,
            finish_reason=finish.finish_reason,
            messages=history,
            usage=finish.usage,
            round=finish.round,
            pending_approvals=[requests[c] for c in finish.pending_approvals if c in requests],
            error=errors[-1] if errors and finish.terminal else None,
        )


def wake_all(waiters: list[Waiter]) -> None:
    """Complete the futures of asyncio readers, with one thread-safe callback per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for loop, fut in waiters:
        by_loop.setdefault(loop, []).append(fut)
    for loop, futs in by_loop.items():
        try:
            loop.call_soon_threadsafe(_set_done, futs)
        except RuntimeError:
            pass  # that loop has closed


def _set_done(futs: list[asyncio.Future[None]]) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_result(None)
