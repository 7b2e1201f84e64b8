"""Conversations on a Runtime: ``session()`` opens one (``conversation.Session``), ``fork()``
starts a turn (or a new session) from another turn's history up to a message or an event.

A base of ``Runtime``, over ``queries``: with a store, sessions and the histories forked
from are the store's (opened in this process on first use); without one, sessions live as
long as the Runtime, and a fork reads the history of a turn this process has a handle on.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterable
from typing import Any

from messages import ChatMessage, ControlReply, ProviderConfig, TurnEvent, TurnOptions

from ..errors import ConfigurationError, ControlRejected, UnknownSession
from ..turn.forking import ForkError, cut
from .busy import Policy
from .conversation import Compact
from .conversation import Session as Conversation
from .handle import TurnHandle
from .queries import Queries
from .session_owner import LocalOwner, StoreOwner, new_session_id
from .stream import TurnResult

__all__ = ["Sessions"]


class Sessions(Queries):
    """``session`` and ``fork``, and what ``Queries`` answers; see the module docstring."""

    _lock: threading.RLock
    run: Callable[..., TurnHandle]  # ``Runtime.run``
    attach: Callable[..., TurnHandle]  # ``Attaching.attach``

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
        store = self._need_store() if self.store_path is not None else None
        with self._lock:
            if session_id is not None and session_id in self._opened:
                return self._opened[session_id]
            if session_id is None:
                session_id = new_session_id()
                if store is not None:
                    store.sessions.create(session_id)
            elif store is not None:
                if not store.sessions.exists(session_id):
                    if not create:
                        raise UnknownSession(session_id, f"the store {self.store_path}")
                    store.sessions.create(session_id)
            elif not create:
                raise UnknownSession(session_id, "this Runtime (it has no store: sessions live as long as it does)")
            owner = StoreOwner(session_id, store.sessions, store.log) if store is not None else LocalOwner(session_id)
            given = {"tools": tools, "provider": provider, "options": options, "system": system, "requires": requires}
            conversation = Conversation(
                self.run, self._command, session_id, owner=owner, attach=self.attach if store is not None else None,
                on_busy=on_busy, max_messages=max_messages, compact=compact,
                defaults={k: v for k, v in given.items() if v is not None},
            )  # fmt: skip
            self._opened[session_id] = conversation
            return conversation

    def fork(
        self,
        turn: str | TurnHandle | TurnResult,
        at: int | None = None,
        *,
        at_seq: int | None = None,
        text: str | None = None,
        session: str | None = None,
        tools: Iterable[Any] = (),
        provider: ProviderConfig | None = None,
        options: TurnOptions | None = None,
        new_id: str | None = None,
        system: str | None = None,
        timeout: float = 10.0,
        requires: dict[str, Any] | None = None,
    ) -> TurnHandle:
        """A new turn (``new_id``, if given) from ``turn``'s history up to message ``at`` (its
        first ``at`` messages), or as it stood at its event ``at_seq`` (``forking``: the
        longest valid history it held by then); exactly one of the two. With ``text``, its
        last user message among them is replaced by ``text`` (and what followed it left out).
        The original is not touched; the new turn records where it came from
        (``ForkOrigin``: in its state and its ``TurnStarted``). With ``session``, the id of a
        session this Runtime (or its store) does not have yet, the turn is that new session's
        first turn (``runtime.session(id)`` then carries it on). ``turn`` is a turn id (its
        history and events are the store's; without a store, those of a turn still running
        here), a handle (its latest ``Finish``) or a result (``at`` only). ``ConfigurationError``
        if ``at`` is past the end of the history, or cuts a tool call from its result, or
        ``at_seq`` is not an event of the turn; ``ControlRejected("unknown_turn")`` if the
        turn is unknown."""
        turn_id = turn if isinstance(turn, str) else turn.turn_id
        if (at is None) == (at_seq is None):  # before reading anything
            raise ConfigurationError(
                f"fork turn {turn_id} at one point: give at= (a message index) or at_seq= (an event seq)"
            )
        messages, events = self._forked(turn, at_seq is not None, timeout)
        try:
            kept, origin = cut(turn_id, messages, events, at, at_seq, text)
        except ForkError as exc:
            raise ConfigurationError(str(exc)) from None
        given: dict[str, Any] = {
            "tools": tools, "provider": provider, "options": options, "system": system, "requires": requires,
        }  # fmt: skip
        if session is not None:
            chat = self._new_session(session)
            out = chat.run(kept, turn_id=new_id, timeout=timeout, forked_from=origin, **given)  # idle: a handle
            assert isinstance(out, TurnHandle)
            return out
        return self.run(kept, turn_id=new_id, timeout=timeout, forked_from=origin, **given)

    def _forked(
        self, turn: str | TurnHandle | TurnResult, by_seq: bool, timeout: float
    ) -> tuple[list[ChatMessage], list[TurnEvent]]:
        """The history forked from, and (for ``at_seq``) the turn's events."""
        if isinstance(turn, TurnResult):
            if by_seq:
                raise ConfigurationError(
                    f"fork at_seq= takes a turn id or a handle, not a result (turn {turn.turn_id})"
                )
            return list(turn.messages), []
        if isinstance(turn, TurnHandle):
            return list(turn.result(timeout).messages), turn.all_events if by_seq else []
        messages = self._history_of(turn)
        if not by_seq:
            return messages, []
        if self.store_path is not None:
            return messages, self._need_store().log.events(turn)
        stream = self._inbound.stream(turn)
        return messages, TurnHandle(self._command, stream).all_events if stream is not None else []

    def _new_session(self, session_id: str) -> Conversation:
        """A session that neither this Runtime nor its store has yet: ``ConfigurationError`` if it exists."""
        store = self._need_store().sessions if self.store_path is not None else None
        with self._lock:
            if session_id in self._opened or (store is not None and store.exists(session_id)):
                raise ConfigurationError(f"session {session_id} exists already: fork(session=) makes a new one")
            return self.session(session_id, create=True)

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
