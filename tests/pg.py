"""The PostgreSQL server of the store tests: one per test session, started when a test first needs it.

``require_postgres()`` fails the test when ``GREENROOM_CI`` is set (CI sets it; ``.ci/run``
installs the server) and skips it, loudly, on a developer's machine without PostgreSQL's
server binaries (``actors.testing.postgres.binaries``; ``$GREENROOM_POSTGRES_BIN`` names
their directory). The server wants a password over TCP, ``PASSWORD``, which every store
URL of the tests carries: so a test can look for it where it must never be.
"""

from __future__ import annotations

import os
import secrets

import pytest

from actors.testing.postgres import binaries

PASSWORD = "pw-" + secrets.token_hex(12)

WHY = (
    "the PostgreSQL store tests need PostgreSQL's server (initdb, pg_ctl; Debian: apt-get install postgresql); "
    "NOT RUN: the PostgreSQL store was not tested"
)


_LOOK: tuple[str, str] = ("", "")


def require_postgres(found: tuple[str, str] | None = _LOOK, ci: bool | None = None) -> None:
    """Fail in CI, skip loudly elsewhere, when PostgreSQL's server is not installed (``found``:
    what ``binaries()`` says, looked up by default; ``ci``: whether ``$GREENROOM_CI`` is set)."""
    if found is _LOOK:
        found = binaries()
    if found is not None:
        return
    if bool(os.environ.get("GREENROOM_CI")) if ci is None else ci:
        pytest.fail(WHY)
    pytest.skip(WHY)
