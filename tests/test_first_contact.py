"""Issue 34 (what a newcomer trips on) on one machine, and issue 30's queued command.

Where a turn runs and when nothing holds it (``turns list``, ``turns show``); the scripted
provider served on a given address from the command line; the extras the install page
lists; a command sent right after its turn's owner was SIGKILLed, reported queued with
exit status 0 and applied once when a host takes the turn over. The same across machines,
in network namespaces: ``tests/test_cluster_first_contact.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from actors import Runtime
from actors.cluster.holders import Holders
from actors.lifecycle.processes import session_processes
from actors.store import open_store
from actors.store.base import TurnSummary, is_url
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.testing.postgres import ThrowawayPostgres
from messages import ProviderConfig, RetryPolicy, ToolCallStarted, ToolProgress

from . import tools_for_tests as T
from .helpers import wait_until
from .stores import leases_run_out
from .test_durable import ENV, ROOT, greenroom

ONCE = RetryPolicy(max_attempts=1)


# -- what needs no actor system -------------------------------------------------------------


def summary(turn_id: str, status: str, owner: str | None) -> TurnSummary:
    return TurnSummary(turn_id=turn_id, status=status, owner=owner)


def test_a_turn_is_held_only_by_a_live_owner_and_each_node_counts_the_unfinished_turns_it_holds() -> None:
    holders = Holders({"10.0.0.1:1900/0": "10.0.0.1:1900", "10.0.0.2:1900/0": "10.0.0.2:1900",
                       "10.0.0.2:1900/1": "10.0.0.2:1900"})  # fmt: skip
    turns = [
        summary("t1", "running", "10.0.0.2:1900/1"),
        summary("t2", "awaiting_approval", "10.0.0.2:1900/0"),
        summary("t3", "running", "10.0.0.3:1900/0"),  # its node is gone
        summary("t4", "running", None),  # never claimed
        summary("t5", "finished", "10.0.0.3:1900/0"),
    ]
    assert [holders.status(s) for s in turns] == [
        "running", "awaiting_approval", "running (no live host)", "running (no live host)", "finished",
    ]  # fmt: skip
    assert [holders.fields(s) for s in turns] == [
        {"owner_host": "10.0.0.2:1900/1", "owner_node": "10.0.0.2:1900", "held": True},
        {"owner_host": "10.0.0.2:1900/0", "owner_node": "10.0.0.2:1900", "held": True},
        {"owner_host": "10.0.0.3:1900/0", "owner_node": "10.0.0.3:1900", "held": False},
        {"owner_host": None, "owner_node": None, "held": False},
        {"owner_host": "10.0.0.3:1900/0", "owner_node": "10.0.0.3:1900", "held": None},
    ]
    loads, unheld = holders.loads(turns)
    assert [(n.node, n.hosts, n.turns) for n in loads] == [("10.0.0.1:1900", 1, 0), ("10.0.0.2:1900", 2, 2)]
    assert unheld == 2


def test_the_install_page_lists_every_extra_and_no_page_installs_greenroom_from_an_index() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    install = (ROOT / "docs" / "install.md").read_text()
    listed = set(re.findall(r"^\| `([a-z]+)` \|", install, re.MULTILINE))
    assert listed == extras
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*.py"))]
    from_an_index = [str(p.relative_to(ROOT)) for p in pages if re.search(r"pip install '?greenroom\[", p.read_text())]
    assert from_an_index == []  # greenroom is not on PyPI: a checkout (.[extra]) or the wheel ([extra])


# -- the scripted provider from the command line ----------------------------------------------


@pytest.mark.integration
def test_the_scripted_provider_is_served_on_the_address_given_to_the_command_line(tmp_path: Path) -> None:
    from actors.testing.demo import get_weather, remove_file

    served = subprocess.Popen(
        [sys.executable, "-m", "actors.testing", "--host", "127.0.0.2", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV,
    )  # fmt: skip
    try:
        line = json.loads(served.stdout.readline())  # type: ignore[union-attr]
        port = line["port"]
        assert line == {"host": "127.0.0.2", "port": port, "base_url": f"http://127.0.0.2:{port}/v1"}
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # it listens on the address given, nowhere else
        target = tmp_path / "old.log"
        target.write_text("stale\n")
        provider = ProviderConfig(base_url=line["base_url"], model="scripted-model", retry=ONCE)
        with Runtime(provider, hosts=1) as rt:  # no key anywhere
            turn = rt.run(f"What's the weather in Paris and Oslo? Also delete {target}", tools=[get_weather, remove_file])
            paused = turn.result(60)
            assert (paused.finish_reason, [p.name for p in paused.pending_approvals]) == (
                "awaiting_approval", ["remove_file"]
            )  # fmt: skip
            turn.deny(paused.pending_approvals[0].call_id, reason="keep it")
            assert turn.result(60).text == (
                "Paris is 18°C with light rain. Oslo is 4°C with clear. I left the file alone (Rejected: keep it)."
            )
        assert target.exists()
    finally:
        served.send_signal(signal.SIGTERM)
        _, err = served.communicate(timeout=30)
    assert (served.returncode, err) == (0, "")


def test_the_scripted_provider_refuses_an_address_it_cannot_listen_on_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "actors.testing", "--host", "10.255.255.254", "--port", "0"],
        capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "python -m actors.testing: [Errno 99] Cannot assign requested address\n"


# -- where a turn runs, and when nothing holds it ---------------------------------------------


@pytest.mark.integration
def test_turns_list_and_show_name_the_host_of_a_turn_and_say_when_no_live_host_holds_it(
    provider: ScriptedProvider, store_location: str, tmp_path: Path
) -> None:
    store = store_location
    shared = is_url(store)
    provider.add(use_tools(call("wait_for_file", {"path": str(tmp_path / "never")})))  # a call that never returns
    with Runtime(provider.provider(retry=ONCE), store=store, hosts=1) as rt:
        turn = rt.run("wait", tools=[T.wait_for_file], turn_id="turn_held")
        turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=60)
        host, node = turn.host, f"127.0.0.1:{rt.admin_port}"
        assert host == f"{node}/0"
        rows = json.loads(greenroom("turns", "list", "--store", store, "--json").stdout)
        assert [(r["turn_id"], r["status"], r["owner_host"], r["owner_node"], r["held"]) for r in rows] == [
            ("turn_held", "running", host, node, True)
        ]
        listed = greenroom("turns", "list", "--store", store).stdout.splitlines()
        assert listed[1].split()[:4] == ["turn_held", "running", "0", host]
        assert listed[2:] == (["", "NODE             HOSTS  TURNS", f"{node}      1      1"] if shared else [])
        shown = greenroom("turns", "show", "turn_held", "--store", store)
        assert shown.stdout.splitlines()[0] == f"turn turn_held: tools, on host {host} (node {node})"
    # the runtime closed with the turn in its call: the store says running, and nothing runs it
    rows = json.loads(greenroom("turns", "list", "--store", store, "--json").stdout)
    assert [(r["status"], r["owner_host"], r["held"]) for r in rows] == [("running", host, False)]
    listed = greenroom("turns", "list", "--store", store).stdout.splitlines()
    assert listed[1].split()[:5] == ["turn_held", "running", "(no", "live", "host)"] and host in listed[1].split()
    assert listed[2:] == (["", "NODE            HOSTS  TURNS", "(no live host)      -      1"] if shared else [])
    shown = greenroom("turns", "show", "turn_held", "--store", store, "--json")
    assert {k: json.loads(shown.stdout)[k] for k in ("owner_host", "owner_node", "held")} == {
        "owner_host": host, "owner_node": node, "held": False,
    }  # fmt: skip
    first = greenroom("turns", "show", "turn_held", "--store", store).stdout.splitlines()[0]
    assert first.endswith(f" (no live host; last held by host {host})")  # its phase: the call's, or after it
    provider.add(say("Went on."))
    with Runtime(provider.provider(retry=ONCE), store=store, hosts=1) as rt:
        assert rt.attach("turn_held").result(60, final=True).text == "Went on."
        shown = greenroom("turns", "show", "turn_held", "--store", store)
        assert shown.stdout.splitlines()[0] == (
            f"turn turn_held: finished (stop), ran on host 127.0.0.1:{rt.admin_port}/0 (node 127.0.0.1:{rt.admin_port})"
        )


# -- a command right after its turn's owner died (issue 30) ------------------------------------


@pytest.mark.integration
@pytest.mark.postgres
def test_an_approval_right_after_its_owner_was_sigkilled_is_queued_with_exit_0_and_applied_once_by_the_next_host(
    provider: ScriptedProvider, postgres: ThrowawayPostgres
) -> None:
    url = postgres.create_database("owner_killed")
    provider.add(use_tools(call("write_file", {"path": "/etc/motd", "text": "hi"})))
    cmd = [sys.executable, "-m", "tests.durable_child", url, provider.base_url, "approval", "turn_killed"]
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    try:
        info = json.loads(child.stdout.readline())  # type: ignore[union-attr]
    finally:
        os.kill(child.pid, signal.SIGKILL)  # its owner, SIGKILLed: its host's lease still holds a few seconds
        child.wait(10)
    approved = greenroom("approve", "turn_killed", "call_1", "--store", url, "--timeout", "2", "--json")
    assert (approved.returncode, approved.stderr) == (0, "")
    answer = json.loads(approved.stdout)
    assert {k: answer[k] for k in ("turn_id", "ok", "sent_to", "queued", "command_id")} == {
        "turn_id": "turn_killed", "ok": True, "sent_to": "store", "queued": True, "command_id": 1,
    }  # fmt: skip
    assert answer["message"] in (  # its dead owner's lease held (none answered), or had just run out
        "no host answered within 2 s: queued in the store's inbox, applied when the turn's host takes it "
        "(a lost host's turns are taken over by a live host once its lease runs out)",
        "no host is running: queued in the store's inbox, applied when a host takes the turn",
    )
    assert wait_until(lambda: session_processes(info["sid"]) == [])
    leases_run_out(url)
    provider.add(say("Written."))
    with Runtime(provider.provider(retry=ONCE), store=url, hosts=1) as rt:  # the host that takes the turn over
        result = rt.attach("turn_killed").result(60, final=True)
        assert result.text == "Written."
    store = open_store(url)
    try:
        started = [e.call_id for e in store.log.events("turn_killed") if isinstance(e, ToolCallStarted)]
        assert started == ["call_1"]  # approved once, run once
        assert store.inbox.pending("turn_killed") == []
        reply = store.inbox.reply_to(1)
        assert reply is not None and reply.ok
    finally:
        store.close()
    assert len(provider.requests) == 2


# -- greenroom nodes ----------------------------------------------------------------------------


@pytest.mark.integration
def test_greenroom_nodes_reaches_a_running_runtime_and_starts_no_admin_where_none_listens(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    from actors.lifecycle.processes import free_port

    store = str(tmp_path / "turns.db")
    with Runtime(provider.provider(retry=ONCE), store=store, hosts=1, capabilities={"region": "eu"}) as rt:
        out = greenroom("nodes", "--store", store, "--json")  # the key from the runtime's file
        assert (out.returncode, out.stderr) == (0, "")
        assert json.loads(out.stdout) == [
            {"node": f"127.0.0.1:{rt.admin_port}", "capabilities": {"region": "eu"}, "leader": True, "hosts": 1}
        ]
    port = free_port("127.0.0.1")
    keyed = {**ENV, "GREENROOM_KEY": "a-deployment-key-for-this-test"}
    done = subprocess.run(
        [sys.executable, "-m", "actors.cli", "nodes", "--admin", f"127.0.0.1:{port}"],
        capture_output=True, text=True, cwd=ROOT, env=keyed, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", f"greenroom: nothing listens at 127.0.0.1:{port} (connection refused)\n",
    )  # fmt: skip
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # no admin was started there (one used to be, and ran on)


@pytest.mark.integration
@pytest.mark.postgres
def test_the_consoles_decision_no_live_host_answers_in_time_is_shown_queued_with_status_200(
    postgres: ThrowawayPostgres,
) -> None:
    from starlette.testclient import TestClient

    from actors.console.app import build_app
    from actors.console.sources import StoreSource

    from .test_cli import paused_turn, store_with

    url = store_with(postgres.create_database("console_queued"), paused_turn("turn_1"))
    store = open_store(url)
    store.hosts.renew("hung/0", "hung", b"", 60.0)  # a host whose lease holds, and which answers nothing
    source = StoreSource(url)
    source.timeout = 1.0
    key = "a-console-key-for-this-test-0123456789"
    with TestClient(build_app(source, key), base_url="http://127.0.0.1") as client:
        client.get(f"/?token={key}")
        csrf = client.get("/api/session").json()["csrf"]
        headers = {"Origin": "http://127.0.0.1", "X-Greenroom-CSRF": csrf}
        body = {"decisions": [{"turn_id": "turn_1", "call_id": "call_1", "approved": True}]}
        answer = client.post("/api/turns/turn_1/decide", headers=headers, json=body)
    assert (answer.status_code, answer.json()["ok"], answer.json()["message"]) == (
        200, True,
        "queued (no host answered within 1 s: queued in the store's inbox, applied when the turn's host takes it "
        "(a lost host's turns are taken over by a live host once its lease runs out))",
    )  # fmt: skip
    assert [c.kind for _, c in store.inbox.pending("turn_1")] == ["respond_to_approvals"]
    source.close()
    store.close()
