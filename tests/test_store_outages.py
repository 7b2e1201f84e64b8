"""Issue 30: durable turns ride out an outage of their own store.

Each test has a PostgreSQL server of its own, which it crashes (``pg_ctl stop -m immediate``)
and starts again, or pauses (SIGSTOP). The scripted model's answer depends only on the
turn's history, so a turn asked again after an outage is answered the same. What must hold:
every turn ends as it would have without the outage, no call runs twice, each turn's events
are numbered 0..n-1 with no gap and no duplicate, every history is valid, and a command is
answered only once its effect is stored.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import Runtime, TurnHandle
from actors.store import open_store
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.testing.postgres import ThrowawayPostgres
from actors.testing.script import Reply
from actors.testing.server import Request
from actors.turn.history import history_problems
from messages import RetryPolicy, TextDelta, ToolApprovalRequest

from . import tools_for_tests as T
from .pg import PASSWORD, require_postgres

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[1]
ANSWER = " ".join(f"w{i}" for i in range(30))  # streamed in 30 chunks, 0.1 s apart: 3 s


@pytest.fixture
def pg() -> Iterator[ThrowawayPostgres]:
    """A server of this test's own, to crash and pause."""
    require_postgres()
    with ThrowawayPostgres(password=PASSWORD) as server:
        yield server


def answers(effects: Path, tool: str = "append_key_now") -> ScriptedProvider:
    """A model that calls ``tool`` for a user's message and streams ``ANSWER`` (3 s) for a
    tool's result: the same reply for the same history, however often it is asked."""

    def respond(request: Request) -> Reply:
        if request.messages[-1]["role"] == "user":
            return use_tools(call(tool, {"path": str(effects)}))
        return say(ANSWER, delay=0.1)

    return ScriptedProvider(responder=respond)


def runtime(provider: ScriptedProvider, url: str) -> Runtime:
    return Runtime(provider.provider(retry=RetryPolicy(max_attempts=1)), store=url, hosts=2, tool_processes=2)


def ended_as_without_an_outage(turn: TurnHandle, effects: Path) -> None:
    result = turn.result(timeout=120, final=True)
    seqs = [e.seq for e in turn.all_events]
    assert (result.finish_reason, result.text, seqs) == ("stop", ANSWER, list(range(len(seqs))))
    assert history_problems(result.messages) == []
    assert effects.read_text().splitlines().count(f"{turn.turn_id}:0:call_1") == 1, "its call ran once"


def streaming(turns: list[TurnHandle]) -> None:
    for turn in turns:
        turn.wait_for(lambda e: isinstance(e, TextDelta), timeout=60)


@pytest.mark.parametrize("outage", [0.3, 2.0, 10.0, pytest.param(60.0, marks=pytest.mark.heavy)])
def test_durable_turns_streaming_through_a_database_crash_end_as_they_would_have(
    pg: ThrowawayPostgres, tmp_path: Path, outage: float
) -> None:
    effects = tmp_path / "effects"
    with answers(effects) as provider, runtime(provider, pg.url()) as rt:
        turns = [rt.run(f"turn {i}", tools=[T.append_key_now]) for i in range(4)]
        streaming(turns)
        pg.crash()
        time.sleep(outage)  # the outage itself, not a wait for something to happen
        pg.start()
        for turn in turns:
            ended_as_without_an_outage(turn, effects)


def test_a_paused_database_holds_the_turns_and_they_go_on_when_it_resumes(pg: ThrowawayPostgres, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    with answers(effects) as provider, runtime(provider, pg.url()) as rt:
        turns = [rt.run(f"turn {i}", tools=[T.append_key_now]) for i in range(3)]
        streaming(turns)
        stopped = pg.pause()  # it answers TCP and nothing else: calls to it hang
        try:
            time.sleep(4.0)  # past the fence point: the hosts stop the turns' work
        finally:
            pg.resume(stopped)
        for turn in turns:
            ended_as_without_an_outage(turn, effects)


def test_a_stop_sent_while_the_database_is_down_is_answered_once_stored_and_a_new_turn_starts_then(
    pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    with answers(effects) as provider, runtime(provider, pg.url()) as rt:
        stopping, going = rt.run("stop me", tools=[T.append_key_now]), rt.run("go", tools=[T.append_key_now])
        streaming([stopping, going])
        pg.crash()
        answered: list[float] = []
        stop = threading.Thread(target=lambda: (stopping.stop("during the outage", timeout=90),
                                                answered.append(time.monotonic())))  # fmt: skip
        stop.start()
        late = rt.run("started during the outage", tools=[T.append_key_now])
        time.sleep(3.0)  # an outage past the fence point
        assert answered == [], "the stop was answered before the store had it"
        back = time.monotonic()
        pg.start()
        stop.join(90)
        assert answered and answered[0] > back
        result = stopping.result(timeout=60, final=True)
        assert result.finish_reason == "stopped" and history_problems(result.messages) == []
        ended_as_without_an_outage(going, effects)
        ended_as_without_an_outage(late, effects)
    store = open_store(pg.url())
    assert store.log.load(stopping.turn_id).finish_reason == "stopped"  # what the caller was told is stored


def test_an_approval_sent_while_the_database_is_down_is_recorded_and_applied_once(
    pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    with answers(effects, tool="append_key") as provider, runtime(provider, pg.url()) as rt:
        turn = rt.run("pay", tools=[T.append_key])
        request = turn.wait_for(lambda e: isinstance(e, ToolApprovalRequest), timeout=60)
        assert turn.result(timeout=60).finish_reason == "awaiting_approval"
        pg.crash()
        approved: list[float] = []
        approve = threading.Thread(target=lambda: (turn.approve(request.call_id, timeout=90),  # type: ignore[attr-defined]
                                                   approved.append(time.monotonic())))  # fmt: skip
        approve.start()
        time.sleep(3.0)
        assert approved == [], "the approval was answered before the store had it"
        back = time.monotonic()
        pg.start()
        approve.join(90)
        assert approved and approved[0] > back
        ended_as_without_an_outage(turn, effects)


def test_notifications_come_back_after_their_connection_drops_and_a_queued_command_is_applied(
    pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    """The host's ``LISTEN`` connection is ended by the server; an approval queued by the
    command line meanwhile still reaches the turn (the host polls until it listens again)."""
    effects = tmp_path / "effects"
    with answers(effects, tool="append_key") as provider, runtime(provider, pg.url()) as rt:
        turn = rt.run("pay", tools=[T.append_key])
        assert turn.result(timeout=60).finish_reason == "awaiting_approval"
        ended = _sql(pg, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'")
        assert ended and all(row[0] for row in ended)
        out = subprocess.run(
            [sys.executable, "-m", "actors.cli", "approve", turn.turn_id, "call_1", "--store", pg.url(), "--json"],
            capture_output=True, text=True, cwd=ROOT, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        ended_as_without_an_outage(turn, effects)


def _sql(pg: ThrowawayPostgres, statement: str) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(pg.url(), autocommit=True) as conn:
        return list(conn.execute(statement).fetchall())


# -- a failover of the database itself --------------------------------------------------------------


def failover_url(primary: ThrowawayPostgres, standby: ThrowawayPostgres) -> str:
    """libpq's multi-host URL: the first of the two that accepts writes."""
    return primary.url().replace(
        f"{primary.host}:{primary.port}", f"{primary.host}:{primary.port},{standby.host}:{standby.port}"
    ) + "?target_session_attrs=read-write"


def test_durable_turns_go_on_when_the_primary_dies_and_its_synchronous_standby_is_promoted(
    pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    standby = pg.standby(synchronous=True)  # every commit is on the standby before it is acknowledged
    url = failover_url(pg, standby)
    with answers(effects) as provider, runtime(provider, url) as rt:
        turns = [rt.run(f"turn {i}", tools=[T.append_key_now]) for i in range(4)]
        streaming(turns)
        pg.crash()
        standby.promote()
        for turn in turns:
            ended_as_without_an_outage(turn, effects)
    store = open_store(url)
    assert [s.status for s in store.log.summaries()] == ["finished"] * 4
