"""``greenroom sessions list|show``: a store's sessions, each with its turns and its history.

The stores are written with the store's own code (``store_location``: once on SQLite, once on
PostgreSQL where it applies), as a runtime writes them; no actor system runs.
"""

from __future__ import annotations

import json

import pytest

from actors.store import open_store
from actors.store.base import SessionOwned
from messages import ChatMessage

from .stores import save
from .test_cli import RED, finished_turn, greenroom

pytestmark = pytest.mark.integration


def chat(location: str) -> str:
    """A store with session ``s1`` of two turns (``turn_1``, ``turn_2``), and an empty ``s0``."""
    store = open_store(location)
    try:
        store.sessions.create("s0")
        store.sessions.create("s1")
        for position, (turn_id, asked, answer) in enumerate([("turn_1", "hi", "Hello."), ("turn_2", "again", RED)]):
            state = finished_turn(turn_id, answer)
            save(store, state)
            added = [ChatMessage.user(asked), ChatMessage.assistant(answer)]
            store.sessions.append("s1", position, turn_id, added)
    finally:
        store.close()
    return location


def test_sessions_list_gives_each_session_with_its_number_of_turns(store_location: str) -> None:
    out = greenroom("sessions", "list", "--store", chat(store_location), "--json")
    assert out.returncode == 0, out.stderr
    assert sorted((s["session_id"], s["turns"]) for s in json.loads(out.stdout)) == [("s0", 0), ("s1", 2)]
    human = greenroom("sessions", "list", "--store", store_location)
    assert human.stdout.splitlines()[0].split() == ["SESSION", "TURNS", "CREATED", "UPDATED"]
    assert sorted(line.split()[:2] for line in human.stdout.splitlines()[1:]) == [["s0", "0"], ["s1", "2"]]


def test_sessions_list_of_a_store_without_sessions_says_so(store_location: str) -> None:
    open_store(store_location).close()
    out = greenroom("sessions", "list", "--store", store_location)
    assert (out.returncode, out.stdout) == (0, "no sessions\n")


def test_sessions_show_gives_the_turns_with_their_status_and_the_history(store_location: str) -> None:
    out = greenroom("sessions", "show", "s1", "--store", chat(store_location), "--json")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert (shown["running"], shown["queued"]) == (None, [])
    assert shown["turns"] == [
        {"turn_id": "turn_1", "status": "finished", "finish_reason": "stop"},
        {"turn_id": "turn_2", "status": "finished", "finish_reason": "stop"},
    ]
    assert [(m["role"], m["content"]) for m in shown["messages"]] == [
        ("user", "hi"), ("assistant", "Hello."), ("user", "again"), ("assistant", RED),
    ]  # fmt: skip
    human = greenroom("sessions", "show", "s1", "--store", store_location).stdout.splitlines()
    assert human[0].startswith("session s1: 2 turns, 4 messages, updated ")
    assert human[1:] == [
        "turns:", "  0. turn_1: finished (stop)", "  1. turn_2: finished (stop)", "running: none", "queued: none",
        "history:", "  user: hi", "  assistant: Hello.", "  user: again", "  assistant: \\x1b[31mred\\x1b[0m",
    ]  # fmt: skip


def test_sessions_show_of_an_unknown_session_is_a_clear_error(store_location: str) -> None:
    out = greenroom("sessions", "show", "nowhere", "--store", chat(store_location))
    assert (out.returncode, out.stdout, out.stderr) == (2, "", "greenroom: unknown session nowhere\n")


def test_sessions_show_gives_the_turn_running_and_the_messages_waiting(store_location: str) -> None:
    store = open_store(chat(store_location))
    try:

        def busy(owned: SessionOwned) -> None:
            owned.running = "turn_3"
            owned.queue += [("turn_4", [ChatMessage.user("later")]), ("turn_5", [ChatMessage.user("after")])]

        store.sessions.decide("s1", busy)
    finally:
        store.close()
    out = greenroom("sessions", "show", "s1", "--store", store_location, "--json")
    assert (json.loads(out.stdout)["running"], json.loads(out.stdout)["queued"]) == ("turn_3", ["turn_4", "turn_5"])
    human = greenroom("sessions", "show", "s1", "--store", store_location).stdout.splitlines()
    assert human[4:6] == ["running: turn_3", "queued: turn_4, turn_5"]
