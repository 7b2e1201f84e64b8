"""The store's command inbox: a command leaves it with the write that applied it; taken commands
are pruned after a while, pending ones stay."""

from __future__ import annotations

from pathlib import Path

from actors.store import open_store
from actors.store.base import TurnWrite
from messages import StopTurn


def test_taken_commands_are_pruned_and_pending_ones_are_kept(tmp_path: Path) -> None:
    store = open_store(tmp_path / "turns.db")
    try:
        taken = store.inbox.add("turn_a", StopTurn(turn_id="turn_a"))
        assert [i for i, _ in store.inbox.pending("turn_a")] == [taken]
        store.log.write(TurnWrite("turn_a", taken=(taken,)))  # the write that applied it
        assert store.inbox.pending("turn_a") == []
        store.inbox.add("turn_b", StopTurn(turn_id="turn_b"))  # its turn may not run yet: never dropped
        assert store.inbox.prune(older_than=3600) == 0, "taken moments ago: kept"
        assert store.inbox.prune(older_than=0) == 1
        assert [type(c).__name__ for _, c in store.inbox.pending("turn_b")] == ["StopTurn"]
        assert store.inbox.prune(older_than=0) == 0
    finally:
        store.close()
