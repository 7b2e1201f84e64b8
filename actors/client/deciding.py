"""How a ``Session`` decides and carries out its decisions (the base of ``conversation.Session``).

Every input is one ``decide`` of the session's owner (``session_owner``): first the ends of
its turns that have ended are settled (``busy.on_end``: the ended turn appended, the next
message started), then the input's rule; inside it, only what must be in the decision is
done (append an ended turn's messages, give a starting turn its opening); the rest (start a
turn, stop one, fail a message) is carried out after it, by this process, under the
session's lock. A turn that another process started is reached through ``attach``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from messages import ChatMessage

from ..errors import ConfigurationError, ControlRejected, GreenroomError, TurnTimeout
from ..logs import logger
from ..store.base import SessionOwned
from ..turn.history import history_problems
from . import busy
from .busy import SessionState
from .handle import TurnHandle
from .session_owner import Owner, bounded

__all__ = ["POLL", "Deciding"]

POLL = 0.05  # seconds between looks at the store while waiting for what another process does
StartTurn = Callable[..., TurnHandle]  # ``Runtime.run``
Attach = Callable[[str], TurnHandle]  # ``Runtime.attach``

log = logger("greenroom.sessions")


@dataclass
class _Message:
    """A message of the session's, until its turn has started (or it was withdrawn)."""

    message_id: str
    messages: list[ChatMessage]
    run: dict[str, Any]
    started: threading.Event = field(default_factory=threading.Event)
    handle: TurnHandle | None = None
    error: BaseException | None = None


@dataclass(frozen=True)
class _Begin:
    """Start the message's turn, given ``given`` (the opening, then the message)."""

    message: _Message
    given: list[ChatMessage]


@dataclass(frozen=True)
class _Failed:
    """The message could not start (its opening failed): it ends adding nothing."""

    message: _Message
    error: BaseException


@dataclass(frozen=True)
class _View:
    """The session as this process last saw it decided."""

    turns: list[str] = field(default_factory=list)
    messages: list[ChatMessage] = field(default_factory=list)
    running: str | None = None
    dropping: str | None = None
    queued: list[str] = field(default_factory=list)


def _state(owned: SessionOwned) -> SessionState:
    return SessionState(owned.running, tuple(m for m, _ in owned.queue), owned.dropping)


class Deciding:
    """The deciding half of a ``Session``; its attributes are set by ``Session.__init__``."""

    session_id: str
    compact: Callable[[list[ChatMessage]], list[ChatMessage]] | None
    max_messages: int | None
    _start_turn: StartTurn
    _attach: Attach | None
    _owner: Owner
    _defaults: dict[str, Any]
    _lock: threading.RLock
    _changed: threading.Condition
    _handles: dict[str, TurnHandle]
    _waiting: dict[str, _Message]
    _view: _View

    # -- deciding (under ``_lock``; with a store, each ``decide`` one transaction) ---------------

    def _decide(self, rule: Callable[[SessionOwned], list[Any]]) -> list[Any]:
        """Settle what has ended, then ``rule``, in one decision; the decisions to carry out."""

        def decide(owned: SessionOwned) -> list[Any]:
            out = self._settle_in(owned)
            out += rule(owned)
            queued = [m for m, _ in owned.queue]
            self._view = _View(list(owned.turns), list(owned.messages), owned.running, owned.dropping, queued)
            return out

        with self._lock:
            decisions = self._owner.decide(decide)
            view = self._view
            for turn_id in [t for t in self._handles if t not in (view.running, view.dropping)]:
                del self._handles[turn_id]  # settled
            self._changed.notify_all()
            return decisions

    def _refresh(self) -> _View:
        """Settle what has ended (by any process); the session as it is now."""
        with self._lock:
            self._carry_out(self._decide(lambda owned: []))
            return self._view

    def _settle_in(self, owned: SessionOwned) -> list[Any]:
        """Inside a decision: the ends of the session's turns that have ended, in order."""
        out: list[Any] = []
        for _ in range(len(owned.queue) + 2):
            ended = [
                (t, whole)
                for t in (owned.dropping, owned.running)
                if t and (whole := self._ended(t, owned)) is not None
            ]
            for turn_id, whole in ended:
                new, decisions = busy.on_end(_state(owned), turn_id)
                out += self._carry(owned, new, decisions, ended={turn_id: whole})
            if not ended:
                break
        return out

    def _ended(self, turn_id: str, owned: SessionOwned) -> list[ChatMessage] | None:
        """The turn's whole history if it has ended terminally: as its handle here has it, or the store."""
        handle = self._handles.get(turn_id)
        if handle is not None and not handle.finished:
            return None  # it runs, or is queued (written nowhere yet): not "never started"
        if handle is not None:
            try:
                return list(handle.result(0, final=True).messages)
            except GreenroomError:
                pass
        return self._owner.ended(turn_id, owned.decided_at)

    def _carry(
        self,
        owned: SessionOwned,
        new: SessionState,
        decisions: list[busy.Decision],
        *,
        mine: _Message | None = None,
        ended: dict[str, list[ChatMessage] | None] | None = None,
    ) -> list[Any]:
        """Inside a decision: take the rules' new state and what only the decision can do (append
        an ended turn, give a starting turn its opening); the rest, to carry out after it."""
        waiting = dict(owned.queue)
        owned.running, owned.dropping = new.running, new.dropping
        owned.queue = [(m, waiting[m]) for m in new.queued]
        out: list[Any] = []
        for d in decisions:
            if isinstance(d, busy.Append):
                whole = (ended or {}).get(d.turn_id)
                if whole:  # None or empty: a message that could not start, or never started, adds nothing
                    owned.append(d.turn_id, whole[owned.opening :])
            elif isinstance(d, busy.Start):
                message = (
                    mine if mine is not None and mine.message_id == d.message_id else self._waiting.get(d.message_id)
                )
                if message is None:  # another process's: started here, with this session's defaults
                    message = _Message(d.message_id, waiting[d.message_id], {**self._defaults, "timeout": 10.0})
                try:
                    opening = self._opening(owned.messages, message.run.get("system"))
                except Exception as exc:
                    if message is mine:
                        raise  # the caller's own message: nothing was decided
                    new2, more = busy.on_end(_state(owned), d.message_id)
                    out += [_Failed(message, exc), *self._carry(owned, new2, more, ended={d.message_id: None})]
                    continue
                owned.opening = len(opening)
                out.append(_Begin(message, opening + message.messages))
            else:
                out.append(d)
        return out

    def _opening(self, history: list[ChatMessage], system: str | None) -> list[ChatMessage]:
        """What the next turn is given of the history: compacted, then bounded; its system message first."""
        messages = list(history)
        if self.compact is not None:
            messages = list(self.compact(messages))
            problems = history_problems(messages)
            if problems:
                raise ConfigurationError(
                    f"session {self.session_id}: compact returned an invalid history: {problems[0]}"
                )
        messages = bounded(messages, self.max_messages)
        if system is not None:
            messages = [ChatMessage.system(system), *(m for m in messages if m.role != "system")]
        return messages

    # -- carrying out what was decided --------------------------------------------------------

    def _carry_out(self, decisions: list[Any], mine: str | None = None) -> None:
        """Stop, start, fail what the decision said, in order (under ``_lock``)."""
        for d in decisions:
            if isinstance(d, busy.Stop):
                try:
                    self._reach(d.turn_id).stop("rolled back: the session has a new message")
                except ControlRejected:  # it ended meanwhile: dropped all the same (busy.on_end)
                    pass
            elif isinstance(d, _Begin):
                self._begin(d, raise_errors=d.message.message_id == mine)
            elif isinstance(d, _Failed):
                self._failed(d.message, d.error)

    def _begin(self, begin: _Begin, raise_errors: bool) -> None:
        message = begin.message
        run = {k: v for k, v in message.run.items() if k not in ("system", "timeout")}
        try:
            handle = self._start_turn(begin.given, turn_id=message.message_id, timeout=message.run["timeout"], **run)
        except BaseException as exc:
            self._failed(message, exc)
            mid = message.message_id
            self._carry_out(self._decide(lambda owned: self._carry(owned, *busy.on_end(_state(owned), mid), ended={})))
            if raise_errors:
                raise
            log().warning("session %s: message %s could not start: %s", self.session_id, mid, exc)
            return
        self._handles[handle.turn_id] = handle
        self._waiting.pop(message.message_id, None)
        message.handle = handle
        message.started.set()
        threading.Thread(
            target=self._watch, args=(handle,), name=f"greenroom session {self.session_id}", daemon=True
        ).start()

    def _failed(self, message: _Message, error: BaseException) -> None:
        self._waiting.pop(message.message_id, None)
        message.error = error
        message.started.set()

    def _steer(self, turn_id: str, message: _Message) -> TurnHandle | None:
        """Send the message into the running turn, now; None if that turn had just ended."""
        try:
            handle = self._handle_of(turn_id)
            handle.send_input(message.messages, when="now", timeout=message.run["timeout"])
        except ControlRejected as exc:
            if exc.code not in ("turn_finished", "unknown_turn"):
                raise
            if exc.code == "turn_finished":
                whole = list(handle.result(message.run["timeout"], final=True).messages)
                self._decide(
                    lambda owned: self._carry(owned, *busy.on_end(_state(owned), turn_id), ended={turn_id: whole})
                )
            else:  # its start is still being carried out by another process
                self._changed.wait(POLL)
            return None
        message.handle = handle
        return handle

    def _handle_of(self, turn_id: str) -> TurnHandle:
        """A handle on one of the session's turns: this process's, or attached to (with a store)."""
        handle = self._handles.get(turn_id)
        if handle is not None:
            return handle
        if self._attach is None:
            raise ControlRejected("unknown_turn", f"turn {turn_id} is not running in this Runtime")
        return self._attach(turn_id)

    def _reach(self, turn_id: str, timeout: float = 10.0) -> TurnHandle:
        """``_handle_of``, waiting up to ``timeout`` s for a turn whose start another process is carrying out."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._handle_of(turn_id)
            except ControlRejected as exc:
                if exc.code != "unknown_turn" or self._attach is None or time.monotonic() >= deadline:
                    raise
            self._changed.wait(POLL)

    def _watch(self, handle: TurnHandle) -> None:
        """Wait for the turn's terminal end, then settle it (a thread per running turn)."""
        try:
            handle.result(None, final=True)
        except GreenroomError as exc:  # the runtime closed, the reader was dropped, ...
            log().info("session %s: stopped following turn %s: %s", self.session_id, handle.turn_id, exc)
            return
        try:
            self._refresh()  # settles it (its handle has its end), and starts what waited
        except GreenroomError as exc:
            log().warning("session %s: turn %s ended, not settled yet: %s", self.session_id, handle.turn_id, exc)

    def _await_start(self, message: _Message, timeout: float | None) -> TurnHandle:
        """The handle of the message's turn once it has started, here or in another process."""
        mid = message.message_id
        deadline = None if timeout is None else time.monotonic() + timeout
        while not message.started.wait(POLL if deadline is None else max(0.0, min(POLL, deadline - time.monotonic()))):
            with self._lock:
                view = self._refresh()
                if not message.started.is_set() and mid not in view.queued:
                    if mid == view.running or mid in view.turns:  # another process started it
                        try:
                            message.handle = self._handle_of(mid)
                            message.started.set()
                        except ControlRejected:
                            pass  # not written yet
                    else:
                        self._failed(message, ControlRejected("withdrawn", f"message {mid} was withdrawn"))
            if deadline is not None and time.monotonic() >= deadline and not message.started.is_set():
                raise TurnTimeout(f"message {mid} had not started after {timeout:g} s")
        if message.error is not None:
            raise message.error
        assert message.handle is not None
        return message.handle
