"""The command inbox over SQL: commands other processes queue for turns, and the replies the
turns record for them (``base.Inbox``).

A command is applied exactly once: a turn reads the commands waiting for it (``pending``),
applies each, and the write of the effect marks it taken and records its reply in the same
transaction (``settle``, called by ``log``). A host that dies between the read and the
write leaves the command waiting, for whoever carries the turn on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from messages import ControlReply, Message, decode, encode
from messages.codec import CodecError

from .database import Database

__all__ = ["COMMANDS", "REPLIES", "SQLInbox", "settle"]

COMMANDS = "greenroom_commands"  # notified with the turn id a command was queued for
REPLIES = "greenroom_replies"  # notified with the id of the command whose reply was recorded


def settle(db: Database, taken: Sequence[int], replies: Sequence[tuple[int, bytes]]) -> None:
    """Inside a turn's write: the commands it applied leave the inbox, their replies are recorded."""
    now = time.time()
    for command_id in taken:
        db.run("UPDATE commands SET taken_at = ? WHERE id = ? AND taken_at IS NULL", (now, command_id))
    for command_id, reply in replies:
        db.run("UPDATE commands SET reply = ?, replied_at = ? WHERE id = ?", (reply, now, command_id))
        db.notify(REPLIES, str(command_id))


class SQLInbox:
    """An ``Inbox`` over a ``Database``; a backend that can notify overrides ``listen`` and
    ``wait_reply``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, turn_id: str, command: Message) -> int:
        db = self.db
        with db.tx(f"queue a command for turn {turn_id}"):
            row = db.run(
                "INSERT INTO commands (turn_id, data, created_at) VALUES (?, ?, ?) RETURNING id",
                (turn_id, encode(command), time.time()),
            ).fetchone()
            db.notify(COMMANDS, turn_id)
        return int(row[0])

    def pending(self, turn_id: str) -> list[tuple[int, Message]]:
        rows = self.db.rows(
            "SELECT id, data FROM commands WHERE turn_id = ? AND taken_at IS NULL ORDER BY id",
            (turn_id,),
            f"read the commands of turn {turn_id}",
        )
        return _commands(rows)

    def answer(self, command_id: int, reply: ControlReply) -> None:
        with self.db.tx(f"record the reply to command {command_id}"):
            settle(self.db, [command_id], [(command_id, encode(reply))])

    def reply_to(self, command_id: int) -> ControlReply | None:
        rows = self.db.rows("SELECT reply FROM commands WHERE id = ? AND reply IS NOT NULL", (command_id,))
        if not rows:
            return None
        reply = decode(bytes(rows[0][0]))
        return reply if isinstance(reply, ControlReply) else None

    def wait_reply(self, command_id: int, timeout: float) -> ControlReply | None:
        """(Here by looking every 0.1 s; a store that can notify waits for its notification.)"""
        deadline = time.monotonic() + timeout
        while (reply := self.reply_to(command_id)) is None and time.monotonic() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        return reply

    def waiting(self) -> list[str]:
        return [r[0] for r in self.db.rows("SELECT DISTINCT turn_id FROM commands WHERE taken_at IS NULL")]

    def prune(self, older_than: float) -> int:
        """Drop the commands taken more than ``older_than`` seconds ago (their senders have had
        their replies), and those never taken whose turn has finished as long ago."""
        cutoff = time.time() - older_than
        with self.db.tx("prune the command inbox"):
            done = self.db.run(
                "DELETE FROM commands WHERE (taken_at IS NOT NULL AND taken_at < ?) OR (taken_at IS NULL"
                " AND created_at < ? AND turn_id IN (SELECT turn_id FROM turns WHERE status = 'finished'))",
                (cutoff, cutoff),
            )
            return int(done.rowcount or 0)

    def listen(self, on_command: Callable[[str], None], on_state: Callable[[bool], None]) -> bool:
        return False  # a backend that can notify says so

    def close(self) -> None:
        """Stop listening, if this inbox listens."""


def _commands(rows: Sequence[Any]) -> list[tuple[int, Message]]:
    out = []
    for command_id, data in rows:
        try:
            out.append((int(command_id), decode(bytes(data))))
        except CodecError:
            continue  # a command that cannot be read is skipped, not retried for ever
    return out
