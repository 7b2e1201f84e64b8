"""The console in a real browser (headless Chromium), used as a person would use it.

Each test starts a real Runtime (or ``greenroom console`` over a store) and a real
Chromium, opens the address the console printed, and clicks. Screenshots of the turn page
and of the timeline go to ``test-artifacts/console`` (``tests/browser.py``).
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from actors import Runtime
from actors.console import ConsoleConfig
from actors.lifecycle.processes import session_processes
from actors.store.base import is_url
from actors.testing import ScriptedProvider, call, say, use_tools
from messages import RetryPolicy

from . import console_tools as C
from . import tools_for_tests as T
from .browser import Browser, require_chromium
from .pg import PASSWORD
from .stores import recovered
from .test_durable import ENV, ROOT, run_child

pytestmark = pytest.mark.integration

XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@pytest.fixture
def browser() -> Iterator[Browser]:
    require_chromium()
    b = Browser()
    try:
        yield b
    finally:
        b.close()


@contextmanager
def console_runtime(provider: ScriptedProvider, **kw: Any) -> Iterator[Runtime]:
    rt = Runtime(
        provider.provider(retry=RetryPolicy(max_attempts=1)),
        hosts=1,
        tool_processes=2,
        console=ConsoleConfig(port=0, quiet=True),
        **kw,
    ).start()
    try:
        yield rt
    finally:
        rt.close()
        assert rt.admin_sid is not None and session_processes(rt.admin_sid) == []


def row(turn_id: str) -> str:
    return f'tr[data-turn="{turn_id}"]'


def pending(call_id: str, css: str = "") -> str:
    return f'.pending[data-call="{call_id}"] {css}'.strip()


def event_texts(browser: Browser, kind: str) -> list[str]:
    return browser.texts(f'#events li[data-kind="{kind}"]')


def test_a_person_watches_a_turn_stream_from_the_list_to_its_end(provider: ScriptedProvider, browser: Browser) -> None:
    go = threading.Event()
    provider.add(say("Paris is the capital of France.", pieces=6).but(hold_after=3, hold=go))
    with console_runtime(provider) as rt:
        browser.open(rt._console.url)
        turn = rt.run("What is the capital of France?")
        browser.wait_text(f"{row(turn.turn_id)} td.status", lambda s: s == "running")
        host = turn.host
        assert host == f"127.0.0.1:{rt.admin_port}/0"
        assert browser.wait_text(f"{row(turn.turn_id)} td.host", lambda s: s != "-") == host
        browser.until(lambda d: browser.texts("#node-rows tr[data-node] td") == [f"127.0.0.1:{rt.admin_port}", "-", "1"])
        browser.click(f"{row(turn.turn_id)} a")
        assert browser.wait_text("#text", lambda s: s == "Paris is the capit") == "Paris is the capit"
        assert browser.text("#turn-status") == "running"
        assert browser.text("#turn-host") == f"on host {host} (node 127.0.0.1:{rt.admin_port})"
        go.set()
        browser.wait_text("#turn-status", lambda s: s == "finished: stop")
        assert browser.text("#text") == "Paris is the capital of France."
        kinds = [a["data-kind"] for a in browser.attributes("#events li", ["data-kind"])]
        assert (kinds[0], kinds[-1], set(kinds[1:-1])) == ("turn_started", "finish", {"text_delta"})
        assert browser.text("#messages .message.assistant .content") == "Paris is the capital of France."
        browser.click("#home")
        browser.wait_text(f"{row(turn.turn_id)} td.status", lambda s: s == "finished: stop")
        assert browser.text("#n-live") == "0"
        browser.click('#filters a[data-status="running"]')
        browser.until(lambda d: browser.texts("#turn-rows td") == ["no turns"], message="no running turn listed")
        browser.click('#filters a[data-status="finished"]')
        browser.wait_text(f"{row(turn.turn_id)} td.status", lambda s: s == "finished: stop")
        browser.screenshot("turns-list")


def test_two_people_decide_calls_the_first_decision_wins_and_the_model_reads_the_reason(
    provider: ScriptedProvider, browser: Browser
) -> None:
    provider.add(
        use_tools(call("publish", {"text": XSS}), call("publish", {"text": "second note"})),
        say("One note published, one refused."),
    )
    with console_runtime(provider) as rt:
        turn = rt.run("publish both notes", tools=[C.publish])
        assert turn.result(30).finish_reason == "awaiting_approval"
        page = rt._console.url + f"#/turn/{turn.turn_id}"
        browser.open(page)
        arguments = browser.wait_text(pending("call_1", "pre.arguments"), lambda s: "script" in s)
        assert json.loads(arguments) == {"text": XSS}  # shown as text, never run
        assert browser.driver.execute_script("return window.__pwned === undefined") is True
        first, second = browser.driver.current_window_handle, None
        browser.driver.switch_to.new_window("tab")  # a second person opens the same turn
        second = browser.driver.current_window_handle
        browser.open(page)
        browser.wait_text(pending("call_1", "h3"), lambda s: s.startswith("publish call_1"))
        browser.driver.switch_to.window(first)
        browser.click(pending("call_1", "button.approve"))
        assert browser.wait_text(pending("call_1", ".reply"), lambda s: s != "sending...") == "applied"
        browser.driver.switch_to.window(second)
        browser.find(pending("call_1", "input.reason")).send_keys("too risky")
        browser.click(pending("call_1", "button.deny"))
        refused = browser.wait_text(pending("call_1", ".reply"), lambda s: s.startswith("refused"))
        assert refused == "refused: call 'call_1' was already approved"
        browser.driver.switch_to.window(first)
        browser.screenshot("turn-waiting-for-decisions", docs=True)
        browser.find(pending("call_2", "input.reason")).send_keys("the second note is not ready")
        browser.click(pending("call_2", "button.deny"))
        assert browser.wait_text("#last-reply", lambda s: s != "sending...") == "deny call_2: applied"
        browser.wait_text("#turn-status", lambda s: s == "finished: stop")
        assert browser.driver.execute_script("return window.__pwned === undefined") is True
        finished = event_texts(browser, "tool_finished")
        assert [t.split(" ", 3)[3] for t in finished] == [
            "publish call_2 denied: Rejected: the second note is not ready",
            f'publish call_1 success: {{"ok": true, "data": "published {len(XSS)} characters"}}',
        ]
        browser.screenshot("turn-decided")
    tool_messages = {m["tool_call_id"]: m["content"] for m in provider.requests[1].messages if m["role"] == "tool"}
    assert tool_messages["call_2"] == "Rejected: the second note is not ready"


def test_stopping_one_running_call_lets_its_sibling_finish(
    provider: ScriptedProvider, browser: Browser, tmp_path: Path
) -> None:
    marker, gate = tmp_path / "stopped", tmp_path / "go"
    provider.add(
        use_tools(call("wait_for_stop", {"marker": str(marker)}), call("wait_for_file", {"path": str(gate)})),
        say("The second one finished."),
    )
    with console_runtime(provider) as rt:
        browser.open(rt._console.url)
        turn = rt.run("run both", tools=[T.wait_for_stop, T.wait_for_file])
        browser.until(lambda d: browser.find_all(f"{row(turn.turn_id)} a"))
        browser.click(f"{row(turn.turn_id)} a")
        browser.until(lambda d: len(browser.find_all(".running-call")) == 2, message="two calls running")
        browser.click('.running-call[data-call="call_1"] button.stop-call')
        assert browser.wait_text("#last-reply", lambda s: s != "sending...") == "stop call_1: applied"
        browser.until(lambda d: any("call_1 interrupted" in t for t in event_texts(browser, "tool_finished")))
        assert [a["data-call"] for a in browser.attributes(".running-call", ["data-call"])] == ["call_2"]
        assert browser.text("#turn-status") == "running"
        gate.touch()
        browser.wait_text("#turn-status", lambda s: s == "finished: stop")
        outcomes = [t.split(" ", 5)[4:] for t in event_texts(browser, "tool_finished")]
        assert [o[0] for o in outcomes] == ["call_1", "call_2"]
        assert [o[1].split(":")[0] for o in outcomes] == ["interrupted", "success"]
        found = browser.attributes("#timeline rect.tl-call", ["data-call", "class", "x", "width"])
        bars = {b["data-call"]: b for b in found}
        assert bars["call_1"]["class"] == "tl-call interrupted"
        assert bars["call_2"]["class"] == "tl-call success"
        one, two = ((float(bars[c]["x"]), float(bars[c]["x"]) + float(bars[c]["width"])) for c in ("call_1", "call_2"))
        assert one[0] < two[1] and two[0] < one[1], "the two calls ran at the same time"
        browser.screenshot("timeline-stopped-call", "#timeline-svg", docs=True)
        browser.screenshot("turn-stopped-call")
    assert marker.read_text() == "stopped\n"


def test_stopping_a_turn_from_its_page_ends_it_and_marks_the_timeline(
    provider: ScriptedProvider, browser: Browser, tmp_path: Path
) -> None:
    marker = tmp_path / "stopped"
    provider.add(use_tools(call("wait_for_stop", {"marker": str(marker)}), text="Working on it."))
    with console_runtime(provider) as rt:
        turn = rt.run("work", tools=[T.wait_for_stop])
        browser.open(rt._console.url + f"#/turn/{turn.turn_id}")
        browser.until(lambda d: browser.find_all('.running-call[data-call="call_1"]'))
        browser.find("#turn-reason").send_keys("the person pressed stop")
        browser.click("#stop-turn")
        assert browser.wait_text("#stop-reply", lambda s: s != "sending...") == "applied"
        assert browser.beside("#stop-reply", "#stop-turn") and not browser.beside("#stop-reply", "#cancel-turn")
        assert browser.text("#cancel-reply") == ""
        browser.wait_text("#turn-status", lambda s: s == "finished: stopped")
        assert (
            event_texts(browser, "error")[0].split(" ", 3)[3] == "stopped: Agent run stopped (the person pressed stop)"
        )
        assert browser.attributes("#timeline line.tl-mark", ["class"])[0]["class"] == "tl-mark stopped"
        assert browser.text("#timeline .tl-mark-label") == "stopped (user)"
        assert browser.find_all(".running-call") == []
        browser.screenshot("timeline-stopped-turn", "#timeline-svg")
        assert turn.result(10).finish_reason == "stopped"


def test_cancelling_with_a_grace_ends_the_turn_at_its_next_step(
    provider: ScriptedProvider, browser: Browser, tmp_path: Path
) -> None:
    provider.add(use_tools(call("cooperative", {"marker": str(tmp_path / "done")})))
    with console_runtime(provider) as rt:
        turn = rt.run("work", tools=[T.cooperative])
        browser.open(rt._console.url + f"#/turn/{turn.turn_id}")
        browser.until(lambda d: browser.find_all('.running-call[data-call="call_1"]'))
        browser.find("#cancel-grace").send_keys("30")
        browser.click("#cancel-turn")
        assert browser.wait_text("#cancel-reply", lambda s: s != "sending...") == "applied"
        assert browser.beside("#cancel-reply", "#cancel-turn") and not browser.beside("#cancel-reply", "#stop-turn")
        assert browser.text("#stop-reply") == ""
        browser.wait_text("#turn-status", lambda s: s == "finished: cancelled")
        assert browser.text("#timeline .tl-mark-label") == "cancelled (user)"
    assert not (tmp_path / "done").exists()


def test_a_sub_agents_approval_is_decided_from_its_parents_page(
    provider: ScriptedProvider, browser: Browser, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.txt"
    provider.add(
        use_tools(call("delegate_gated", {"path": str(keys)})),
        use_tools(call("append_key", {"path": str(keys)})),
        say("The child recorded it."),
        say("Done, through the child."),
    )
    with console_runtime(provider) as rt:
        parent = rt.run("delegate", tools=[T.delegate_gated])
        browser.open(rt._console.url + f"#/turn/{parent.turn_id}")
        heading = browser.wait_text(pending("call_1", "h3"), lambda s: "of sub-agent" in s)
        child = browser.attributes(pending("call_1"), ["data-turn"])[0]["data-turn"]
        assert heading == f"append_key call_1 of sub-agent {child}"
        assert browser.text("#children a.child") == child
        browser.click(pending("call_1", "button.approve"))
        assert browser.wait_text("#last-reply", lambda s: s != "sending...") == "approve call_1: applied"
        browser.wait_text("#turn-status", lambda s: s == "finished: stop")
        browser.click("#children a.child")
        browser.wait_text("#turn-status", lambda s: s == "finished: stop")
        assert browser.find("#parent").text == parent.turn_id
    assert keys.read_text() == f"{child}:0:call_1\n"


class _Forger(http.server.BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_page_of_another_origin_cannot_decide_through_the_persons_browser(
    provider: ScriptedProvider, browser: Browser
) -> None:
    provider.add(use_tools(call("publish", {"text": "a note"})))
    with console_runtime(provider) as rt:
        turn = rt.run("publish", tools=[C.publish])
        assert turn.result(30).finish_reason == "awaiting_approval"
        console = rt._console
        browser.open(console.url)  # the person is signed in: the cookie is set
        browser.wait_text("#conn", lambda s: s == "live")
        body = {"decisions": [{"turn_id": turn.turn_id, "call_id": "call_1", "approved": True, "reason": "x"}]}
        name, value = json.dumps(body)[:-1] + ', "pad": "', '"}'
        action = f"http://127.0.0.1:{console.port}/api/turns/{turn.turn_id}/decide"
        _Forger.page = (
            f'<form id="f" method="post" enctype="text/plain" action="{action}">'
            f"<input name='{name}' value='{value}'></form>"
            '<script>document.getElementById("f").submit()</script>'
        ).encode()
        evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Forger)
        thread = threading.Thread(target=evil.serve_forever, daemon=True)
        thread.start()
        try:
            browser.open(f"http://127.0.0.1:{evil.server_address[1]}/")
            answer = browser.wait_text("body", lambda s: "refused" in s)
        finally:
            evil.shutdown()
            evil.server_close()
            thread.join(10)
        assert json.loads(answer) == {
            "error": "a cross-site request (Sec-Fetch-Site: same-site) was refused",
            "code": "csrf",
        }
        browser.open(console.url + f"#/turn/{turn.turn_id}")
        browser.wait_text(pending("call_1", "h3"), lambda s: s.startswith("publish call_1"))
        assert browser.text("#turn-status") == "awaiting_approval"
        assert len(provider.requests) == 1


def test_a_durable_turn_is_approved_from_the_console_after_its_owner_was_killed(
    provider: ScriptedProvider, browser: Browser, store_location: str
) -> None:
    store = store_location
    shared = is_url(store)  # PostgreSQL: no host is live once the killed one's leases ran out
    provider.add(use_tools(call("write_file", {"path": "/etc/motd", "text": "hi"})))
    run_child(store, provider, "approval", "turn_orphan")  # its owner is SIGKILLed, the turn waits in the store
    cmd = [sys.executable, "-m", "actors.cli", "console", "--store", store, "--port", "0"]
    console = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    try:
        line = console.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("greenroom console: http://127.0.0.1:"), line
        browser.open(line.split(": ", 1)[1].strip() + "#/turn/turn_orphan")
        browser.wait_text("#turn-status", lambda s: s == "awaiting_approval")
        assert browser.text("#where").endswith("no host running on it" if shared else "no runtime running on it")
        assert browser.text("#turn-host").startswith("no live host holds it (last on host 127.0.0.1:")
        browser.click(pending("call_1", "button.approve"))
        reply = browser.wait_text(pending("call_1", ".reply"), lambda s: s != "sending...")
        assert reply == (
            "queued (no host is running: queued in the store's inbox, applied when a host takes the turn)"
            if shared
            else "queued (no runtime is running on the store: queued in the store's inbox, "
            "applied when a runtime loads the turn again)"
        )
        provider.add(say("Written."))
        with Runtime(provider.provider(retry=RetryPolicy(max_attempts=1)), store=store, hosts=1) as rt:
            assert recovered(store, rt, ["turn_orphan"])
            browser.wait_text("#turn-status", lambda s: s == "finished: stop")
            assert browser.text("#turn-host") == f"ran on host 127.0.0.1:{rt.admin_port}/0 (node 127.0.0.1:{rt.admin_port})"
            if not shared:
                browser.screenshot("durable-turn-approved")
        assert browser.text("#text").endswith("Written.")
    finally:
        console.terminate()
        _, err = console.communicate(timeout=20)
    assert console.returncode == 0, err
    assert shared or os.path.exists(store)
    assert PASSWORD not in err


IDLE = """
import json, sys
from actors import Runtime
rt = Runtime(store=sys.argv[1], hosts=1).start()
print(json.dumps({"node": f"127.0.0.1:{rt.admin_port}", "sid": rt.admin_sid}), flush=True)
sys.stdin.read()
"""


@pytest.mark.postgres
def test_the_header_and_the_nodes_follow_a_host_that_dies_though_no_turn_changes(
    browser: Browser, postgres: Any
) -> None:
    from .helpers import wait_until

    url = postgres.create_database("hosts_followed")
    idle = [
        subprocess.Popen([sys.executable, "-c", IDLE, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         cwd=ROOT, env=ENV)  # fmt: skip
        for _ in range(2)
    ]
    console = None
    try:
        nodes = [json.loads(p.stdout.readline()) for p in idle]  # type: ignore[union-attr]
        cmd = [sys.executable, "-m", "actors.cli", "console", "--store", url, "--port", "0"]
        console = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
        line = console.stdout.readline()  # type: ignore[union-attr]
        browser.open(line.split(": ", 1)[1].strip())
        browser.wait_text("#where", lambda s: s.endswith("2 host(s) live"))
        def listed() -> list[list[str]]:
            cells = browser.texts("#node-rows tr[data-node] td")
            return [cells[i : i + 3] for i in range(0, len(cells), 3)]

        browser.until(lambda d: len(listed()) == 2, message="both nodes listed")
        assert sorted(listed()) == sorted([n["node"], "1", "0"] for n in nodes)  # each: 1 live host, no turn
        os.kill(idle[0].pid, signal.SIGKILL)  # no turn changes: only the host's lease runs out
        idle[0].wait(10)
        assert wait_until(lambda: session_processes(nodes[0]["sid"]) == [])
        browser.wait_text("#where", lambda s: s.endswith("1 host(s) live"), timeout=20)  # its lease (5 s), then 1 s
        assert listed() == [[nodes[1]["node"], "1", "0"]]
    finally:
        for p in idle:
            p.kill()  # SIGKILL: its whole tree ends with it (the lifeline)
            p.wait(10)
        if console is not None:
            console.terminate()
            console.communicate(timeout=20)
    assert console.returncode == 0
    assert wait_until(lambda: all(session_processes(n["sid"]) == [] for n in nodes))


# -- steering from the page (issue 35): input, pause and resume, edited arguments --------------


def test_a_person_sends_input_pauses_and_resumes_a_turn_from_its_page(
    provider: ScriptedProvider, browser: Browser
) -> None:
    provider.add(
        say("Writing the long report for you now", hold_after=2, hold=threading.Event()),
        say("Short version: all is well, and more", hold_after=2, hold=threading.Event()),
        say("Done."),
    )
    with console_runtime(provider) as rt:
        turn = rt.run("write the report")
        browser.open(rt._console.url + f"#/turn/{turn.turn_id}")
        browser.wait_text("#text", lambda s: s.startswith("Writing"))
        browser.find("#input-text").send_keys("make it short")
        browser.click("#input-now")
        browser.click("#send-input")
        assert browser.wait_text("#input-reply", lambda s: s != "sending...") == "applied"
        browser.until(lambda d: event_texts(browser, "input_accepted"), message="the input entered")
        assert event_texts(browser, "input_accepted")[0].endswith("input_accepted make it short")
        browser.wait_text("#text", lambda s: "Short version" in s)
        browser.click("#pause-now")
        assert browser.wait_text("#pause-reply", lambda s: s != "sending...") == "applied"
        browser.wait_text("#turn-status", lambda s: s == "paused")
        browser.screenshot("turn-paused")
        browser.click("#resume-turn")
        assert browser.wait_text("#pause-reply", lambda s: s != "sending...") == "applied"
        browser.wait_text("#turn-status", lambda s: s == "finished: stop")
        browser.click("#resume-turn")
        assert browser.wait_text("#pause-reply", lambda s: s.startswith("refused")) == (
            f"refused: turn {turn.turn_id} has finished (stop); it takes no resume"
        )
    assert provider.requests[0].disconnected.is_set() and provider.requests[1].disconnected.is_set()
    assert provider.requests[1].messages[-1] == {"role": "user", "content": "make it short"}
    assert [m["role"] for m in provider.requests[2].messages] == ["user", "assistant", "user", "assistant"]


def test_a_person_edits_a_calls_arguments_before_approving_it(provider: ScriptedProvider, browser: Browser) -> None:
    from . import steer_tools as S

    provider.add(use_tools(call("transfer", {"to": "alice", "amount": 200})), say("Sent."))
    with console_runtime(provider) as rt:
        turn = rt.run("pay alice", tools=[S.transfer])
        assert turn.result(30).finish_reason == "awaiting_approval"
        browser.open(rt._console.url + f"#/turn/{turn.turn_id}")
        browser.until(lambda d: browser.find_all(pending("call_1")), message="the call waits")
        browser.click(pending("call_1", "details.edit summary"))
        edit = browser.find(pending("call_1", "textarea.edit-arguments"))
        assert json.loads(edit.get_attribute("value")) == {"to": "alice", "amount": 200}
        edit.clear()
        edit.send_keys('{"to": "alice", "amount": "a lot"}')
        browser.click(pending("call_1", "button.approve-edited"))
        refused = browser.wait_text(pending("call_1", ".reply"), lambda s: s.startswith("refused"))
        assert refused == (
            "refused: the edited arguments of call 'call_1' do not fit tool 'transfer': Invalid arguments for tool "
            "'transfer': amount: Input should be a valid integer, unable to parse string as an integer"
        )
        edit.clear()
        edit.send_keys('{"to": "alice", "amount": 20}')
        browser.click(pending("call_1", "button.approve-edited"))
        # the call's own reply goes with it once approved: #last-reply stays
        last = browser.wait_text("#last-reply", lambda s: s != "sending..." and "refused" not in s)
        assert last == "approve call_1: applied"
        browser.wait_text("#turn-status", lambda s: s == "finished: stop")
        (finished,) = event_texts(browser, "tool_finished")
        assert finished.endswith(
            'transfer call_1 success: {"ok": true, "data": {"to": "alice", "amount": 20}, '
            '"edited_arguments": {"to": "alice", "amount": 20}}'
        )


def test_a_person_finds_a_session_its_turns_and_where_a_fork_came_from(
    provider: ScriptedProvider, browser: Browser, tmp_path: Path
) -> None:
    provider.add(say("Paris: sunny."), say("Oslo: cold."))
    with console_runtime(provider, store=str(tmp_path / "turns.db")) as rt:
        chat = rt.session()
        original = chat.run("Weather in Paris?")
        assert original.result(30).finish_reason == "stop"  # type: ignore[union-attr]
        chat.wait_idle(30)
        fork = rt.fork(original.turn_id, at=1, text="Weather in Oslo?")
        assert fork.result(30).text == "Oslo: cold."
        browser.open(rt._console.url)
        browser.until(lambda d: browser.find_all("#sessions-link"), message="the list has its link to the sessions")
        browser.click("#sessions-link")
        session = f'tr[data-session="{chat.session_id}"]'
        assert browser.wait_text(f"{session} td:nth-child(2)", lambda s: s == "1") == "1"
        browser.click(f"{session} a")
        browser.wait_text("#session-id", lambda s: s == chat.session_id)
        assert browser.texts("#session-turns li") == [f"{original.turn_id} finished (stop)"]
        assert browser.texts("#messages .message .content") == ["Weather in Paris?", "Paris: sunny."]
        assert (browser.text("#session-running"), browser.text("#session-queued")) == ("Running: none", "Waiting: none")
        browser.click("#home")
        browser.wait_text(f"{row(fork.turn_id)} td.status", lambda s: s == "finished: stop")
        browser.click(f"{row(fork.turn_id)} a")
        browser.until(lambda d: browser.find_all("#forked-from"), message="the fork's page says where it came from")
        expected = f"Forked from: {original.turn_id} at message 1, its last user message replaced"
        assert browser.wait_text("#forked-from", lambda s: s == expected) == expected
        browser.click("#forked-from a")
        browser.wait_text("#turn-id", lambda s: s == original.turn_id)
        assert browser.find_all("#forked-from") == []
