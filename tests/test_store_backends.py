"""Stores on both backends, bad inputs: an unreachable database, a newer schema, a password.

An unreachable database at start names the URL without its password and what failed
(``open_store``, ``Runtime(store=...)``, ``greenroom turns``, ``greenroom console``,
``greenroom node``); a
store written by a newer greenroom is refused, saying so, on SQLite and PostgreSQL; the
password of a store's URL appears in no message on the wire, no log line, no error, no
stored row and no output of the command line. And the rule that CI fails, never skips,
when PostgreSQL's server is missing.
"""

from __future__ import annotations

import getpass
import json

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors import Runtime, StoreError
from actors.lifecycle.processes import free_port, session_processes
from actors.store import open_store
from actors.store.base import STORE_SCHEMA, is_url
from actors.store.urls import connectable, keep, redacted
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.testing.postgres import ThrowawayPostgres
from messages import RetryPolicy

from . import tools_for_tests as T
from .pg import PASSWORD, WHY, require_postgres
from .stores import append, save, sql
from .wire import can_capture, capture

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("GREENROOM_")} | {"PYTHONPATH": str(ROOT)}


def greenroom(*args: str, env: dict[str, str] = ENV) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )


# -- a URL's password ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown", "password"),
    [
        ("postgresql://ann:s3cret@db:5432/turns", "postgresql://ann@db:5432/turns", "s3cret"),
        ("postgresql://ann:p%40ss%3Aw@db2/turns", "postgresql://ann@db2/turns", "p@ss:w"),
        ("postgres://ann@db3/t?password=s3cret&sslmode=require", "postgres://ann@db3/t?sslmode=require", "s3cret"),
        ("postgresql://ann@db4/turns", "postgresql://ann@db4/turns", None),
    ],
    ids=["in the address", "percent-encoded", "in the query", "none"],
)
def test_a_url_is_shown_without_its_password_which_is_kept_for_connecting(
    url: str, shown: str, password: str | None
) -> None:
    assert redacted(url) == shown
    assert keep(url) == shown  # kept in this process for that URL (each case has a host of its own)
    again = connectable(shown)  # what a forked host gets from the URL it was sent
    if password is None:
        assert again == shown
    else:
        assert password not in shown and again.endswith("password=" + password.replace("@", "%40").replace(":", "%3A"))


# -- CI fails where a developer is told ---------------------------------------------------------


def test_without_postgresql_ci_fails_and_a_developer_is_skipped_loudly() -> None:
    with pytest.raises(pytest.fail.Exception, match="NOT RUN: the PostgreSQL store was not tested"):
        require_postgres(None, ci=True)
    with pytest.raises(pytest.skip.Exception, match="NOT RUN: the PostgreSQL store was not tested"):
        require_postgres(None, ci=False)
    require_postgres(("initdb", "pg_ctl"), ci=True)  # installed: nothing to say


@pytest.mark.parametrize("ci", [True, False], ids=["ci", "developer"])
def test_a_postgresql_test_run_without_the_server_fails_in_ci_and_is_skipped_elsewhere(ci: bool) -> None:
    env = ENV | {"GREENROOM_POSTGRES_BIN": "/nonexistent"} | ({"GREENROOM_CI": "1"} if ci else {})
    test = "tests/test_store_backends.py::test_a_store_written_by_a_newer_greenroom_is_refused_saying_so[postgres]"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rEs", test],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    last = out.stdout.strip().splitlines()[-1]
    if ci:
        assert out.returncode == 1 and last.startswith("1 error"), out.stdout  # the fixture failed
    else:
        assert out.returncode == 0 and last.startswith("1 skipped"), out.stdout
    assert WHY in " ".join(out.stdout.split())


# -- a newer schema ---------------------------------------------------------------------------


def test_a_store_written_by_a_newer_greenroom_is_refused_saying_so(
    provider: ScriptedProvider, store_location: str
) -> None:
    open_store(store_location).close()
    sql(store_location, "UPDATE meta SET value = ? WHERE key = 'schema'", (str(STORE_SCHEMA + 1),))
    where = redacted(store_location) if is_url(store_location) else store_location
    why = (
        f"the turn store at {where} was written by a newer greenroom (store schema {STORE_SCHEMA + 1}; this greenroom "
        f"knows up to {STORE_SCHEMA}): upgrade greenroom to use it"
    )
    with pytest.raises(StoreError) as refused:
        open_store(store_location)
    assert str(refused.value) == why
    out = greenroom("turns", "list", "--store", store_location)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", f"greenroom: {why}\n")
    rt = Runtime(provider.provider(), store=store_location, hosts=1)
    with pytest.raises(StoreError) as at_start:
        rt.start()
    assert str(at_start.value) == why
    assert rt.admin_sid is None or session_processes(rt.admin_sid) == []
    assert sql(store_location, "SELECT value FROM meta WHERE key = 'schema'") == [(str(STORE_SCHEMA + 1),)]


# -- an unreachable database ------------------------------------------------------------------


def test_an_unreachable_database_is_named_without_its_password_with_what_failed(
    provider: ScriptedProvider,
) -> None:
    port = free_port("127.0.0.1")  # nothing listens there
    url = f"postgresql://greenroom:{PASSWORD}@127.0.0.1:{port}/turns"
    prefix = f"cannot reach the turn store at postgresql://greenroom@127.0.0.1:{port}/turns: connection failed: "
    with pytest.raises(StoreError) as direct:
        open_store(url)
    rt = Runtime(provider.provider(), store=url, hosts=1)
    with pytest.raises(StoreError) as at_start:
        rt.start()
    assert rt.admin_sid is None or session_processes(rt.admin_sid) == []
    assert rt.store_path == f"postgresql://greenroom@127.0.0.1:{port}/turns"
    turns = greenroom("turns", "list", "--store", url)
    console = greenroom("console", "--store", url, "--port", "0")
    node = greenroom(
        "node", "--leader", "127.0.0.1:1", "--listen", "127.0.0.1", "--admin-port", str(free_port("127.0.0.1")),
        "--store", url, env=ENV | {"GREENROOM_KEY": "a-deployment-key-for-this-test"},
    )  # fmt: skip
    for error in (str(direct.value), str(at_start.value), turns.stderr.removeprefix("greenroom: ").strip(),
                  console.stderr.removeprefix("greenroom: ").strip(),
                  node.stderr.removeprefix("greenroom node: ").strip()):  # fmt: skip
        assert error.startswith(prefix) and error.endswith("Connection refused"), error
        assert PASSWORD not in error
    assert (turns.returncode, turns.stdout, console.returncode, console.stdout) == (2, "", 2, "")
    assert (node.returncode, node.stdout) == (2, "")


@pytest.mark.postgres
def test_a_wrong_password_or_a_database_without_a_store_is_refused_clearly(postgres: ThrowawayPostgres) -> None:
    url = postgres.create_database("not_a_store")
    shown = redacted(url)
    wrong = url.replace(PASSWORD, "not-the-password")
    out = greenroom("turns", "list", "--store", wrong)
    assert out.returncode == 2 and "not-the-password" not in out.stderr
    assert out.stderr.startswith(f"greenroom: cannot reach the turn store at {shown}: connection failed: ")
    assert out.stderr.endswith('password authentication failed for user "greenroom"\n')
    empty = greenroom("turns", "list", "--store", url)
    assert (empty.returncode, empty.stderr) == (
        2,
        f"greenroom: no turn store at {shown}: the database has no greenroom tables\n",
    )
    assert sql(url, "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()") == [(0,)]


# -- a command no host answers ------------------------------------------------------------------


@pytest.mark.postgres
def test_a_command_no_live_host_answers_is_reported_queued_with_exit_0_and_stays_in_the_inbox(
    postgres: ThrowawayPostgres,
) -> None:
    from .test_cli import paused_turn, store_with

    url = store_with(postgres.create_database("hung_host"), paused_turn("turn_1"))
    store = open_store(url)
    store.hosts.renew("hung/0", "hung", b"", 60.0)  # a host whose lease holds, and which answers nothing
    queued = (
        "no host answered within 1 s: queued in the store's inbox, applied when the turn's host takes it "
        "(a lost host's turns are taken over by a live host once its lease runs out)"
    )
    out = greenroom("approve", "turn_1", "call_1", "--store", url, "--timeout", "1")
    assert (out.returncode, out.stdout, out.stderr) == (0, f"approved: {queued}\n", "")
    out = greenroom("stop", "turn_1", "--store", url, "--timeout", "1", "--json")
    assert (out.returncode, out.stderr) == (0, "")
    assert json.loads(out.stdout) == {
        "turn_id": "turn_1", "command_id": 2, "ok": True, "by": getpass.getuser(), "message": queued,
        "sent_to": "store", "queued": True,
    }  # fmt: skip
    assert [c.kind for _, c in store.inbox.pending("turn_1")] == ["respond_to_approvals", "stop_turn"]


# -- the password goes nowhere ------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.skipif(not can_capture(), reason="capturing the loopback needs root")
def test_the_password_of_a_store_is_in_no_message_log_error_row_or_output(
    provider: ScriptedProvider, postgres: ThrowawayPostgres, capfd: pytest.CaptureFixture[str]
) -> None:
    url = postgres.create_database("secret_keeping")
    secret = PASSWORD.encode()
    provider.add(use_tools(call("write_file", {"path": "/etc/motd", "text": "hi"})), say("Written."))
    with capture() as wire:
        with Runtime(provider.provider(retry=RetryPolicy(max_attempts=1)), store=url, hosts=2) as rt:
            turn = rt.run("write the motd", tools=[T.write_file], turn_id="turn_secret")
            assert turn.result(30).finish_reason == "awaiting_approval"
            approved = greenroom("approve", "turn_secret", "call_1", "--store", url)
            assert approved.returncode == 0, approved.stderr
            assert turn.result(30, final=True).text == "Written."
            listed = greenroom("turns", "list", "--store", url)
            shown = greenroom("turns", "show", "turn_secret", "--store", url, "--json")
            path = rt.store_path
    logs = capfd.readouterr()
    payloads = [p for _, p in wire.payloads]
    where = f"@127.0.0.1:{postgres.port}/secret_keeping".encode()  # in the store's URL, with or without password
    assert any(where in p for p in payloads), "the capture saw the hosts' configuration"
    assert [p for p in payloads if secret in p] == []
    assert path == redacted(url)
    assert PASSWORD not in logs.out + logs.err
    for out in (approved, listed, shown):
        assert PASSWORD not in out.stdout + out.stderr
    for table in ("turns", "events", "commands", "hosts", "meta"):
        for row in sql(url, f"SELECT * FROM {table}"):
            assert not any(secret in (bytes(v) if isinstance(v, (bytes, memoryview)) else str(v).encode()) for v in row)


# -- writes conditioned on the owner's epoch, on both backends ------------------------------------


def test_a_write_by_an_owner_whose_turn_was_claimed_is_fenced_and_writes_nothing(store_location: str) -> None:
    """The held host's snapshot and events land (once, however often they are written); once
    another host has claimed the turn (one epoch up), every write of the old owner, a snapshot
    or events alone, raises ``Fenced`` and leaves the store as the new owner left it."""
    from actors.errors import Fenced
    from actors.store.base import Owner
    from messages import ChatMessage, ProviderConfig, TextDelta, TurnState, encode

    store = open_store(store_location)
    provider = ProviderConfig(base_url="http://127.0.0.1:1/v1", model="m")
    state = TurnState(turn_id="t", root_turn_id="t", provider=provider, messages=[ChatMessage.user("hi")])

    def events(*seqs: int) -> list[tuple[int, str, bytes]]:
        return [(n, "text_delta", encode(TextDelta(turn_id="t", seq=n, text=f"w{n}"))) for n in seqs]

    def stored() -> list[bytes]:
        return [payload for _, payload in store.log.event_payloads("t")]

    a = Owner("node-a/0", 1)
    save(store, state, events(0), a)  # a new turn
    with contextlib.ExitStack() as held:
        if store_location.startswith("postgresql://"):  # a held turn's writes take one statement, no transaction
            held.enter_context(pytest.MonkeyPatch.context()).setattr(store.db, "tx", _no_transaction)
        save(store, state.model_copy(update={"round": 1}), events(1), a)
        save(store, state.model_copy(update={"round": 1}), [], a)
        append(store, "t", events(2, 3), a)
    append(store, "t", events(3, 4), a)  # 3 again: written once
    save(store, state.model_copy(update={"round": 1}), events(4), a)  # all there: the snapshot alone
    assert stored() == [p for _, _, p in events(0, 1, 2, 3, 4)]
    assert store.log.load("t").round == 1

    epoch = store.owners.claim("t", "node-b/0", force=True)
    assert epoch == 2
    with pytest.raises(Fenced, match="node-b/0"):
        append(store, "t", events(5), a)
    with pytest.raises(Fenced, match="node-b/0"):
        save(store, state.model_copy(update={"round": 7}), events(5), a)
    assert stored() == [p for _, _, p in events(0, 1, 2, 3, 4)] and store.log.load("t").round == 1

    b = Owner("node-b/0", epoch)
    append(store, "t", events(5), b)
    save(store, state.model_copy(update={"round": 2}), events(6), b)
    assert stored() == [p for _, _, p in events(*range(7))] and store.log.load("t").round == 2
    store.close()


def _no_transaction(what: str) -> None:
    pytest.fail(f"a held turn's write went through a transaction: {what}")
