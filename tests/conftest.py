"""Shared fixtures: a real scripted provider on 127.0.0.1 and a real Runtime on its own port.

Every Runtime is shut down after its test and the test fails if any process of its actor
system is left behind.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors import Runtime
from actors.lifecycle.processes import group_processes, session_processes
from actors.testing import ScriptedProvider
from messages import RetryPolicy


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


group_members = group_processes
