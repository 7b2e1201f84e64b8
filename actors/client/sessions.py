"""Conversations on a Runtime: ``session()`` opens one (``conversation.Session``), ``fork()``
starts a turn from another turn's history up to a message.

A base of ``Runtime``, over ``queries``: with a store, sessions and the histories forked
from are the store's (opened in this process on first use); without one, sessions live as
long as the Runtime, and a fork reads the history of a turn this process has a handle on.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterable
from typing import Any

from messages import ChatMessage, ControlReply, ProviderConfig, TurnOptions

from ..errors import ConfigurationError, ControlRejected, UnknownSession
from ..turn.history import history_problems
from .busy import Policy
from .conversation import Compact, new_session_id
from .conversation import Session as Conversation
from .handle import TurnHandle
from .stream import TurnResult
from .queries import Queries

__all__ = ["Sessions"]


class Sessions(Queries):
    """``session`` and ``fork``, and what ``Queries`` answers; see the module docstring."""

    _lock: threading.RLock
    run: Callable[..., TurnHandle]  # ``Runtime.run``

    def _command(self, command: Any) -> concurrent.futures.Future[ControlReply]:
        raise NotImplementedError

    @property
    def _opened(self) -> dict[str, Conversation]:
        """The sessions opened on this Runtime, by id (made on first use, under ``_lock``)."""
        opened: dict[str, Conversation] | None = self.__dict__.get("_conversations")
        if opened is None:
            opened = self.__dict__["_conversations"] = {}
        return opened

    def session(
        self,
        session_id: str | None = None,
        *,
        create: bool = False,
        on_busy: Policy = "reject",
        max_messages: int | None = None,
        compact: Compact | None = None,
        tools: Iterable[Any] | None = None,
        provider: ProviderConfig | None = None,
        options: TurnOptions | None = None,
        system: str | None = None,
        requires: dict[str, Any] | None = None,
    ) -> Conversation:
        """A conversation (``conversation.Session``): ``session_id=None`` makes a new one; an id
        opens that session (with a store: as the store has it, whichever process wrote it),
        or makes it with ``create=True``; an unknown id raises ``UnknownSession``. The same
        object is returned for the same id while this Runtime runs (the arguments apply when
        it is made). The keyword arguments are the session's defaults (``Session``)."""
        self._running()
        sessions = self._need_store().sessions if self.store_path is not None else None
        with self._lock:
            if session_id is not None and session_id in self._opened:
                return self._opened[session_id]
            turns: list[str] = []
            messages: list[ChatMessage] = []
            if session_id is None:
                session_id = new_session_id()
                if sessions is not None:
                    sessions.create(session_id)
            elif sessions is not None:
                try:
                    record = sessions.load(session_id)
                    turns, messages = record.turns, record.messages
                except KeyError:
                    if not create:
                        raise UnknownSession(session_id, f"the store {self.store_path}") from None
                    sessions.create(session_id)
            elif not create:
                raise UnknownSession(session_id, "this Runtime (it has no store: sessions live as long as it does)")
            given = {"tools": tools, "provider": provider, "options": options, "system": system, "requires": requires}
            conversation = Conversation(
                self.run, self._command, session_id, turns=turns, messages=messages, store=sessions, on_busy=on_busy,
                max_messages=max_messages, compact=compact, defaults={k: v for k, v in given.items() if v is not None},
            )  # fmt: skip
            self._opened[session_id] = conversation
            return conversation

    def fork(
        self,
        turn: str | TurnHandle | TurnResult,
        at: int,
        *,
        text: str | None = None,
        tools: Iterable[Any] = (),
        provider: ProviderConfig | None = None,
        options: TurnOptions | None = None,
        new_id: str | None = None,
        system: str | None = None,
        timeout: float = 10.0,
        requires: dict[str, Any] | None = None,
    ) -> TurnHandle:
        """A new turn (``new_id``, if given) from ``turn``'s history up to message ``at`` (its
        first ``at`` messages); with ``text``, its last user message among them replaced by
        ``text`` (and what followed it left out). The original is not touched. ``turn`` is a
        turn id (its history is the store's; without a store, the one of a turn still running
        here), a handle (its latest ``Finish``) or a result. ``ConfigurationError`` if ``at`` is past the end of the history, or cuts a tool
        call from its result; ``ControlRejected("unknown_turn")`` if the turn is unknown."""
        turn_id = turn if isinstance(turn, str) else turn.turn_id
        if isinstance(turn, TurnResult):
            messages = list(turn.messages)
        elif isinstance(turn, TurnHandle):
            messages = list(turn.result(timeout).messages)
        else:
            messages = self._history_of(turn)
        if not 0 < at <= len(messages):
            raise ConfigurationError(
                f"turn {turn_id} has {len(messages)} messages: at={at} is past the end of its history "
                f"(0 < at <= {len(messages)})"
            )
        kept = messages[:at]
        if text is not None:
            users = [i for i, m in enumerate(kept) if m.role == "user"]
            if not users:
                raise ConfigurationError(f"turn {turn_id} has no user message before message {at} to replace")
            kept = [*kept[: users[-1]], ChatMessage.user(text)]
        problems = history_problems(kept)
        if problems:
            raise ConfigurationError(f"turn {turn_id} cannot be forked at message {at}: {problems[0]}")
        return self.run(
            kept, tools=tools, provider=provider, options=options, turn_id=new_id, system=system,
            timeout=timeout, requires=requires,
        )  # fmt: skip

    def _history_of(self, turn_id: str) -> list[ChatMessage]:
        """The turn's history as the store has it (with a store), else as its stream here has it."""
        self._running()
        if self.store_path is not None:
            try:
                return list(self._need_store().log.load(turn_id).messages)
            except KeyError:
                raise ControlRejected("unknown_turn", f"no turn {turn_id} in the store {self.store_path}") from None
        stream = self._inbound.stream(turn_id)
        end = stream.current_finish(0, False) if stream is not None else None
        if stream is None or end is None:
            raise ControlRejected(
                "unknown_turn", f"this Runtime has no run of turn {turn_id} (without a store, pass fork the turn's handle "
                "or result)",
            )  # fmt: skip
        return stream.result_at(end).messages
