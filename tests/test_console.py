"""The console over HTTP: who may use it, bad input, the port, the command line, mounting.

The browser tests (``test_console_browser``) use it as a person would; these ask it as a
script or an attacker would, with httpx against the real server on 127.0.0.1.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors import ConfigurationError, Runtime
from actors.console import ConsoleConfig, console_app
from actors.console.server import Console
from actors.lifecycle.processes import session_processes
from actors.store.urls import redacted
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.testing.postgres import ThrowawayPostgres
from messages import RetryPolicy

from . import console_tools as C
from .pg import PASSWORD
from .test_durable import ENV, ROOT

pytestmark = pytest.mark.integration

KEY = "a-console-key-for-tests-0123456789"


@pytest.fixture
def rt(provider: ScriptedProvider) -> Iterator[Runtime]:
    runtime = Runtime(
        provider.provider(retry=RetryPolicy(max_attempts=1)),
        hosts=1,
        tool_processes=1,
        console=ConsoleConfig(port=0, key=KEY, quiet=True),
    ).start()
    try:
        yield runtime
    finally:
        runtime.close()
        assert runtime.admin_sid is not None and session_processes(runtime.admin_sid) == []


def base(rt: Runtime) -> str:
    return f"http://127.0.0.1:{rt._console.port}"


def auth(**extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}", **extra}


def waiting_turn(rt: Runtime, provider: ScriptedProvider) -> str:
    provider.add(use_tools(call("publish", {"text": "a note"})), say("Published."))
    turn = rt.run("publish a note", tools=[C.publish])
    assert turn.result(30).finish_reason == "awaiting_approval"
    return turn.turn_id


def approve(turn_id: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"decisions": [{"turn_id": turn_id, "call_id": call_id, "approved": True}]}


def pending_of(rt: Runtime, turn_id: str) -> list[tuple[str, Any]]:
    view = httpx.get(f"{base(rt)}/api/turns/{turn_id}", headers=auth()).json()["view"]
    return [(p["call_id"], p["decision"]) for p in view["pending"]]


def test_every_request_needs_the_token_and_a_wrong_one_changes_nothing(rt: Runtime, provider: ScriptedProvider) -> None:
    turn_id = waiting_turn(rt, provider)
    for headers in ({}, {"Authorization": "Bearer not-the-key"}, {"Cookie": "greenroom_console_x=1"}):
        answer = httpx.get(f"{base(rt)}/api/turns", headers=headers)
        assert (answer.status_code, answer.json()["code"]) == (401, "unauthorized")
        posted = httpx.post(f"{base(rt)}/api/turns/{turn_id}/decide", headers=headers, json=approve(turn_id))
        assert posted.status_code == 401
    assert pending_of(rt, turn_id) == [("call_1", None)]
    assert len(provider.requests) == 1
    page = httpx.get(f"{base(rt)}/", headers={"Accept": "text/html"})
    assert page.status_code == 401 and "This console needs its token" in page.text


def test_the_pages_own_script_is_served_to_anyone_and_never_writes_markup(rt: Runtime) -> None:
    script = httpx.get(f"{base(rt)}/static/console.js")
    assert script.status_code == 200
    assert "innerHTML" not in script.text.replace("there is no innerHTML here", "")
    assert "insertAdjacentHTML" not in script.text and "document.write" not in script.text
    assert httpx.get(f"{base(rt)}/static/console.css").status_code == 200


def test_the_printed_address_signs_a_browser_in_and_a_wrong_token_does_not(rt: Runtime) -> None:
    with httpx.Client(base_url=base(rt)) as browser:
        wrong = browser.get("/?token=wrong", headers={"Accept": "text/html"})
        assert wrong.status_code == 401 and "That token is not this console&#x27;s." in wrong.text
        signed = browser.get(f"/?token={KEY}")
        assert (signed.status_code, signed.headers["location"]) == (303, "/")
        assert "HttpOnly; SameSite=Strict; Path=/" in signed.headers["set-cookie"]
        assert KEY not in signed.headers["set-cookie"]  # the cookie holds a value derived from the key
        page = browser.get("/")
        assert page.status_code == 200 and '<script src="static/console.js" defer></script>' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY"
        session = browser.get("/api/session").json()
        assert session["source"] == "runtime" and len(session["csrf"]) == 64


def test_a_forged_cross_site_post_is_refused_even_with_the_cookie(rt: Runtime, provider: ScriptedProvider) -> None:
    turn_id = waiting_turn(rt, provider)
    url = f"/api/turns/{turn_id}/decide"
    with httpx.Client(base_url=base(rt)) as browser:
        browser.get(f"/?token={KEY}")
        csrf = browser.get("/api/session").json()["csrf"]
        own = base(rt)
        cases = [
            ({"Origin": "http://evil.example"}, "a request from another origin (http://evil.example) was refused"),
            ({"Sec-Fetch-Site": "cross-site", "X-Greenroom-CSRF": csrf}, "a cross-site request (Sec-Fetch-Site: cross-site) was refused"),
            ({"Referer": "http://127.0.0.1:1/page", "X-Greenroom-CSRF": csrf}, "a request from another origin (http://127.0.0.1:1) was refused"),
            ({"Origin": own}, "the request lacks the console's CSRF token (X-Greenroom-CSRF): refused"),
            ({"Origin": own, "X-Greenroom-CSRF": "0" * 64}, "the request lacks the console's CSRF token (X-Greenroom-CSRF): refused"),
        ]  # fmt: skip
        for headers, why in cases:
            answer = browser.post(url, headers=headers, json=approve(turn_id))
            assert (answer.status_code, answer.json()) == (403, {"error": why, "code": "csrf"})
        assert pending_of(rt, turn_id) == [("call_1", None)]
        applied = browser.post(url, headers={"Origin": own, "X-Greenroom-CSRF": csrf}, json=approve(turn_id))
        assert (applied.status_code, applied.json()["message"]) == (200, "applied")


def test_a_request_for_another_host_name_is_refused(rt: Runtime) -> None:
    answer = httpx.get(f"{base(rt)}/api/turns", headers=auth(Host="attacker.example"))
    assert answer.status_code == 403
    assert answer.json() == {"error": "host 'attacker.example' is not this console's", "code": "bad_host"}
    assert httpx.get(f"http://localhost:{rt._console.port}/api/turns", headers=auth()).status_code == 200


def test_an_unknown_turn_or_call_gets_a_clear_message(rt: Runtime, provider: ScriptedProvider) -> None:
    turn_id = waiting_turn(rt, provider)
    answer = httpx.get(f"{base(rt)}/api/turns/turn_nope", headers=auth())
    assert (answer.status_code, answer.json()) == (404, {"error": "no turn turn_nope", "code": "unknown_turn"})
    posted = httpx.post(f"{base(rt)}/api/turns/turn_nope/stop", headers=auth(), json={})
    assert (posted.status_code, posted.json()) == (404, {"error": "no turn turn_nope", "code": "unknown_turn"})
    unknown_call = httpx.post(f"{base(rt)}/api/turns/{turn_id}/decide", headers=auth(), json=approve(turn_id, "call_9"))
    assert unknown_call.status_code == 404
    assert unknown_call.json()["message"] == f"no approval was requested for call 'call_9' in turn {turn_id}"
    assert unknown_call.json()["replies"][0]["code"] == "unknown_call"
    assert pending_of(rt, turn_id) == [("call_1", None)]


def test_bad_bodies_are_refused_and_change_nothing(rt: Runtime, provider: ScriptedProvider) -> None:
    turn_id = waiting_turn(rt, provider)
    url = f"{base(rt)}/api/turns/{turn_id}"
    cases = [
        (f"{url}/decide", b"not json", "bad request body (Expecting value: line 1 column 1 (char 0))"),
        (f"{url}/decide", b'{"decisions": []}', "bad request body (decisions: List should have at least 1 item after validation, not 0)"),
        (f"{url}/cancel", b'{"grace": -1}', "bad request body (grace: Input should be greater than or equal to 0)"),
    ]  # fmt: skip
    for where, body, message in cases:
        answer = httpx.post(where, headers=auth(**{"content-type": "application/json"}), content=body)
        assert (answer.status_code, answer.json()) == (400, {"error": message, "code": "invalid"})
    assert pending_of(rt, turn_id) == [("call_1", None)]


def test_a_decision_on_a_finished_turn_is_refused_and_says_so(rt: Runtime, provider: ScriptedProvider) -> None:
    turn_id = waiting_turn(rt, provider)
    first = httpx.post(f"{base(rt)}/api/turns/{turn_id}/decide", headers=auth(), json=approve(turn_id))
    assert (first.status_code, first.json()["message"]) == (200, "applied")
    assert rt.attach(turn_id).result(30, final=True).finish_reason == "stop"
    again = httpx.post(f"{base(rt)}/api/turns/{turn_id}/decide", headers=auth(), json=approve(turn_id))
    assert again.status_code == 409
    assert again.json()["message"] == f"turn {turn_id} has finished (stop); nothing can be approved"
    stop = httpx.post(f"{base(rt)}/api/turns/{turn_id}/stop", headers=auth(), json={})
    assert (stop.status_code, stop.json()["ok"]) == (200, True)  # a stop after the end has no effect, and is no error


def test_a_port_already_taken_is_a_clear_error(provider: ScriptedProvider) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError) as caught:
            Console(store=None, port=port).start()
        assert str(caught.value) == (
            f"the console cannot listen on 127.0.0.1:{port}: the port is already in use "
            "(another console or program); choose another port (--port, or ConsoleConfig(port=...))"
        )
        rt = Runtime(provider.provider(), hosts=1, tool_processes=1, console=ConsoleConfig(port=port, quiet=True))
        with pytest.raises(ConfigurationError):
            rt.start()
        assert rt.closed and rt.admin_sid is not None and session_processes(rt.admin_sid) == []


def greenroom(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "actors.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=60)


def test_the_command_line_says_what_is_wrong(tmp_path: Path) -> None:
    missing = greenroom("console", "--store", str(tmp_path / "none.db"))
    assert (missing.returncode, missing.stderr) == (
        2,
        f"greenroom: no turn store at {tmp_path / 'none.db'} (use --store or $GREENROOM_STORE)\n",
    )
    store = tmp_path / "turns.db"
    from actors.store.sqlite import SQLiteStore

    SQLiteStore(store).close()
    short = tmp_path / "key"
    short.write_text("short\n")
    bad_key = greenroom("console", "--store", str(store), "--key-file", str(short), "--port", "0")
    assert (bad_key.returncode, bad_key.stderr) == (2, "greenroom: a console key must be at least 16 characters\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = greenroom("console", "--store", str(store), "--port", str(port))
    assert busy.returncode == 2
    assert busy.stderr.startswith(
        f"greenroom: the console cannot listen on 127.0.0.1:{port}: the port is already in use"
    )


def test_the_console_mounts_in_an_application_of_ones_own(rt: Runtime, provider: ScriptedProvider) -> None:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route
    from starlette.testclient import TestClient

    turn_id = waiting_turn(rt, provider)
    app = Starlette(
        routes=[
            Route("/", lambda request: PlainTextResponse("my application")),
            Mount("/greenroom", console_app(rt, key=KEY)),
        ]
    )
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert client.get("/").text == "my application"
        assert client.get("/greenroom/api/turns").status_code == 401
        signed = client.get(f"/greenroom/?token={KEY}", follow_redirects=False)
        assert signed.headers["location"] == "/greenroom/"
        turns = client.get("/greenroom/api/turns").json()["turns"]
        assert [(t["turn_id"], t["status"], t["pending_approvals"]) for t in turns] == [
            (turn_id, "awaiting_approval", ["call_1"])
        ]
        csrf = client.get("/greenroom/api/session").json()["csrf"]
        headers = {"Origin": "http://127.0.0.1", "X-Greenroom-CSRF": csrf}
        applied = client.post(f"/greenroom/api/turns/{turn_id}/decide", headers=headers, json=approve(turn_id))
        assert (applied.status_code, applied.json()["message"]) == (200, "applied")
    assert rt.attach(turn_id).result(30, final=True).text == "Published."


@pytest.mark.postgres
def test_the_console_of_a_postgresql_store_sends_decisions_to_the_turns_host(
    provider: ScriptedProvider, postgres: ThrowawayPostgres
) -> None:
    """No Runtime in the console: a decision goes to the store's inbox, wakes the turn's host
    (NOTIFY), and the console answers with that host's reply; the page never shows the password."""
    url = postgres.create_database("console_pg")
    with Runtime(provider.provider(retry=RetryPolicy(max_attempts=1)), store=url, hosts=1) as rt:
        turn_id = waiting_turn(rt, provider)
        console = Console(store=url, port=0, key=KEY).start()
        try:
            where = f"http://127.0.0.1:{console.port}"
            session = httpx.get(f"{where}/api/session", headers=auth()).json()
            assert session["where"] == f"the store {redacted(url)}, 1 host(s) live"
            assert PASSWORD in url and PASSWORD not in httpx.get(f"{where}/api/turns", headers=auth()).text
            wrong = httpx.post(f"{where}/api/turns/{turn_id}/decide", headers=auth(), json=approve(turn_id, "call_9"))
            assert (wrong.status_code, wrong.json()["message"]) == (
                404,
                f"no approval was requested for call 'call_9' in turn {turn_id}",
            )
            applied = httpx.post(f"{where}/api/turns/{turn_id}/decide", headers=auth(), json=approve(turn_id))
            assert (applied.status_code, applied.json()["message"]) == (200, "applied")
            assert applied.json()["replies"][0]["ok"] is True
            assert rt.attach(turn_id).result(30, final=True).text == "Published."
        finally:
            console.close()


def test_the_console_lists_the_stores_sessions_and_shows_each_with_its_turns(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(say("Hello."), say("Again."))
    console = ConsoleConfig(port=0, key=KEY, quiet=True)
    with Runtime(provider.provider(retry=RetryPolicy(max_attempts=1)), store=str(tmp_path / "turns.db"),
                 hosts=1, tool_processes=1, console=console) as durable:  # fmt: skip
        chat = durable.session()
        first = chat.run("hi")
        assert first.result(30).finish_reason == "stop"  # type: ignore[union-attr]
        second = chat.run("again")
        assert second.result(30).finish_reason == "stop"  # type: ignore[union-attr]
        chat.wait_idle(30)
        assert httpx.get(f"{base(durable)}/api/sessions").status_code == 401
        listed = httpx.get(f"{base(durable)}/api/sessions", headers=auth()).json()
        assert [(s["session_id"], s["turns"]) for s in listed["sessions"]] == [(chat.session_id, 2)]
        assert listed["stored"] is True
        shown = httpx.get(f"{base(durable)}/api/sessions/{chat.session_id}", headers=auth()).json()
        assert [(t["turn_id"], t["status"], t["finish_reason"]) for t in shown["turns"]] == [
            (first.turn_id, "finished", "stop"), (second.turn_id, "finished", "stop"),
        ]  # fmt: skip
        assert (shown["running"], shown["queued"]) == (None, [])
        assert [(m["role"], m["content"]) for m in shown["history"]] == [
            ("user", "hi"), ("assistant", "Hello."), ("user", "again"), ("assistant", "Again."),
        ]  # fmt: skip
        unknown = httpx.get(f"{base(durable)}/api/sessions/nowhere", headers=auth())
        assert unknown.status_code == 404
        assert unknown.json() == {"error": "no session nowhere", "code": "unknown_session"}


def test_a_console_without_a_store_says_it_has_no_sessions_to_list(rt: Runtime) -> None:
    assert httpx.get(f"{base(rt)}/api/sessions", headers=auth()).json() == {"sessions": [], "stored": False}
