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

Who decides: the session's single owner (``session_owner``). Each input (a message, a
turn's end, a withdrawal) is one ``decide``: with a store, one transaction on the session's
row, whichever process sends it, so messages from several processes are ordered and each
is decided on the state the one before left; the decision's turn appended, its queue and
its running turn are written in that same transaction. What a decision says to do (start a
turn, send input, stop a turn) is carried out after it, by the process that took it: a turn
that another process started is reached through ``attach``. A turn's end is settled by the
first process to see it: the one that started it (a thread per turn waits for its end), or
any process that decides next (the store's turn log says the turn has ended). A message that
waits is stored with the session (with a store), so any process sees it and may withdraw
it; the process that settles the turn before it starts it, with that message's own
arguments if it is its own, else with its session's defaults.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from messages import ChatMessage, ForkOrigin, ProviderConfig, TurnOptions, new_turn_id

from ..errors import ConfigurationError, ControlRejected, TurnTimeout
from ..logs import logger
from ..store.base import SessionOwned
from . import busy
from .busy import Policy
from .deciding import POLL, Attach, Deciding, StartTurn, _Message, _state, _View
from .handle import SendCommand, TurnHandle
from .inputs import History, history
from .session_owner import Owner, bounded, new_session_id
from .stream import TurnResult

__all__ = ["Compact", "Queued", "Session", "bounded", "new_session_id"]

Compact = Callable[[list[ChatMessage]], list[ChatMessage]]

log = logger("greenroom.sessions")


class Session(Deciding):
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
        owner: Owner,
        attach: Attach | None = None,
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
        self._attach = attach  # and how it reaches a turn another process started
        self._owner = owner
        self._defaults = dict(defaults or {})
        self._lock = threading.RLock()  # taken before any decision (and so before the store's lock)
        self._changed = threading.Condition(self._lock)
        self._handles: dict[str, TurnHandle] = {}  # the session's turns this process started, until settled
        self._waiting: dict[str, _Message] = {}  # this process's messages, until started or withdrawn
        self._view = _View()
        self._refresh()

    # -- what it holds ----------------------------------------------------------------------

    @property
    def history(self) -> list[ChatMessage]:
        """The session's history: what its ended turns added, in order (a copy)."""
        return list(self._refresh().messages)

    @property
    def turns(self) -> list[str]:
        """The ids of the session's ended turns, in order."""
        return list(self._refresh().turns)

    @property
    def running(self) -> TurnHandle | None:
        """The handle of the turn running on the session (started by any process), or None."""
        with self._lock:
            running = self._refresh().running
            if running is None:
                return None
            try:
                return self._handle_of(running)
            except ControlRejected:  # its start is being carried out elsewhere
                return None

    @property
    def queued(self) -> list[str]:
        """The ids of the messages waiting (``enqueue``, from any process), the next first."""
        return list(self._refresh().queued)

    def wait_idle(self, timeout: float = 30.0) -> list[ChatMessage]:
        """Wait until no turn runs and no message waits; the history then. ``TurnTimeout``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                view = self._refresh()
                if view.running is None and not view.queued:
                    return list(view.messages)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TurnTimeout(f"session {self.session_id} was still busy after {timeout:g} s")
                self._changed.wait(min(left, POLL) if self._owner.durable else left)

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
        message = _Message(turn_id or new_turn_id(), history(messages), run)
        mid = message.message_id

        def decide(owned: SessionOwned) -> list[Any]:
            new, decisions = busy.on_message(_state(owned), mid, policy)
            if any(isinstance(d, busy.Enqueue) for d in decisions):
                owned.queue.append((mid, message.messages))
            return self._carry(owned, new, decisions, mine=message)

        with self._lock:
            while True:
                decisions = self._decide(decide)
                steer = next((d for d in decisions if isinstance(d, busy.Steer)), None)
                if steer is None:
                    break
                handle = self._steer(steer.turn_id, message)
                if handle is not None:
                    self._carry_out(decisions, mid)  # what settling found on the way
                    return handle  # else the turn had just ended (and is settled): decide again
            for d in decisions:
                if isinstance(d, busy.Refuse):
                    self._carry_out(decisions, mid)
                    raise ControlRejected(d.code, d.message)
                if isinstance(d, busy.Enqueue):
                    self._waiting[mid] = message
            self._carry_out(decisions, mid)
            if message.handle is None and mid in self._waiting:
                return Queued(self, message)
            if message.error is not None:
                raise message.error
            assert message.handle is not None
            return message.handle

    def withdraw(self, message_id: str) -> None:
        """Withdraw a waiting message (this process's or another's): it will not start.
        ``ControlRejected("started")`` if its turn has started, ``ControlRejected("unknown_message")``
        if no such message waits."""

        def decide(owned: SessionOwned) -> list[Any]:
            new, decisions = busy.on_withdraw(_state(owned), message_id)
            if any(isinstance(d, busy.Refuse) for d in decisions) and message_id in owned.turns:
                return [busy.Refuse("started", _started(message_id))]
            return self._carry(owned, new, decisions)

        with self._lock:
            decisions = self._decide(decide)
            for d in decisions:
                if isinstance(d, busy.Refuse):
                    raise ControlRejected(d.code, d.message)
            message = self._waiting.pop(message_id, None)
            if message is not None:
                message.error = ControlRejected("withdrawn", f"message {message_id} was withdrawn")
                message.started.set()
            self._changed.notify_all()

    def __repr__(self) -> str:
        return f"<Session {self.session_id} turns={len(self._view.turns)} running={self._view.running}>"


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
        return self._session._await_start(self._message, timeout)

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
