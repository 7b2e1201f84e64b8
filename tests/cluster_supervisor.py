"""A supervisor on a member node: an actor of that node's actor system that steers a turn by
id through its own node's directory, wherever the turn runs.

    GREENROOM_KEY=... python -m tests.cluster_supervisor ADDRESS:PORT stop TURN_ID [REASON]
    GREENROOM_KEY=... python -m tests.cluster_supervisor ADDRESS:PORT approve TURN_ID CALL_ID
    GREENROOM_KEY=... python -m tests.cluster_supervisor ADDRESS:PORT input TURN_ID TEXT [now]
    GREENROOM_KEY=... python -m tests.cluster_supervisor ADDRESS:PORT pause TURN_ID [now]
    GREENROOM_KEY=... python -m tests.cluster_supervisor ADDRESS:PORT resume TURN_ID [TEXT]

Run in the node's network namespace (``Cluster.supervise``): it connects to the node's admin
at ADDRESS:PORT, which creates the supervisor there (so it runs on that node, in a process
of its own), and prints one JSON line: the turn's ``ControlReply`` and where the supervisor
ran (its pid and network namespace).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from dataclasses import dataclass
from typing import Any

from actors import DIRECTORY_NAME, DirectoryActor, Supervisor
from messages import (
    ChatMessage, ControlReply, PauseTurn, RespondToApprovals, ResumeTurn, SendInput, StopTurn, ToolApprovalResponse,
)  # fmt: skip


@dataclass(frozen=True)
class Steer:
    command: Any


class SteeringSupervisor(Supervisor):
    """Sends a command to its node's directory; answers its asker with the turn's reply and where it ran."""

    def receiveMsg_Steer(self, msg: Steer, sender: Any) -> None:
        self.asker = sender
        self.send(self.createActor(DirectoryActor, globalName=DIRECTORY_NAME), msg.command)

    def receiveMsg_ControlReply(self, reply: ControlReply, sender: Any) -> None:
        where = {"pid": os.getpid(), "netns": os.readlink("/proc/self/ns/net")}
        self.send(self.asker, {"ok": reply.ok, "code": reply.code, "message": reply.message, "where": where})


def _rid() -> str:
    """A command's own id: a turn answers a request id it has answered before with the same reply."""
    return f"sup-{uuid.uuid4().hex[:16]}"


def command_of(verb: str, args: list[str]) -> Any:
    if verb == "stop":
        return StopTurn(turn_id=args[0], reason=args[1] if len(args) > 1 else "stopped by a supervisor", request_id=_rid())
    if verb == "approve":
        response = ToolApprovalResponse(call_id=args[1], approved=True)
        return RespondToApprovals(turn_id=args[0], responses=[response], request_id=_rid())
    if verb == "input":
        when = "now" if args[2:] == ["now"] else "next_call"
        return SendInput(turn_id=args[0], messages=[ChatMessage.user(args[1])], when=when, request_id=_rid())
    if verb == "pause":
        return PauseTurn(turn_id=args[0], when="now" if args[1:] == ["now"] else "next_step", request_id=_rid())
    if verb == "resume":
        messages = [ChatMessage.user(args[1])] if len(args) > 1 else None
        return ResumeTurn(turn_id=args[0], messages=messages, request_id=_rid())
    raise SystemExit(f"unknown verb {verb}")


def main(argv: list[str]) -> int:
    from thespian.actors import ActorExitRequest, ActorSystem

    from actors.wire import transport
    from tests.cluster_supervisor import Steer, SteeringSupervisor  # by module name, as the node imports them

    address, verb, rest = argv[0], argv[1], argv[2:]
    host, port = address.rsplit(":", 1)
    key = transport.load_key()
    assert key is not None, "set $GREENROOM_KEY"
    transport.install(host, key)
    asys = ActorSystem("multiprocTCPBase", {"Admin Port": int(port)}, transientUnique=True)
    supervisor = asys.createActor(SteeringSupervisor)
    answer = asys.ask(supervisor, Steer(command_of(verb, rest)), 60)
    asys.tell(supervisor, ActorExitRequest())  # n.b. no shutdown(): that would stop the node
    print(json.dumps(answer if isinstance(answer, dict) else {"error": f"no answer: {answer!r}"}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
