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
  with none, the reply says the command waits in the inbox for a host to take the turn.

A runtime or host that does not answer within the timeout is reported as a refusal that
says so, never as applied (``TurnTimeout``).
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from messages import ControlReply, Message, reply_for

from ..errors import ConfigurationError, TurnTimeout
from ..store.base import TurnStore
from ..store.files import running_runtime

__all__ = ["HOSTLESS", "OFFLINE", "RemoteRuntimes", "Through", "offline", "refusal", "through_store"]

OFFLINE = "no runtime is running on the store: written to the store, applied when a runtime loads the turn again"
HOSTLESS = "no host is running: written to the store, applied when a host takes the turn"


def refusal(store: TurnStore, command: Message) -> ControlReply | None:
    """The refusal of ``command`` by the stored turn's rules (after the commands queued before
    it), or None if they accept it. Nothing is written."""
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
    rules = TurnRules(state)
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
    (None: refused before, nothing queued); whether a host answered (False: no host is live,
    the command waits in the inbox)."""

    reply: ControlReply
    command_id: int | None
    by_host: bool


def through_store(store: TurnStore, command: Message, timeout: float) -> Through:
    """Send ``command`` through a store every node reaches (see the module docstring).
    ``TurnTimeout`` if a host is live but none answered within ``timeout`` s."""
    refused = refusal(store, command)
    if refused is not None:
        return Through(refused, None, False)
    asked = getattr(command, "request_id", None)
    turn_id = getattr(command, "turn_id", "")
    command_id = store.inbox.add(turn_id, command.model_copy(update={"request_id": asked or "store"}))
    if not store.hosts.live():
        return Through(reply_for(command, True, None, HOSTLESS), command_id, False)
    reply = store.inbox.wait_reply(command_id, timeout)
    if reply is None:
        raise TurnTimeout(
            f"no host answered within {timeout:g} s (turn {turn_id}, command {command_id}); the command stays in "
            "the store's inbox, applied when the turn's host takes it"
        )
    return Through(reply.model_copy(update={"request_id": asked}), command_id, True)


class RemoteRuntimes:
    """The runtime of another process, reached over Thespian as the command line does.

    One external actor-system connection per runtime, kept (Thespian's ``shutdown()`` from
    here would stop that runtime); calls are serialised. This process's transport takes the
    first runtime's key: a runtime restarted with another key cannot be reached from this
    process, and the reply says so."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._systems: dict[tuple[int, int], Any] = {}

    def running(self, store_path: str) -> dict[str, Any] | None:
        """How to reach the runtime running on ``store_path``, or None."""
        return running_runtime(store_path)

    def send(self, info: dict[str, Any], command: Message, timeout: float) -> ControlReply:
        from thespian.actors import ActorSystem

        from ..cluster.directory import DirectoryActor
        from ..cluster.names import DIRECTORY_NAME
        from ..wire import transport

        with self._lock:
            try:
                transport.install(info["host"], bytes.fromhex(info["key"]))
            except (ConfigurationError, KeyError, ValueError) as exc:
                return reply_for(command, False, "invalid", f"cannot reach the runtime (pid {info.get('pid')}): {exc}")
            key = (int(info["pid"]), int(info["admin_port"]))
            asys = self._systems.get(key)
            if asys is None:
                asys = ActorSystem("multiprocTCPBase", {"Admin Port": info["admin_port"]}, transientUnique=True)
                self._systems[key] = asys
            directory = asys.createActor(DirectoryActor, globalName=DIRECTORY_NAME)
            update: dict[str, Any] = {"request_id": "console"}
            if "answer_within" in type(command).model_fields:
                update["answer_within"] = timeout  # a host that does not know the turn answers before then
            answer = asys.ask(directory, command.model_copy(update=update), timeout)
        if not isinstance(answer, ControlReply):
            raise TurnTimeout(f"the runtime (pid {info.get('pid')}) did not answer within {timeout} s")
        return answer.model_copy(update={"request_id": getattr(command, "request_id", None)})
