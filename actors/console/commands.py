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

A runtime that does not answer within the timeout is reported as a refusal that says so,
never as applied.
"""

from __future__ import annotations

import threading
from typing import Any

from messages import ControlReply, Message, reply_for

from ..errors import ConfigurationError, TurnTimeout
from ..store.files import running_runtime
from ..store.sqlite import SQLiteStore

__all__ = ["OFFLINE", "RemoteRuntimes", "offline"]

OFFLINE = "no runtime is running on the store: written to the store, applied when a runtime loads the turn again"


def offline(store: SQLiteStore, command: Message) -> ControlReply:
    """Check ``command`` against the stored turn with its rules; if they accept it, queue it."""
    from ..turn.decisions import Reply
    from ..turn.rules import TurnRules

    turn_id = getattr(command, "turn_id", "")
    try:
        state = store.load(turn_id)
    except KeyError:
        return reply_for(command, False, "unknown_turn", f"no turn {turn_id}")
    if state.phase == "finished":
        return reply_for(
            command, False, "turn_finished", f"turn {turn_id} has already finished ({state.finish_reason})"
        )
    rules = TurnRules(state)
    for queued in store.pending_commands(turn_id):
        rules.handle(queued)
    for decision in rules.handle(command.model_copy(update={"request_id": "console"})):
        if isinstance(decision, Reply) and not decision.reply.ok:
            return decision.reply.model_copy(update={"request_id": getattr(command, "request_id", None)})
    store.add_command(turn_id, command)
    return reply_for(command, True, None, OFFLINE)


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
            answer = asys.ask(directory, command.model_copy(update={"request_id": "console"}), timeout)
        if not isinstance(answer, ControlReply):
            raise TurnTimeout(f"the runtime (pid {info.get('pid')}) did not answer within {timeout} s")
        return answer.model_copy(update={"request_id": getattr(command, "request_id", None)})
