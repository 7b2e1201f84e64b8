"""The store's command inbox is pruned: taken commands go after a while, pending ones stay."""

from __future__ import annotations

from pathlib import Path

from actors.store import open_store
from messages import StopTurn


def test_taken_commands_are_pruned_and_pending_ones_are_kept(tmp_path: Path) -> None:
    store = open_store(tmp_path / "turns.db")
    try:
        taken = store.add_command("turn_a", StopTurn(turn_id="turn_a"))
        assert [i for i, _ in store.take_commands("turn_a")] == [taken]
        store.add_command("turn_b", StopTurn(turn_id="turn_b"))  # its turn may not run yet: never dropped
        assert store.prune_commands(older_than=3600) == 0, "taken moments ago: kept"
        assert store.prune_commands(older_than=0) == 1
        assert [type(c).__name__ for c in store.pending_commands("turn_b")] == ["StopTurn"]
        assert store.prune_commands(older_than=0) == 0
    finally:
        store.close()
