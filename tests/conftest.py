"""Shared fixtures: a real scripted provider on 127.0.0.1 and a real Runtime on its own port.

Every Runtime is shut down after its test and the test fails if any process of its actor
system is left behind.

``store_location`` is a fresh turn store for each test, once on each backend: a SQLite file
in ``tmp_path``, and a new database on the session's PostgreSQL server (``postgres``, one
throwaway server started when a test first needs it; see ``tests/pg.py``). Its ids are
``[sqlite]`` and ``[postgres]``; ``-m "not postgres"`` leaves the second out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import Runtime
from actors.lifecycle.processes import group_processes, session_processes
from actors.testing import ScriptedProvider
from actors.testing.postgres import ThrowawayPostgres
from messages import RetryPolicy

from .pg import PASSWORD, require_postgres


@pytest.fixture
def provider() -> Iterator[ScriptedProvider]:
    with ScriptedProvider() as p:
        yield p


@pytest.fixture
def fast_retry() -> RetryPolicy:
    return RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.05)


@pytest.fixture
def runtime(provider: ScriptedProvider, fast_retry: RetryPolicy) -> Iterator[Runtime]:
    rt = Runtime(provider.provider(retry=fast_retry), hosts=1, tool_processes=1).start()
    try:
        yield rt
    finally:
        rt.close()
        assert rt.admin_sid is not None
        assert session_processes(rt.admin_sid) == [], "the Runtime left processes behind"


@pytest.fixture(scope="session")
def postgres() -> Iterator[ThrowawayPostgres]:
    """One PostgreSQL server for the whole session (about 10 s to start), wanting ``PASSWORD``."""
    require_postgres()
    with ThrowawayPostgres(password=PASSWORD) as server:
        yield server


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.integration])])
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store: a SQLite file's path, or the URL (with its password) of a new database."""
    if request.param == "sqlite":
        return str(tmp_path / "turns.db")
    server: ThrowawayPostgres = request.getfixturevalue("postgres")
    return server.create_database(f"t_{uuid.uuid4().hex[:16]}")


group_members = group_processes
