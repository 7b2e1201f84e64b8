"""Commands from the console to a turn, each answered with a ``ControlReply``.

Where a command goes, in this order:

- the ``Runtime`` the console runs in, when there is one: ``Runtime.control``;
- the runtime running on the store in another process (found by ``<store>.runtime.json``,
  as the command line finds it): sent to its directory over Thespian, with the key that file
  holds; its turn's answer comes back;
- no runtime runs on the store: the command is checked against the stored turn with the
  turn's own rules (an unknown call, a duplicate decision or a finished turn is refused
  here, changing nothing) and written to the store's inbox, to be applied when a runtime
  loads the turn again. The reply says so.
- a store every node reaches (PostgreSQL, ``through_store``): checked the same way, then
  written to the store's inbox, which wakes the turn's host at once (``NOTIFY``); while any
  host is live, the reply that host records beside the command is waited for and returned;
  with none, or when no host answers within the timeout (the turn's owner may have just
  been lost: its lease still holds for a few seconds, and then a live host takes the turn
  over and applies the command), the reply says the command is queued in the inbox. Such a
  command is durably queued and will be applied once: it is reported as queued (an ``ok``
  reply whose message says so, ``queued()``), never as a failure, and never as applied.

A runtime of another process that does not answer within the timeout is reported as a
refusal that says so, never as applied (``TurnTimeout``): its command was not queued.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, NamedTuple

from messages import ControlReply, Message, reply_for

from ..errors import ConfigurationError, TurnTimeout
from ..store.base import TurnStore
from ..store.files import running_runtime

__all__ = [
    "HOSTLESS", "OFFLINE", "RemoteRuntimes", "Through", "offline", "queued", "refusal", "through_store", "unanswered",
]  # fmt: skip

_QUEUED = "queued in the store's inbox, applied when"
OFFLINE = f"no runtime is running on the store: {_QUEUED} a runtime loads the turn again"
HOSTLESS = f"no host is running: {_QUEUED} a host takes the turn"


def unanswered(timeout: float) -> str:
    """The message of a command queued for live hosts none of which answered within ``timeout`` s."""
    return (
        f"no host answered within {timeout:g} s: {_QUEUED} the turn's host takes it "
        "(a lost host's turns are taken over by a live host once its lease runs out)"
    )


def queued(reply: ControlReply) -> bool:
    """True for the ``ok`` reply of a command that is in the store's inbox, not yet applied."""
    return reply.ok and _QUEUED in reply.message


def refusal(store: TurnStore, command: Message) -> ControlReply | None:
    """The refusal of ``command`` by the stored turn's rules (after the commands queued before
    it), or None if they accept it. Nothing is written."""
    from ..tools.loading import argument_problem
    from ..turn.decisions import Reply
    from ..turn.rules import TurnRules

    turn_id = getattr(command, "turn_id", "")
    try:
        state = store.log.load(turn_id)
    except KeyError:
        return reply_for(command, False, "unknown_turn", f"no turn {turn_id}")
    if state.phase == "finished":
        return reply_for(
            command, False, "turn_finished", f"turn {turn_id} has already finished ({state.finish_reason})"
        )
    rules = TurnRules(state, check_arguments=argument_problem)
    for _, queued in store.inbox.pending(turn_id):
        rules.handle(queued)
    for decision in rules.handle(command.model_copy(update={"request_id": "console"})):
        if isinstance(decision, Reply) and not decision.reply.ok:
            return decision.reply.model_copy(update={"request_id": getattr(command, "request_id", None)})
    return None


def offline(store: TurnStore, command: Message) -> ControlReply:
    """Check ``command`` against the stored turn with its rules; if they accept it, queue it."""
    refused = refusal(store, command)
    if refused is not None:
        return refused
    store.inbox.add(getattr(command, "turn_id", ""), command)
    return reply_for(command, True, None, OFFLINE)


class Through(NamedTuple):
    """What became of a command sent through the store: its reply; the id it was queued as
    (None: refused before, nothing queued); whether a host answered (False: none is live, or
    none answered in time; the command waits in the inbox)."""

    reply: ControlReply
    command_id: int | None
    by_host: bool


def through_store(store: TurnStore, command: Message, timeout: float) -> Through:
    """Send ``command`` through a store every node reaches (see the module docstring): the
    reply of the host that applied it, or (``by_host`` False) an ``ok`` reply saying it is queued."""
    refused = refusal(store, command)
    if refused is not None:
        return Through(refused, None, False)
    asked = getattr(command, "request_id", None)
    turn_id = getattr(command, "turn_id", "")
    command_id = store.inbox.add(turn_id, command.model_copy(update={"request_id": asked or f"store-{uuid.uuid4().hex[:16]}"}))
    if not store.hosts.live():
        return Through(reply_for(command, True, None, HOSTLESS), command_id, False)
    reply = store.inbox.wait_reply(command_id, timeout)
    if reply is None:
        return Through(reply_for(command, True, None, unanswered(timeout)), command_id, False)
    return Through(reply.model_copy(update={"request_id": asked}), command_id, True)


class RemoteRuntimes:
    """The runtime of another process, reached over Thespian as the command line does
    (``cluster.remote``: nothing is started or shut down here).

    One connection per runtime, kept; calls are serialised. This process's transport takes
    the first runtime's key: a runtime restarted with another key cannot be reached from
    this process, and the reply says so."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._remotes: dict[tuple[int, int], Any] = {}

    def running(self, store_path: str) -> dict[str, Any] | None:
        """How to reach the runtime running on ``store_path``, or None."""
        return running_runtime(store_path)

    def send(self, info: dict[str, Any], command: Message, timeout: float) -> ControlReply:
        from ..cluster.remote import Unreachable, connect

        with self._lock:
            where = f"the runtime (pid {info.get('pid')})"
            try:
                key = (int(info["pid"]), int(info["admin_port"]))
                remote = self._remotes.get(key)
                if remote is None:
                    remote = connect(info["host"], info["admin_port"], bytes.fromhex(info["key"]), timeout)
                    self._remotes[key] = remote
            except (Unreachable, ConfigurationError, KeyError, ValueError) as exc:
                return reply_for(command, False, "invalid", f"cannot reach {where}: {exc}")
            update: dict[str, Any] = {"request_id": f"console-{uuid.uuid4().hex[:16]}"}
            if "answer_within" in type(command).model_fields:
                update["answer_within"] = timeout  # a host that does not know the turn answers before then
            try:
                answer = remote.ask(command.model_copy(update=update), timeout)
            except Unreachable as exc:
                raise TurnTimeout(f"{where} did not answer: {exc}") from None
        if not isinstance(answer, ControlReply):
            raise TurnTimeout(f"{where} answered {type(answer).__name__}")
        return answer.model_copy(update={"request_id": getattr(command, "request_id", None)})
