"""What the console computes from a turn's events (no actor system): timeline, pending, numbers; the store's times."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from actors.console.model import pending_from_events, row, running_calls
from actors.console.numbers import numbers
from actors.console.timeline import timeline
from actors.store import open_store
from actors.store.sqlite import SQLiteStore
from messages import (
    ChatMessage,
    Error,
    Finish,
    ProviderConfig,
    TextDelta,
    ToolApprovalRequest,
    ToolCallStarted,
    ToolFinished,
    ToolProgress,
    TurnStarted,
    TurnState,
    Usage,
)

from .stores import save

T = "turn_a"


def ev(cls: type, seq: int, **fields: Any) -> Any:
    return cls(turn_id=fields.pop("turn_id", T), seq=seq, **fields)


def paused_then_stopped() -> list[tuple[Any, float | None]]:
    """Two calls of one round (one gated), a pause, the approval, then a stop."""
    return [
        (ev(TurnStarted, 0), 100.0),
        (ev(TextDelta, 1, text="Let me see."), 100.5),
        (ev(ToolApprovalRequest, 2, call_id="c1", name="publish", arguments={"text": "<b>"}), 101.0),
        (ev(ToolCallStarted, 3, call_id="c2", name="add", arguments={"a": 1}), 101.0),
        (ev(ToolFinished, 4, call_id="c2", name="add", outcome="success", content="2"), 102.0),
        (ev(Finish, 5, finish_reason="awaiting_approval", pending_approvals=["c1"]), 102.0),
        (ev(ToolCallStarted, 6, call_id="c1", name="publish", arguments={"text": "<b>"}, round=0), 110.0),
        (ev(ToolFinished, 7, call_id="c1", name="publish", outcome="success", content="ok"), 111.0),
        (ev(Error, 8, error_type="stopped", message="Agent run stopped", detail="enough", cause="user"), 112.5),
        (ev(Finish, 9, finish_reason="stopped", usage=Usage(prompt_tokens=30, completion_tokens=9)), 112.5),
    ]


def test_the_timeline_shows_rounds_parallel_calls_the_wait_and_the_stop() -> None:
    assert timeline(paused_then_stopped()) == {
        "start": 100.0,
        "end": 12.5,
        "open": False,
        "model": [{"n": 1, "start": 0.0, "end": 1.0}, {"n": 2, "start": 11.0, "end": 12.5}],
        "calls": [
            {"call_id": "c2", "name": "add", "round": 0, "start": 1.0, "end": 2.0, "outcome": "success"},
            {"call_id": "c1", "name": "publish", "round": 0, "start": 10.0, "end": 11.0, "outcome": "success"},
        ],
        "waits": [{"start": 2.0, "end": 10.0}],
        "marks": [{"at": 12.5, "kind": "stopped", "cause": "user", "label": "Agent run stopped", "by": None}],
    }


def test_an_open_turn_keeps_its_running_call_and_its_wait_open() -> None:
    events = paused_then_stopped()[:6]
    t = timeline(events, now=130.0)
    assert (t["open"], t["end"], t["waits"], t["model"]) == (
        True,
        30.0,
        [{"start": 2.0, "end": None}],
        [{"n": 1, "start": 0.0, "end": 1.0}],
    )
    running = timeline(events[:4], now=101.5)
    assert running["calls"][0]["end"] is None and running["end"] == 1.5


def test_events_without_times_take_the_time_before_them() -> None:
    events = [
        (ev(TurnStarted, 0), None),
        (ev(TextDelta, 1, text="x"), 5.0),
        (ev(Finish, 2, finish_reason="stop"), None),
    ]
    assert timeline(events)["model"] == [{"n": 1, "start": 0.0, "end": 5.0}]


def test_pending_calls_are_those_asked_and_not_answered_the_childrens_included() -> None:
    events = paused_then_stopped()[:6]
    child_request = ev(ToolApprovalRequest, 6, call_id="k1", name="append_key", arguments={}, child_turn_id="turn_k")
    events.append((child_request, 103.0))
    assert [(p["turn_id"], p["call_id"], p["arguments"]) for p in pending_from_events(events)] == [
        (T, "c1", {"text": "<b>"}),
        ("turn_k", "k1", {}),
    ]
    child_started = {
        "child_turn_id": "turn_k",
        "event": ev(ToolCallStarted, 3, turn_id="turn_k", call_id="k1", name="append_key").model_dump(mode="json"),
    }
    events.append((ev(ToolProgress, 7, call_id="c9", data=child_started), 104.0))
    assert [p["call_id"] for p in pending_from_events(events)] == ["c1"]
    assert pending_from_events(paused_then_stopped()) == []


def test_a_row_says_status_round_and_what_waits() -> None:
    events = paused_then_stopped()
    line = row(T, events[:6], children=["turn_k"])
    assert {k: line[k] for k in ("status", "round", "waiting_since", "pending_approvals", "children")} == {
        "status": "awaiting_approval",
        "round": 0,
        "waiting_since": 102.0,
        "pending_approvals": ["c1"],
        "children": ["turn_k"],
    }
    assert (row(T, events)["status"], row(T, events)["finish_reason"]) == ("finished", "stopped")
    assert [c["call_id"] for c in running_calls(events[:4])] == ["c2"]
    assert running_calls(events) == []


def test_the_numbers_are_those_the_metrics_report() -> None:
    events = paused_then_stopped()
    rows = [row(T, events), row("turn_b", [(ev(TurnStarted, 0, turn_id="turn_b"), 200.0)])]
    by_turn = {T: events, "turn_b": [(ev(TurnStarted, 0, turn_id="turn_b"), 200.0)]}
    assert numbers(rows, by_turn.__getitem__, now=210.0) == {
        "greenroom.turns.live": 1,
        "greenroom.turns.waiting": 0,
        "greenroom.approval.oldest_wait": 0.0,
        "gen_ai.client.token.usage": {"input": 30, "output": 9},
        "gen_ai.execute_tool.duration": [
            {"tool": "add", "outcome": "success", "count": 1, "mean": 1.0},
            {"tool": "publish", "outcome": "success", "count": 1, "mean": 1.0},
        ],
        "greenroom.turn.interruptions": [{"kind": "stop", "cause": "user", "count": 1}],
    }


def _state(turn_id: str = T) -> TurnState:
    provider = ProviderConfig(base_url="http://127.0.0.1:1/v1", model="m")
    return TurnState(turn_id=turn_id, root_turn_id=turn_id, provider=provider, messages=[ChatMessage.user("hi")])


def test_the_store_keeps_when_each_event_was_written_and_a_version_that_changes(store_location: str) -> None:
    from messages import encode

    store = open_store(store_location)
    assert store.log.version() == (0.0, 0) and store.log.version(T) is None
    state = _state()
    state.updated_at = 50.0
    started = ev(TurnStarted, 0)
    save(store, state, [(0, started.kind, encode(started))])
    ((event, at),) = store.log.timed_events(T)
    assert event == started and at is not None
    assert store.log.version() == (50.0, 1) and store.log.version(T) == (50.0, 0)
    state.updated_at = 51.0
    save(store, state, [])
    assert store.log.version(T) == (51.0, 0)


def test_a_store_written_before_events_had_times_gets_the_column_and_reads_as_none(tmp_path: Path) -> None:
    from messages import encode

    path = tmp_path / "old.db"
    SQLiteStore(path).close()
    started = ev(TurnStarted, 0)
    with sqlite3.connect(path) as conn:  # as release 0.1.0 left it: no time column
        conn.execute("DROP TABLE events")
        conn.execute(
            "CREATE TABLE events (turn_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (turn_id, seq))"
        )
        conn.execute("INSERT INTO events VALUES (?, 0, ?, ?)", (T, started.kind, encode(started)))
    store = SQLiteStore(path)
    assert store.log.timed_events(T) == [(started, None)]
    assert store.log.events(T) == [started]


def test_with_a_snapshot_the_timeline_also_marks_when_a_stop_was_asked_for() -> None:
    from actors.console.model import view
    from messages import Marker

    state = _state()
    state.stop = Marker(kind="stop", reason="enough", at=112.0, cause="user", by="ops")
    events = paused_then_stopped()
    page = view(T, events, line=row(T, events), pending=[], state=state)
    assert page["timeline"]["marks"] == [
        {"at": 12.5, "kind": "stopped", "cause": "user", "label": "Agent run stopped", "by": None},
        {"at": 12.0, "kind": "stop_requested", "cause": "user", "label": "enough", "by": "ops"},
    ]
    assert page["stop"] == {"reason": "enough", "at": 112.0, "cause": "user", "grace": None, "by": "ops"}


def test_a_forked_turns_page_says_where_it_came_from_from_its_first_event_or_its_snapshot() -> None:
    from actors.console.model import view
    from messages import ForkOrigin, TurnStarted

    origin = ForkOrigin(turn_id="turn_0", at=3, at_seq=5)
    events = [(TurnStarted(turn_id=T, seq=0, forked_from=origin), 100.0)]
    page = view(T, events, line=row(T, events), pending=[])
    assert page["forked_from"] == {"turn_id": "turn_0", "at": 3, "at_seq": 5, "replaced": False}
    state = _state()
    state.forked_from = ForkOrigin(turn_id="turn_1", at=2, replaced=True)
    page = view(T, paused_then_stopped(), line=row(T, paused_then_stopped()), pending=[], state=state)
    assert page["forked_from"] == {"turn_id": "turn_1", "at": 2, "at_seq": None, "replaced": True}
    assert view(T, paused_then_stopped(), line=row(T, paused_then_stopped()), pending=[])["forked_from"] is None
