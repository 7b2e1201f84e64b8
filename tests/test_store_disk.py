"""Issue 30, on SQLite: a store file whose disk fills up holds its turns, and they go on once
there is room again; never a turn the caller sees ended while the file says running."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.store import open_store

from . import tools_for_tests as T
from .test_store_outages import answers, ended_as_without_an_outage, runtime, streaming

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def small_disk(where: Path, size: str = "8m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` for the block (root only), unmounted after."""
    where.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True, timeout=30)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)


def fill(disk: Path) -> Path:
    """Write one file until the disk is full; the file."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:  # unbuffered: nothing left to write at close
        block = b"\0" * 65536
        try:
            while True:
                f.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_turns_on_a_full_disk_hold_and_go_on_once_there_is_room_again(tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    with small_disk(tmp_path / "disk") as disk:
        store = str(disk / "turns.db")
        with answers(effects) as provider, runtime(provider, store) as rt:
            turns = [rt.run(f"turn {i}", tools=[T.append_key_now]) for i in range(2)]
            streaming(turns)
            filler = fill(disk)
            time.sleep(4.0)  # a full disk past the fence point: the host stops the turns' work
            for turn in turns:
                assert not turn.finished  # nothing the file does not have was reported
            filler.unlink()
            for turn in turns:
                ended_as_without_an_outage(turn, effects)
            statuses = {s.turn_id: s.status for s in open_store(store).log.summaries()}
            assert statuses == {t.turn_id: "finished" for t in turns}
