"""The console's named users and the console behind a TLS reverse proxy, asked over HTTP.

Each user signs in with their own token and sends commands in their name (``by``); a call
whose tool names its approvers is decided by them only. Behind a real TLS-terminating proxy
on 127.0.0.1 (``tls_proxy``), the console trusts the forwarded scheme and host only when
told to, and marks its cookie ``Secure`` there. The browser's side is in
``test_console_users_browser.py``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors import ConfigurationError, Runtime
from actors.console import ConsoleConfig, console_app
from actors.console.server import Console
from actors.lifecycle.processes import session_processes
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import Error, RetryPolicy, ToolCallStarted

from . import approver_tools as A
from .test_durable import ENV, ROOT
from .tls_proxy import TlsProxy

pytestmark = pytest.mark.integration

KEY = "the-anonymous-console-key-0123"
SAME_TOKEN = "two of the console's users (or a user and its key) have the same token"
USERS = {"reviewer": "reviewer-token-0123456789", "ops": "ops-token-0123456789abc", "intern": "intern-token-0123456789"}


@contextmanager
def console_runtime(provider: ScriptedProvider, **console: Any) -> Iterator[Runtime]:
    options = {"port": 0, "quiet": True, "key": KEY, "users": USERS, **console}
    retry = RetryPolicy(max_attempts=1)
    rt = Runtime(provider.provider(retry=retry), hosts=1, tool_processes=1, console=ConsoleConfig(**options)).start()
    try:
        yield rt
    finally:
        rt.close()
        assert rt.admin_sid is not None and session_processes(rt.admin_sid) == []


def base(rt: Runtime) -> str:
    return f"http://127.0.0.1:{rt._console.port}"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def release_waiting(rt: Runtime, provider: ScriptedProvider, version: str = "1.0") -> str:
    provider.add(use_tools(call("release", {"version": version})), say("Released."))
    turn = rt.run("release", tools=[A.release])
    assert turn.result(30).finish_reason == "awaiting_approval"
    return turn.turn_id


def decide(turn_id: str, approved: bool = True) -> dict[str, Any]:
    return {"decisions": [{"turn_id": turn_id, "call_id": "call_1", "approved": approved}]}


def pending(url: str, turn_id: str) -> list[tuple[str, Any, Any, Any]]:
    view = httpx.get(f"{url}/api/turns/{turn_id}", headers=bearer(KEY)).json()["view"]
    return [(p["call_id"], p["approvers"], p["decision"], p["decided_by"]) for p in view["pending"]]


# -- named users -------------------------------------------------------------------------------


def test_each_user_signs_in_with_their_own_token_and_the_key_stays_anonymous(provider: ScriptedProvider) -> None:
    with console_runtime(provider) as rt:
        for name, token in USERS.items():
            assert httpx.get(f"{base(rt)}/api/session", headers=bearer(token)).json()["user"] == name
        assert httpx.get(f"{base(rt)}/api/session", headers=bearer(KEY)).json()["user"] is None
        wrong = httpx.get(f"{base(rt)}/api/session", headers=bearer("ops-token-0123456789abX"))
        assert (wrong.status_code, wrong.json()["code"]) == (401, "unauthorized")
        with httpx.Client(base_url=base(rt)) as browser:  # the printed URL's way: ?token= sets the cookie
            signed = browser.get("/?token=" + USERS["ops"])
            assert signed.status_code == 303 and USERS["ops"] not in signed.headers["set-cookie"]
            assert "Secure" not in signed.headers["set-cookie"]  # plain http
            assert browser.get("/api/session").json()["user"] == "ops"


def test_a_decision_is_sent_in_the_users_name_and_one_by_anyone_else_is_refused_not_allowed(
    provider: ScriptedProvider,
) -> None:
    with console_runtime(provider) as rt:
        turn_id = release_waiting(rt, provider)
        url = f"{base(rt)}/api/turns/{turn_id}/decide"
        assert pending(base(rt), turn_id) == [("call_1", ["ops", "reviewer"], None, None)]
        for token, who in ((USERS["intern"], "'intern' may not"), (KEY, "this decision names nobody (by)")):
            answer = httpx.post(url, headers=bearer(token), json=decide(turn_id))
            assert answer.status_code == 409
            assert answer.json()["message"] == f"call 'call_1' of release may be decided only by ops, reviewer: {who}"
            assert [r["code"] for r in answer.json()["replies"]] == ["not_allowed"]
        claimed = {"decisions": [{**decide(turn_id)["decisions"][0], "by": "reviewer"}], "by": "reviewer"}
        answer = httpx.post(url, headers=bearer(USERS["intern"]), json=claimed)  # a name in the body is not a login
        assert (answer.status_code, answer.json()["replies"][0]["code"]) == (409, "not_allowed")
        assert pending(base(rt), turn_id) == [("call_1", ["ops", "reviewer"], None, None)]  # still undecided
        applied = httpx.post(url, headers=bearer(USERS["reviewer"]), json=decide(turn_id))
        assert (applied.status_code, applied.json()["message"]) == (200, "applied")
        turn = rt.attach(turn_id)
        assert turn.result(30, final=True).finish_reason == "stop"
        started = [(e.call_id, e.by) for e in turn.all_events if isinstance(e, ToolCallStarted)]
        assert started == [("call_1", "reviewer")]
        events = httpx.get(f"{base(rt)}/api/turns/{turn_id}", headers=bearer(KEY)).json()["events"]
        assert [(e["kind"], e["by"]) for e in events if e["kind"] == "tool_call_started"] == [
            ("tool_call_started", "reviewer")
        ]


def test_a_stop_from_the_console_names_who_pressed_it(provider: ScriptedProvider) -> None:
    with console_runtime(provider) as rt:
        turn_id = release_waiting(rt, provider)
        stop = httpx.post(f"{base(rt)}/api/turns/{turn_id}/stop", headers=bearer(USERS["intern"]), json={})
        assert stop.status_code == 200  # anyone may stop: stopping decides no call
        turn = rt.attach(turn_id)
        assert turn.result(30, final=True).finish_reason == "stopped"
        assert [(e.error_type, e.by) for e in turn.all_events if isinstance(e, Error)] == [("stopped", "intern")]


def test_a_users_csrf_token_is_theirs_alone(provider: ScriptedProvider) -> None:
    with console_runtime(provider) as rt:
        turn_id = release_waiting(rt, provider)
        intern_csrf = httpx.get(f"{base(rt)}/api/session", headers=bearer(USERS["intern"])).json()["csrf"]
        with httpx.Client(base_url=base(rt)) as browser:
            browser.get("/?token=" + USERS["reviewer"])
            own = browser.get("/api/session").json()["csrf"]
            assert own != intern_csrf
            headers = {"Origin": base(rt), "X-Greenroom-CSRF": intern_csrf}
            forged = browser.post(f"/api/turns/{turn_id}/decide", headers=headers, json=decide(turn_id))
            assert (forged.status_code, forged.json()["code"]) == (403, "csrf")
            headers["X-Greenroom-CSRF"] = own
            applied = browser.post(f"/api/turns/{turn_id}/decide", headers=headers, json=decide(turn_id))
            assert applied.status_code == 200


@pytest.mark.parametrize(
    "key, users, message",
    [
        (None, {"ops": "short"}, "the token of user 'ops' must be at least 16 characters"),
        (None, {"ops": USERS["ops"], "dev": USERS["ops"]}, SAME_TOKEN),
        (USERS["ops"], {"ops": USERS["ops"]}, SAME_TOKEN),
        (None, {"op\ns": USERS["ops"]}, "a console user's name: a principal has only printable characters"),
        (None, None, "a console needs a key or at least one user"),
    ],
)
def test_users_that_could_not_sign_in_apart_are_refused_at_start(
    key: str | None, users: dict[str, str] | None, message: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        console_app(store="unused.db", key=key, users=users)
    assert str(caught.value).startswith(message)
    assert all(token not in str(caught.value) for token in USERS.values())


def test_with_users_and_no_key_there_is_no_anonymous_token(provider: ScriptedProvider) -> None:
    with console_runtime(provider, key=None) as rt:
        console = rt._console
        assert console.url == f"http://127.0.0.1:{console.port}/"
        assert httpx.get(f"{base(rt)}/api/session", headers=bearer(USERS["ops"])).json()["user"] == "ops"
    assert Console(store="unused.db", key=None).token is not None  # with no users, a token is drawn as before


def test_greenroom_console_takes_users_from_a_file_and_prints_its_address_without_a_token(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    store = str(tmp_path / "turns.db")
    with Runtime(provider.provider(), store=store):
        pass  # the store exists
    users = tmp_path / "users"
    users.write_text(f"# the team\nreviewer={USERS['reviewer']}\n\nops={USERS['ops']}\n")
    cmd = [sys.executable, "-m", "actors.cli", "console", "--store", store, "--port", "0", "--users-file", str(users)]
    console = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    try:
        line = console.stdout.readline().strip()  # type: ignore[union-attr]
        assert line.startswith("greenroom console: http://127.0.0.1:") and line.endswith("/"), line
        url = line.split(": ", 1)[1].rstrip("/")
        assert httpx.get(f"{url}/api/session", headers=bearer(USERS["reviewer"])).json()["user"] == "reviewer"
        assert httpx.get(f"{url}/api/session", headers=bearer(USERS["intern"])).status_code == 401
    finally:
        console.terminate()
        _, err = console.communicate(timeout=20)
    assert console.returncode == 0, err
    assert "users: ops, reviewer (each signs in with their own token)" in err
    assert all(token not in err for token in USERS.values())


def test_greenroom_console_refuses_a_user_without_a_token_and_never_echoes_one() -> None:
    for bad in ("reviewer", "=token-without-a-name-0123"):
        out = subprocess.run(
            [sys.executable, "-m", "actors.cli", "console", "--user", bad],
            capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=60, check=False,
        )  # fmt: skip
        assert out.returncode == 2 and "argument --user: must be NAME=TOKEN" in out.stderr
        assert "token-without" not in out.stderr


# -- behind a TLS reverse proxy -----------------------------------------------------------------


def test_untrusted_by_default_forwarded_headers_change_nothing(provider: ScriptedProvider) -> None:
    with console_runtime(provider) as rt:
        turn_id = release_waiting(rt, provider)
        with httpx.Client(base_url=base(rt)) as browser:
            signed = browser.get("/?token=" + USERS["reviewer"], headers={"X-Forwarded-Proto": "https"})
            assert "Secure" not in signed.headers["set-cookie"]
            csrf = browser.get("/api/session").json()["csrf"]
            claims = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "console.example.com", "X-Greenroom-CSRF": csrf}
            elsewhere = {**claims, "Origin": "https://console.example.com"}
            forged = browser.post(f"/api/turns/{turn_id}/decide", headers=elsewhere, json=decide(turn_id))
            assert (forged.status_code, forged.json()) == (
                403,
                {"error": "a request from another origin (https://console.example.com) was refused", "code": "csrf"},
            )
            here = {**claims, "Origin": base(rt)}
            own = browser.post(f"/api/turns/{turn_id}/decide", headers=here, json=decide(turn_id))
            assert own.status_code == 200


@pytest.mark.parametrize("style", ["x-forwarded", "forwarded"])
def test_behind_a_tls_proxy_an_untrusted_console_refuses_what_the_browser_sends(
    provider: ScriptedProvider, tmp_path: Path, style: Any
) -> None:
    with console_runtime(provider) as rt, TlsProxy(rt._console.port, tmp_path, style) as proxy:
        turn_id = release_waiting(rt, provider)
        with httpx.Client(base_url=proxy.origin, verify=proxy.client_context()) as browser:
            if style == "forwarded":  # the public Host reaches the console: not one of its loopback names
                refused = browser.get("/api/session", headers=bearer(USERS["reviewer"]))
                assert refused.status_code == 403
                why = f"host '127.0.0.1:{proxy.port}' is not this console's"
                assert refused.json() == {"error": why, "code": "bad_host"}
            else:  # the Host is the console's own, but the page's origin is the proxy's
                browser.get("/?token=" + USERS["reviewer"])
                csrf = browser.get("/api/session").json()["csrf"]
                headers = {"Origin": proxy.origin, "X-Greenroom-CSRF": csrf}
                refused = browser.post(f"/api/turns/{turn_id}/decide", headers=headers, json=decide(turn_id))
                assert (refused.status_code, refused.json()["error"]) == (
                    403,
                    f"a request from another origin ({proxy.origin}) was refused",
                )
        assert pending(base(rt), turn_id) == [("call_1", ["ops", "reviewer"], None, None)]
    assert proxy.requests > 0


@pytest.mark.parametrize("style", ["x-forwarded", "forwarded"])
def test_behind_a_trusted_tls_proxy_a_person_signs_in_with_a_secure_cookie_and_decides(
    provider: ScriptedProvider, tmp_path: Path, style: Any
) -> None:
    with console_runtime(provider, trust_proxy=True) as rt, TlsProxy(rt._console.port, tmp_path, style) as proxy:
        turn_id = release_waiting(rt, provider)
        with httpx.Client(base_url=proxy.origin, verify=proxy.client_context()) as browser:
            signed = browser.get("/?token=" + USERS["reviewer"])
            assert signed.status_code == 303 and signed.headers["location"] == "/"
            assert signed.headers["set-cookie"].endswith("; HttpOnly; SameSite=Strict; Path=/; Secure")
            session = browser.get("/api/session").json()
            assert session["user"] == "reviewer"
            headers = {"Origin": proxy.origin, "X-Greenroom-CSRF": session["csrf"]}
            elsewhere = {**headers, "Origin": proxy.origin.replace("https:", "http:")}
            refused = browser.post(f"/api/turns/{turn_id}/decide", headers=elsewhere, json=decide(turn_id))
            assert (refused.status_code, refused.json()["code"]) == (403, "csrf")
            applied = browser.post(f"/api/turns/{turn_id}/decide", headers=headers, json=decide(turn_id))
            assert (applied.status_code, applied.json()["message"]) == (200, "applied")
        turn = rt.attach(turn_id)
        assert turn.result(30, final=True).finish_reason == "stop"
        assert [e.by for e in turn.all_events if isinstance(e, ToolCallStarted)] == ["reviewer"]


@pytest.mark.parametrize(
    "headers, error",
    [
        ({"X-Forwarded-Proto": "gopher"}, "the proxy forwarded the scheme 'gopher': not http or https"),
        ({"X-Forwarded-Host": "evil.example/path"}, "the proxy forwarded the host 'evil.example/path': not a host"),
        ({"Forwarded": 'proto=https;host="a b"'}, "the proxy forwarded the host 'a b': not a host"),
    ],
)
def test_a_trusted_proxys_value_that_is_not_a_scheme_or_a_host_is_refused(
    provider: ScriptedProvider, headers: dict[str, str], error: str
) -> None:
    with console_runtime(provider, trust_proxy=True) as rt:
        answer = httpx.get(f"{base(rt)}/api/session", headers={**bearer(KEY), **headers})
        assert (answer.status_code, answer.json()) == (403, {"error": error, "code": "bad_host"})
