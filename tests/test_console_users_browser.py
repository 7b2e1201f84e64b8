"""The console's named users in a real browser (headless Chromium), and the console behind a
real TLS-terminating proxy on 127.0.0.1 (``tls_proxy``), used as a person would use them.

A reviewer approves a call whose tool only reviewers and ops may decide: the events, the
page and ``greenroom turns show`` name them. An intern is refused, and the call stays
pending. Screenshots go to ``test-artifacts/console`` (``tests/browser.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from actors import Runtime
from actors.console import ConsoleConfig
from actors.lifecycle.processes import session_processes
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import RetryPolicy

from . import approver_tools as A
from .browser import Browser, require_chromium
from .test_console_browser import event_texts, pending
from .test_durable import greenroom
from .tls_proxy import TlsProxy

pytestmark = pytest.mark.integration

USERS = {"reviewer": "reviewer-token-0123456789", "ops": "ops-token-0123456789abc", "intern": "intern-token-0123456789"}
NOT_INTERN = "refused: call 'call_1' of release may be decided only by ops, reviewer: 'intern' may not"


@contextmanager
def browser_with(*flags: str) -> Iterator[Browser]:
    require_chromium()
    b = Browser(flags)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def browser() -> Iterator[Browser]:
    with browser_with() as b:
        yield b


@contextmanager
def team_console(provider: ScriptedProvider, store: str | None = None, **options: Any) -> Iterator[Runtime]:
    """A Runtime whose console has the team's users (and no anonymous token)."""
    config = ConsoleConfig(port=0, quiet=True, users=USERS, **options)
    retry = RetryPolicy(max_attempts=1)
    rt = Runtime(provider.provider(retry=retry), store=store, hosts=1, tool_processes=1, console=config).start()
    try:
        yield rt
    finally:
        rt.close()
        assert rt.admin_sid is not None and session_processes(rt.admin_sid) == []


def sign_in(browser: Browser, origin: str, user: str, page: str) -> None:
    """Open the console with ``user``'s token, as a person pastes their link."""
    browser.open(f"{origin}/?token={USERS[user]}{page}")
    browser.wait_text("#user", lambda s: s == f"signed in as {user}")


def test_a_reviewer_approves_an_intern_is_refused_and_every_record_names_who_decided(
    provider: ScriptedProvider, browser: Browser, tmp_path: Path
) -> None:
    store = str(tmp_path / "turns.db")
    provider.add(use_tools(call("release", {"version": "5.0"})), say("Released 5.0."))
    with team_console(provider, store) as rt:
        turn = rt.run("release 5.0", tools=[A.release], turn_id="turn_team")
        assert turn.result(30).finish_reason == "awaiting_approval"
        origin = rt._console.url.rstrip("/")
        sign_in(browser, origin, "intern", "#/turn/turn_team")
        assert browser.wait_text(pending("call_1", ".approvers"), bool) == "May be decided by: ops, reviewer"
        browser.click(pending("call_1", "button.approve"))
        assert browser.wait_text(pending("call_1", ".reply"), lambda s: s != "sending...") == NOT_INTERN
        assert browser.text("#turn-status") == "awaiting_approval"
        assert [a["data-call"] for a in browser.attributes(".pending", ["data-call"])] == ["call_1"]
        assert browser.text(pending("call_1", ".decision")) == ""  # still undecided
        browser.screenshot("team-intern-refused")
        sign_in(browser, origin, "reviewer", "#/turn/turn_team")  # another person, another login
        browser.wait_text(pending("call_1", "h3"), lambda s: s.startswith("release call_1"))
        browser.click(pending("call_1", "button.approve"))
        # the call runs at once and leaves the pending list: its answer stays in #last-reply
        assert browser.wait_text("#last-reply", lambda s: s != "sending...") == "approve call_1: applied"
        browser.wait_text("#turn-status", lambda s: s == "finished: stop")
        started = event_texts(browser, "tool_call_started")
        assert len(started) == 1 and started[0].endswith('release call_1 { "version": "5.0" } (approved by reviewer)')
        browser.screenshot("team-reviewer-approved")
    shown = greenroom("turns", "show", "turn_team", "--store", store).stdout.splitlines()
    assert [line.split(" ", 3)[3] for line in shown if " tool_call_started " in line] == [
        "tool_call_started call_1 approved by reviewer"
    ]


def test_behind_a_tls_proxy_a_person_signs_in_and_decides_with_a_secure_cookie(
    provider: ScriptedProvider, tmp_path: Path
) -> None:
    provider.add(use_tools(call("release", {"version": "6.0"})), say("Released 6.0."))
    with team_console(provider, trust_proxy=True) as rt, TlsProxy(rt._console.port, tmp_path) as proxy:
        with browser_with(f"--ignore-certificate-errors-spki-list={proxy.spki}") as browser:  # this certificate only
            turn = rt.run("release 6.0", tools=[A.release])
            assert turn.result(30).finish_reason == "awaiting_approval"
            sign_in(browser, proxy.origin, "ops", f"#/turn/{turn.turn_id}")
            assert browser.driver.current_url.startswith(proxy.origin + "/")
            (cookie,) = browser.driver.get_cookies()
            assert (cookie["secure"], cookie["httpOnly"], cookie["sameSite"]) == (True, True, "Strict")
            browser.wait_text(pending("call_1", "h3"), lambda s: s.startswith("release call_1"))
            browser.click(pending("call_1", "button.approve"))
            assert browser.wait_text("#last-reply", lambda s: s != "sending...") == "approve call_1: applied"
            browser.wait_text("#turn-status", lambda s: s == "finished: stop")  # the live stream came through the proxy
            assert event_texts(browser, "tool_call_started")[0].endswith("(approved by ops)")
            browser.screenshot("behind-a-tls-proxy")
        assert proxy.requests > 3
