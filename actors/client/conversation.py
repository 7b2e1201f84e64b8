"""Sessions: a conversation that carries its turns, one at a time, and what it does when a
message comes while a turn runs.

``runtime.session()`` makes a ``Session``; ``session.run(text)`` starts a turn on the
session's history so far and, when that turn ends (terminally: ``stop``, ``length``,
``stopped``, ``cancelled``, ``error``, ``max_rounds``, ``budget_exceeded``), appends what it
added: its new messages and everything the turn said and did, so a stopped or failed turn
contributes its valid, interrupted history. A turn waiting for an approval or paused has
not ended: the session is busy until it does.

What a message does while a turn runs is its policy (``on_busy``), decided by the pure
rules of ``busy`` (their table is there and in ``docs/turns.md``): ``reject`` refuses it
(``ControlRejected("busy")``), ``enqueue`` keeps it for the next turn (``Queued``, which can
be withdrawn while it waits), ``interrupt`` sends it into the running turn now
(``SendInput(when="now")``), ``rollback`` stops the running turn, drops its messages and
starts one from the history as it was before it.

With a store the session is durable: each ended turn is appended to the store (``sessions``
in ``store.base``) before the session counts it, so ``runtime.session(id)`` in another
process, on another node, or after this one was killed, has the same history. Messages
waiting (``enqueue``) are held in this process only.

Who orders the messages: one ``Session`` object per session id and Runtime, whose lock
serializes them in this process, and a thread per running turn that waits for its end.
This is not yet the single owner actor the design asks for: two processes writing to one
session at the same time are not ordered between them (each ended turn is appended whole,
in the order they end; ``SessionConflict`` is resolved by reading the store again).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from messages import ChatMessage, ForkOrigin, ProviderConfig, TurnOptions, new_turn_id

from ..errors import ConfigurationError, ControlRejected, GreenroomError, TurnTimeout
from ..logs import logger
from ..store.base import SessionLog
from ..store.sessions import SessionConflict
from ..turn.history import history_problems
from . import busy
from .busy import Policy, SessionState
from .handle import SendCommand, TurnHandle
from .inputs import History, history
from .stream import TurnResult

__all__ = ["Compact", "Queued", "Session", "bounded", "new_session_id"]

Compact = Callable[[list[ChatMessage]], list[ChatMessage]]
StartTurn = Callable[..., TurnHandle]  # ``Runtime.run``

log = logger("greenroom.sessions")


def new_session_id() -> str:
    """A fresh, unique session id."""
    return "session_" + uuid.uuid4().hex[:16]


def bounded(messages: list[ChatMessage], max_messages: int | None) -> list[ChatMessage]:
    """The most recent part of ``messages`` that a turn is given: at most ``max_messages``,
    beginning at a user message (so no tool call is cut from its result); ``None``: all."""
    if max_messages is None or len(messages) <= max_messages:
        return list(messages)
    for i in range(len(messages) - max_messages, len(messages)):
        if messages[i].role == "user":
            return list(messages[i:])
    return []


@dataclass
class _Message:
    """A message of the session's, until its turn has started (or it was withdrawn)."""

    message_id: str
    messages: list[ChatMessage]
    run: dict[str, Any]
    started: threading.Event
    handle: TurnHandle | None = None
    error: BaseException | None = None


class Session:
    """A conversation: its turns in order, and its history (see the module docstring).

    Thread-safe; one object per session id and Runtime (``runtime.session(id)`` returns the
    same one again). ``on_busy`` is the default policy of ``run``; ``max_messages`` bounds
    what each turn is given (the most recent messages, from a user message on; default
    ``None``: the whole history), after ``compact`` (a function of the history that returns
    a shorter one, run before each turn starts; default none). Neither changes the history
    the session keeps. ``run``'s other keyword arguments (``tools``, ``provider``,
    ``options``, ``system``, ``requires``) given here are the defaults of every turn."""

    def __init__(
        self,
        start: StartTurn,
        command: SendCommand,
        session_id: str,
        *,
        turns: Sequence[str] = (),
        messages: Sequence[ChatMessage] = (),
        store: SessionLog | None = None,
        on_busy: Policy = "reject",
        max_messages: int | None = None,
        compact: Compact | None = None,
        defaults: dict[str, Any] | None = None,
    ) -> None:
        _check_policy(on_busy)
        if max_messages is not None and max_messages < 1:
            raise ConfigurationError(f"max_messages must be at least 1 (or None: no bound), not {max_messages!r}")
        self.session_id = session_id
        self.on_busy: Policy = on_busy
        self.max_messages = max_messages
        self.compact = compact
        self._start_turn = start  # the Runtime's run
        self._command = command  # and how it sends a command to a turn
        self._store = store
        self._defaults = dict(defaults or {})
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._state = SessionState()
        self._turns = list(turns)
        self._messages = list(messages)
        self._handles: dict[str, tuple[TurnHandle, int]] = {}  # running or rolled back: (handle, opening's length)
        self._waiting: dict[str, _Message] = {}

    # -- what it holds ----------------------------------------------------------------------

    @property
    def history(self) -> list[ChatMessage]:
        """The session's history: what its ended turns added, in order (a copy)."""
        self._settle()
        with self._lock:
            return list(self._messages)

    @property
    def turns(self) -> list[str]:
        """The ids of the session's ended turns, in order."""
        self._settle()
        with self._lock:
            return list(self._turns)

    @property
    def running(self) -> TurnHandle | None:
        """The handle of the turn running on the session, or None."""
        self._settle()
        with self._lock:
            running = self._state.running
            return self._handles[running][0] if running in self._handles else None

    @property
    def queued(self) -> list[str]:
        """The ids of the messages waiting (``enqueue``), the next first."""
        with self._lock:
            return list(self._state.queued)

    def wait_idle(self, timeout: float = 30.0) -> list[ChatMessage]:
        """Wait until no turn runs and no message waits; the history then. ``TurnTimeout``."""
        with self._idle:
            if not self._idle.wait_for(lambda: self._state.running is None and not self._state.queued, timeout):
                raise TurnTimeout(f"session {self.session_id} was still busy after {timeout:g} s")
            return list(self._messages)

    # -- messages ---------------------------------------------------------------------------

    def run(
        self,
        messages: History,
        *,
        on_busy: Policy | None = None,
        tools: Iterable[Any] | None = None,
        provider: ProviderConfig | None = None,
        options: TurnOptions | None = None,
        turn_id: str | None = None,
        system: str | None = None,
        timeout: float = 10.0,
        requires: dict[str, Any] | None = None,
        forked_from: ForkOrigin | None = None,
    ) -> TurnHandle | Queued:
        """A new message: a turn on the session's history, or what ``on_busy`` (this call's,
        else the session's) says while a turn runs. Returns the turn's handle (``interrupt``:
        the running turn's), or a ``Queued`` for a message that waits; ``reject`` raises
        ``ControlRejected("busy")``. The other arguments are ``Runtime.run``'s; ``turn_id``
        is the id of the turn this message starts (and of the message while it waits);
        ``forked_from``, what ``Runtime.fork(session=)`` records."""
        policy = on_busy or self.on_busy
        _check_policy(policy)
        given = {"tools": tools, "provider": provider, "options": options, "system": system, "requires": requires}
        given["forked_from"] = forked_from
        run = {**self._defaults, **{k: v for k, v in given.items() if v is not None}, "timeout": timeout}
        message = _Message(turn_id or new_turn_id(), history(messages), run, threading.Event())
        self._settle()
        with self._lock:
            while True:
                self._state, decisions = busy.on_message(self._state, message.message_id, policy)
                if not any(isinstance(d, busy.Steer) for d in decisions):
                    break
                handle = self._steer(message)
                if handle is not None:
                    return handle  # else the turn had just ended (and is settled): decide again
            for d in decisions:
                if isinstance(d, busy.Refuse):
                    raise ControlRejected(d.code, d.message)
                if isinstance(d, busy.Enqueue):
                    self._waiting[message.message_id] = message
                    return Queued(self, message)
                if isinstance(d, busy.Stop):
                    try:
                        self._handles[d.turn_id][0].stop("rolled back: the session has a new message", timeout)
                    except ControlRejected:  # it ended meanwhile: dropped all the same (busy.on_end)
                        pass
                if isinstance(d, busy.Start):
                    self._start(message, raise_errors=True)
            assert message.handle is not None
            return message.handle

    def withdraw(self, message_id: str) -> None:
        """Withdraw a waiting message: it will not start. ``ControlRejected("started")`` if its
        turn has started, ``ControlRejected("unknown_message")`` if no such message waits."""
        with self._lock:
            state, decisions = busy.on_withdraw(self._state, message_id)
            for d in decisions:
                if isinstance(d, busy.Refuse):
                    code = "started" if message_id in self._turns else d.code
                    raise ControlRejected(code, d.message if code == d.code else _started(message_id))
            self._state = state
            message = self._waiting.pop(message_id)
            message.error = ControlRejected("withdrawn", f"message {message_id} was withdrawn")
            message.started.set()
            self._idle.notify_all()

    # -- carrying out the rules' decisions ----------------------------------------------------

    def _steer(self, message: _Message) -> TurnHandle | None:
        """Send the message into the running turn, now; None if that turn had just ended."""
        running = self._state.running
        assert running is not None
        handle = self._handles[running][0]
        try:
            handle.send_input(message.messages, when="now", timeout=message.run["timeout"])
        except ControlRejected as exc:
            if exc.code != "turn_finished":
                raise
            self._ended(running, handle.result(message.run["timeout"], final=True))
            return None
        message.handle = handle
        return handle

    def _start(self, message: _Message, raise_errors: bool = False) -> None:
        """Start the message's turn on the history as it is now (under the lock)."""
        run = dict(message.run)
        system, timeout = run.pop("system", None), run.pop("timeout")
        try:
            opening = self._opening()  # the caller's compact may raise: the message fails, the session goes on
            if system is not None:
                opening = [ChatMessage.system(system), *(m for m in opening if m.role != "system")]
            handle = self._start_turn(opening + message.messages, turn_id=message.message_id, timeout=timeout, **run)
        except BaseException as exc:
            message.error = exc
            message.started.set()
            self._state, more = busy.on_end(self._state, message.message_id)  # as if it had ended, adding nothing
            for d in more:
                if isinstance(d, busy.Start):
                    self._start(self._waiting.pop(d.message_id))
            self._idle.notify_all()
            if raise_errors:
                raise
            log().warning("session %s: message %s could not start: %s", self.session_id, message.message_id, exc)
            return
        self._handles[handle.turn_id] = (handle, len(opening))
        message.handle = handle
        message.started.set()
        threading.Thread(
            target=self._watch, args=(handle,), name=f"greenroom session {self.session_id}", daemon=True
        ).start()

    def _opening(self) -> list[ChatMessage]:
        """What the next turn is given of the history: compacted, then bounded."""
        messages = list(self._messages)
        if self.compact is not None:
            messages = list(self.compact(messages))
            problems = history_problems(messages)
            if problems:
                raise ConfigurationError(
                    f"session {self.session_id}: compact returned an invalid history: {problems[0]}"
                )
        return bounded(messages, self.max_messages)

    def _watch(self, handle: TurnHandle) -> None:
        """Wait for the turn's terminal end, then settle it (a thread per running turn)."""
        try:
            result = handle.result(None, final=True)
        except GreenroomError as exc:  # the runtime closed, the reader was dropped, ...
            log().info("session %s: stopped following turn %s: %s", self.session_id, handle.turn_id, exc)
            return
        self._ended(handle.turn_id, result)

    def _settle(self) -> None:
        """Settle every turn whose terminal end has arrived (its watcher may not have run yet)."""
        with self._lock:
            for turn_id, (handle, _) in list(self._handles.items()):
                if handle.finished:
                    try:
                        result = handle.result(0, final=True)
                    except GreenroomError:
                        continue  # its watcher will settle it, or say why it cannot
                    self._ended(turn_id, result)

    def _ended(self, turn_id: str, result: TurnResult) -> None:
        with self._lock:
            if turn_id not in self._handles:
                return  # settled already
            self._state, decisions = busy.on_end(self._state, turn_id)
            _, opening = self._handles.pop(turn_id)
            for d in decisions:
                if isinstance(d, busy.Append):
                    self._append(turn_id, result.messages[opening:])
                elif isinstance(d, busy.Start):
                    self._start(self._waiting.pop(d.message_id))
            self._idle.notify_all()

    def _append(self, turn_id: str, added: list[ChatMessage]) -> None:
        """Record the ended turn: in the store first (where there is one), then here."""
        if self._store is not None:
            try:
                self._store.append(self.session_id, len(self._turns), turn_id, added)
            except SessionConflict:  # another process appended meanwhile: theirs first, then ours
                record = self._store.load(self.session_id)
                self._turns, self._messages = list(record.turns), list(record.messages)
                self._store.append(self.session_id, len(self._turns), turn_id, added)
        self._turns.append(turn_id)
        self._messages.extend(added)

    def __repr__(self) -> str:
        return f"<Session {self.session_id} turns={len(self._turns)} running={self._state.running}>"


class Queued:
    """A message waiting on a busy session (``on_busy="enqueue"``) for the turn it will start."""

    def __init__(self, session: Session, message: _Message) -> None:
        self._session = session
        self._message = message
        self.turn_id = self.message_id = message.message_id

    @property
    def started(self) -> bool:
        return self._message.handle is not None

    def withdraw(self) -> None:
        """See ``Session.withdraw``."""
        self._session.withdraw(self.message_id)

    def handle(self, timeout: float | None = None) -> TurnHandle:
        """The handle of its turn once it has started (``TurnTimeout`` if not within ``timeout``);
        raises ``ControlRejected("withdrawn")`` if it was withdrawn, and why it could not start."""
        if not self._message.started.wait(timeout):
            raise TurnTimeout(f"message {self.message_id} had not started after {timeout:g} s")
        if self._message.error is not None:
            raise self._message.error
        assert self._message.handle is not None
        return self._message.handle

    def result(self, timeout: float | None = None, *, final: bool = False) -> TurnResult:
        """Its turn's result (``TurnHandle.result``), once it has started."""
        return self.handle(timeout).result(timeout, final=final)

    def __repr__(self) -> str:
        return f"<Queued {self.message_id} started={self.started}>"


def _check_policy(policy: str) -> None:
    if policy not in busy.BUSY_POLICIES:
        raise ConfigurationError(f"on_busy must be one of {', '.join(busy.BUSY_POLICIES)}, not {policy!r}")


def _started(message_id: str) -> str:
    return f"message {message_id} has already started its turn: stop it instead"
