"""Seeded fault scenarios for whole turns: every fault ends in one Finish, a valid history, no process, no hang.

A ``Scenario`` is built from ``random.Random(seed)`` alone: the model's replies (parallel
calls of every kind, gated calls, provider faults before, during and instead of a stream),
the turn's options, how approvals are answered, and one control action (stop, cancel,
cancel with a grace, stop_tool, or killing a TurnHost or a tool process) with the moment it
happens, defined as "right after the n-th event of a kind" (event-driven, never a sleep).

``run_scenario`` drives one turn through the public API only (``Runtime.run``, the handle's
``events(timeout)`` and controls, ``Runtime.control``), bounded in time, and returns an
``Outcome``; ``check`` lists every way the outcome breaks the runtime's promises (README):

- the events are numbered 0..n-1 and end with exactly one terminal ``Finish``; a turn that
  ends ``error``, ``stopped`` or ``cancelled`` says why in an ``Error`` just before it;
- the final history pairs every tool call with exactly one tool message, and the scripted
  provider (which answers 400 to unpaired calls) accepts it followed by a new user message;
  no request the turn itself sent was refused;
- every call gets exactly one ``ToolFinished`` whose content is its tool message; the text
  the caller saw is the assistant text of the history; every failed attempt before the
  first delta was announced by a ``TurnRetrying`` and nothing more was asked of the model;
- an accepted stop ends ``stopped``, an accepted cancel ``cancelled``, an accepted
  ``stop_tool`` interrupts that call; a denied call never runs and reads ``Rejected: ...``;
  approved calls followed at once by a stop or cancel (inside the approval window) never
  start; a second answer for a call is refused; a command after the end changes nothing;
- a side effect of a call that is not ``retry_safe`` happens at most once;
- every process a tool reported is gone once the turn ended (plus the stop grace);
- nothing waits for ever: each wait is bounded and one that runs out is a hang.

The harness reports; it never repairs. A violation names the seed, so
``Scenario.generate(seed)`` replays it (the protocol's own timing aside). ``KNOWN_BUGS``
lists the product bugs it found, each with the symptoms it explains, so that callers can
report those as known (an xfail naming the bug) and still fail on anything else; ``reap``
kills what a scenario was found to leave behind, once that is recorded.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx

from actors import ControlRejected, Runtime, TurnTimeout
from actors.client.handle import TurnHandle
from actors.lifecycle.processes import alive, descendants, end_processes, group_processes, session_processes
from actors.providers.openai import to_openai_message
from actors.testing import Reply, Request, ScriptedProvider, call, fail, raw_response, say, use_tools
from actors.tools.definition import Tool
from actors.turn.history import history_problems
from actors.turn.results import interrupted_content, unreported_note, with_note
from actors.turn.sanitize import safe_text
from messages import (
    CancelTurn,
    ChatMessage,
    Error,
    Finish,
    RetryPolicy,
    StopTurn,
    TextDelta,
    Timeouts,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolCallStarted,
    ToolFinished,
    ToolProgress,
    TurnEvent,
    TurnOptions,
    TurnRetrying,
    whole_history,
)

from . import fault_tools as F
from . import tools_for_tests as T
from .helpers import wait_until

__all__ = [
    "CALL_WEIGHTS",
    "CONTROL_WEIGHTS",
    "FAULT_WEIGHTS",
    "KNOWN_BUGS",
    "CallPlan",
    "Control",
    "FaultProvider",
    "KnownBug",
    "ModelReply",
    "Outcome",
    "Scenario",
    "check",
    "explain",
    "kill_scenario",
    "reap",
    "run_scenario",
]

# -- what scenarios are drawn from (weights, not probabilities) ---------------------------------

#: The kind of each parallel call the model asks for.
CALL_WEIGHTS: dict[str, float] = {
    "sync": 3,  # add
    "effect": 3,  # a side effect (its key recorded), then a short blocking sleep
    "async": 2,  # an async def tool that sleeps
    "blocking": 2,  # a plain sleep, deaf to stop and cancel
    "raising": 2,  # boom
    "subprocess": 2,  # run_command: a shell with a background sleep
    "naive": 1.5,  # children started the naive ways (Popen, orphaned sleep, setsid daemon, multiprocessing)
    "cooperative": 1,  # checks throw_if_requested between short steps
    "gated": 3,  # needs approval; records its key if it runs
    "weird": 1,  # returns a lone surrogate
    "surrogate_args": 1,  # a lone surrogate in the arguments
    "deep": 1,  # a raw arguments string nested 300-1000 deep
    "bad_json": 0.5,  # arguments that are not JSON
    "unknown": 0.5,  # a tool the turn does not offer
}

#: What goes wrong with one model reply.
FAULT_WEIGHTS: dict[str, float] = {
    "none": 8,
    "http500": 1.5,  # HTTP 500 before the first delta, then the reply (retried)
    "http429": 1.5,  # HTTP 429 with Retry-After before the first delta, then the reply (retried)
    "http500_429": 0.5,  # both, then the reply (the third and last attempt)
    "exhausted": 0.3,  # three 503s: retries run out
    "cut": 1,  # the connection closes mid-body (retried if no text was streamed yet)
    "stall": 0.7,  # the stream goes silent past the read timeout (0.5 s)
    "malformed": 0.7,  # a data line that is not JSON
    "error_mid": 0.3,  # an {"error": ...} object mid-stream
    "html": 0.5,  # a 200 HTML page instead of an event stream
    "empty": 0.2,  # a 200 event stream with no data at all
    "non_streaming": 1,  # a 200 non-streaming chat.completion (a server ignoring stream: true)
    "no_done": 0.3,  # a stream that ends without [DONE]
}

#: The one control action of a scenario (kills only where allowed).
CONTROL_WEIGHTS: dict[str, float] = {
    "none": 3,
    "stop": 3,
    "cancel": 2,
    "cancel_grace": 1.5,
    "stop_tool": 1.5,  # a long call once it runs, or (30%) a gated call while it waits for approval
    "approve_then_stop": 0.7,  # approve every pending call, then stop at once: the approved calls never start
    "approve_then_cancel": 0.5,
    "kill_tool": 1,
    "kill_host": 1,
}

#: How the gated calls of a scenario are answered.
APPROVAL_WEIGHTS: dict[str, float] = {
    "approve_all": 3,  # turn.approve per call
    "deny_all": 2,  # turn.deny per call, with a reason
    "deny_rest": 2,  # turn.respond([first approved], deny_rest=True)
    "mixed": 2,  # one respond() with a decision per call
    "early": 1.5,  # answered at each ToolApprovalRequest, before the pause
    "timeout": 0.5,  # never answered: approval_timeout denies them
}

#: The moment of a stop or cancel: right after the n-th event of this kind.
TRIGGER_WEIGHTS: dict[str, float] = {
    "turn_started": 1,
    "text_delta": 2,
    "tool_call_started": 2,
    "tool_progress": 2,
    "tool_finished": 1.5,
    "turn_retrying": 1,
    "tool_approval_request": 1,
    "awaiting_approval": 1,
    "finish": 0.5,  # after the terminal Finish: must change nothing
}

#: The reason given with a stop, cancel or stop_tool, and with a denial ("" / none: no reason).
CONTROL_REASONS: dict[str, float] = {"user pressed stop": 3, "budget spent": 3, "": 1.5, "odd \ud800 reason": 1}
DENY_REASONS: dict[str, float] = {"not now": 3, "policy says no": 3, "<none>": 1.5, "": 0.5, "bad \ud800 reason": 1}

KILL_HOST_MOMENTS = ("inline_tool", "streaming", "tool_running", "paused")
KILL_TOOL_TARGETS = ("long_block", "long_naive")
LONG_KINDS = ("long_block", "long_shell", "long_naive", "long_async", "long_wait")

SURROGATE = "\ud800"
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo")
STOP_GRACE = 0.2
READ_TIMEOUT = 0.5
RETRY = RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.05)
APPROVAL_TIMEOUT = 0.4
APPROVE_THEN_WINDOW = 1.0  # approve_then_*: the approval window the stop or cancel must land in
PROCESS_EXITED = "its process exited before the call finished"
HARNESS_STOP = "the fault harness saw a hang"


def _kind(event: TurnEvent) -> str:
    """An event's ``kind`` (every concrete event class declares one)."""
    return str(event.kind)


def _pick(rng: random.Random, weights: dict[str, float]) -> str:
    names = list(weights)
    return rng.choices(names, [weights[n] for n in names])[0]


# -- a scenario -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallPlan:
    """One call the model asks for. ``args`` values ``@keys``/``@marker`` become paths at run time;
    ``raw`` (when set) is sent as the arguments string as it is."""

    kind: str
    name: str
    id: str  # the id the model sends
    actual_id: str  # the id in the history (a repeated id becomes <id>_2)
    args: dict[str, Any] = field(default_factory=dict)
    raw: str | None = None
    decision: str = "approve"  # for gated calls under "mixed"/"early": approve | deny


@dataclass(frozen=True)
class ModelReply:
    """One model response and what goes wrong with it."""

    calls: tuple[CallPlan, ...] = ()
    text: str = ""
    fault: str = "none"
    at: int = 1  # the part at which a cut, stall, malformed line or error happens
    delay: float = 0.0
    pieces: int = 4
    finish_reason: str | None = None


@dataclass(frozen=True)
class Control:
    """The scenario's control action and its moment: right after the ``nth`` event of kind
    ``trigger`` (for a call's events, of call ``call_id`` if set). Kills count their
    events from the moment the pid to kill is known."""

    action: str = "none"
    trigger: str = "turn_started"
    nth: int = 1
    call_id: str | None = None
    grace: float | None = None
    reason: str = "fault harness"
    moment: str = ""  # kill_host: inline_tool | streaming | tool_running | paused


@dataclass(frozen=True)
class Scenario:
    """Everything one seeded turn does; ``Scenario.generate(seed)`` draws it."""

    seed: int
    replies: tuple[ModelReply, ...]
    control: Control
    approval: str = "approve_all"
    double_answer: bool = False  # answer a decided call again (must be refused)
    deny_reason: str | None = "not now"
    max_rounds: int = 10
    stall: bool = False
    approval_window: float = 0.05

    # -- generation ---------------------------------------------------------------------------

    @classmethod
    def generate(cls, seed: int, *, kills: bool = True) -> Scenario:
        """The scenario of ``seed``: the same seed always gives the same scenario."""
        rng = random.Random(seed)
        weights = (
            dict(CONTROL_WEIGHTS) if kills else {k: v for k, v in CONTROL_WEIGHTS.items() if not k.startswith("kill")}
        )
        action = _pick(rng, weights)
        if action == "kill_host":
            return kill_scenario(seed, "host", rng.choice(KILL_HOST_MOMENTS), rng)
        if action == "kill_tool":
            return kill_scenario(seed, "tool", rng.choice(KILL_TOOL_TARGETS), rng)
        n_rounds = int(_pick(rng, {"0": 1, "1": 4, "2": 3, "3": 2}))
        replies = [_tool_reply(rng, r + 1) for r in range(n_rounds)]
        replies.append(_text_reply(rng))
        if action.startswith("approve_then"):
            replies = _ensure_gated(rng, replies)
        control = _random_control(rng, action, replies)
        if control.call_id is not None and control.call_id.endswith("long"):
            replies = _ensure_target(rng, replies, control)
        max_rounds = 10
        if n_rounds >= 2 and rng.random() < 0.08:
            max_rounds = n_rounds - 1  # the turn ends max_rounds before its last tool round
        approval = "approve_all" if action.startswith("approve_then") else _pick(rng, APPROVAL_WEIGHTS)
        drawn = _pick(rng, DENY_REASONS)
        deny_reason = None if drawn == "<none>" else drawn
        return cls(
            seed=seed,
            replies=tuple(replies),
            control=control,
            approval=approval,
            double_answer=rng.random() < 0.25,
            deny_reason=deny_reason,
            max_rounds=max_rounds,
            stall=any(r.fault == "stall" for r in replies),
            approval_window=APPROVE_THEN_WINDOW if action.startswith("approve_then") else 0.05,
        )

    # -- what the turn gets -----------------------------------------------------------------

    @property
    def prompt(self) -> str:
        return f"fault scenario {self.seed}"

    @property
    def calls(self) -> list[CallPlan]:
        return [c for r in self.replies for c in r.calls]

    def tools(self) -> list[Tool]:
        """The tools offered: every one a call names (an unknown name is not offered), and ``add``."""
        by_name = {t.spec.name: t for t in _ALL_TOOLS}
        names = dict.fromkeys(["add", *(c.name for c in self.calls)])
        return [by_name[n] for n in names if n in by_name]

    def options(self) -> TurnOptions:
        timeout = APPROVAL_TIMEOUT if self.approval == "timeout" else None
        return TurnOptions(
            stop_grace=STOP_GRACE,
            max_rounds=self.max_rounds,
            approval_timeout=timeout,
            approval_window=self.approval_window,
        )

    def provider_kwargs(self) -> dict[str, Any]:
        timeouts = Timeouts(connect=5, read=READ_TIMEOUT) if self.stall else Timeouts(connect=5, read=30)
        return {"timeouts": timeouts, "retry": RETRY}

    def script(self, workdir: Path) -> list[Reply]:
        """The provider's replies, in the order the turn will ask for them (retries included)."""
        out: list[Reply] = []
        for r in self.replies:
            out.extend(_render(r, workdir, self.seed))
        return out

    def describe(self) -> str:
        """One line per reply and one for the control: enough to read a failure."""
        lines = [f"seed {self.seed}: approval={self.approval} double={self.double_answer} max_rounds={self.max_rounds}"]
        for i, r in enumerate(self.replies, 1):
            calls = ", ".join(f"{c.actual_id}:{c.kind}" for c in r.calls) or f"text({len(r.text)})"
            lines.append(f"  reply {i}: fault={r.fault}@{r.at} delay={r.delay:g} {calls}")
        c = self.control
        lines.append(f"  control: {c.action} after {c.trigger}#{c.nth} call={c.call_id} grace={c.grace} {c.moment}")
        return "\n".join(lines)


def _words(rng: random.Random, n: int, surrogate: bool) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    if surrogate:
        words.insert(rng.randrange(len(words) + 1), f"bad{SURROGATE}text")
    return " ".join(words)


def _call_plan(rng: random.Random, kind: str, call_id: str) -> CallPlan:
    """A call of ``kind``; paths are placeholders filled in at run time."""
    if kind == "sync":
        return CallPlan(kind, "add", call_id, call_id, {"a": rng.randint(-9, 99), "b": rng.randint(0, 99)})
    if kind == "effect":
        return CallPlan(kind, "effect", call_id, call_id, {"path": "@keys", "seconds": rng.choice([0.0, 0.05, 0.2])})
    if kind == "async":
        return CallPlan(kind, "async_sleeper", call_id, call_id, {"seconds": rng.choice([0.05, 0.2, 0.4])})
    if kind == "blocking":
        return CallPlan(kind, "block", call_id, call_id, {"seconds": rng.choice([0.1, 0.3, 0.6])})
    if kind == "raising":
        return CallPlan(kind, "boom", call_id, call_id, {"message": rng.choice(["kaboom", f"bad {SURROGATE}"])})
    if kind == "subprocess":
        command = rng.choice(["sleep 1 & echo started", "sleep 0.2; echo done", "sleep 0.3 & sleep 0.1"])
        return CallPlan(kind, "shell", call_id, call_id, {"command": command})
    if kind == "naive":
        return CallPlan(kind, "spawn_naive", call_id, call_id, {"stubborn": False})
    if kind == "cooperative":
        return CallPlan(kind, "cooperative", call_id, call_id, {"marker": "@marker", "steps": rng.randint(2, 10)})
    if kind == "gated":
        decision = rng.choice(["approve", "deny"])
        return CallPlan(kind, "gated_effect", call_id, call_id, {"path": "@keys"}, decision=decision)
    if kind == "weird":
        return CallPlan(kind, "weird_text", call_id, call_id, {})
    if kind == "surrogate_args":
        return CallPlan(kind, "echo", call_id, call_id, {"text": f"x{SURROGATE}y"})
    if kind == "deep":
        depth = rng.randint(300, 1000)
        return CallPlan(kind, "add", call_id, call_id, raw='{"a": ' + "[" * depth + "]" * depth + ', "b": 1}')
    if kind == "bad_json":
        return CallPlan(kind, "add", call_id, call_id, raw=rng.choice(['{"a": 1,', "[1, 2]", "null", '{"a": "x"}']))
    if kind == "unknown":
        return CallPlan(kind, "no_such_tool", call_id, call_id, {"x": 1})
    # calls that run until something ends them (a stop, stop_tool or a kill)
    if kind == "long_block":
        return CallPlan(kind, "block", call_id, call_id, {"seconds": 30})
    if kind == "long_shell":
        return CallPlan(kind, "shell", call_id, call_id, {"command": "sleep 300 & sleep 300"})
    if kind == "long_naive":
        return CallPlan(kind, "spawn_naive", call_id, call_id, {"stubborn": True})
    if kind == "long_async":
        return CallPlan(kind, "async_sleeper", call_id, call_id, {"seconds": 300})
    if kind == "long_wait":
        return CallPlan(kind, "wait_for_stop", call_id, call_id, {"marker": "@marker"})
    if kind == "host_pid":
        return CallPlan(kind, "host_pid", call_id, call_id, {"wait": False})
    if kind == "host_pid_wait":
        return CallPlan(kind, "host_pid", call_id, call_id, {"wait": True})
    raise ValueError(f"unknown call kind {kind!r}")


def _tool_reply(
    rng: random.Random, round_: int, kinds: list[str] | None = None, fault: str | None = None
) -> ModelReply:
    n = int(_pick(rng, {"1": 3, "2": 3, "3": 2, "4": 1}))
    kinds = kinds if kinds is not None else [_pick(rng, CALL_WEIGHTS) for _ in range(n)]
    calls = [_call_plan(rng, k, f"r{round_}c{i + 1}") for i, k in enumerate(kinds)]
    if len(calls) >= 2 and rng.random() < 0.12:  # two calls sharing one id in one response
        shared = calls[0].id
        calls[1] = CallPlan(
            calls[1].kind, calls[1].name, shared, f"{shared}_2", calls[1].args, calls[1].raw, calls[1].decision
        )
    text = _words(rng, 3, rng.random() < 0.1) if rng.random() < 0.2 else ""
    return ModelReply(
        calls=tuple(calls),
        text=text,
        fault=fault if fault is not None else _pick(rng, FAULT_WEIGHTS),
        at=rng.randint(0, 3),
        delay=rng.choice([0.0, 0.0, 0.01, 0.03]),
        pieces=rng.randint(1, 4),
    )


def _text_reply(rng: random.Random, fault: str | None = None, slow: bool = False) -> ModelReply:
    pieces = rng.randint(4, 12)
    return ModelReply(
        text=_words(rng, pieces + rng.randint(0, 6), rng.random() < 0.15),
        fault=fault if fault is not None else _pick(rng, FAULT_WEIGHTS),
        at=rng.randint(1, pieces - 1),
        delay=rng.choice([0.02, 0.04]) if slow else rng.choice([0.0, 0.005, 0.02]),
        pieces=pieces,
        finish_reason="length" if rng.random() < 0.05 else None,
    )


def _random_control(rng: random.Random, action: str, replies: list[ModelReply]) -> Control:
    reason = _pick(rng, CONTROL_REASONS)
    if action == "none":
        return Control()
    if action.startswith("approve_then"):
        return Control(action, "awaiting_approval", 1, None, None, reason)
    gated = [c for r in replies for c in r.calls if c.kind == "gated"]
    if action == "stop_tool" and gated and rng.random() < 0.3:  # a call that waits for its approval
        return Control(
            action, "tool_approval_request", 1, rng.choice(gated).actual_id, None, reason or "stop requested"
        )
    if action == "stop_tool" or (action in ("stop", "cancel_grace") and rng.random() < 0.4):
        # a long call, ended by the action itself, right after it started or reported
        target = f"r{rng.randint(1, max(1, len(replies) - 1))}long"
        trigger = rng.choice(["tool_call_started", "tool_progress"])
        grace = rng.choice([0.05, 0.2]) if action == "cancel_grace" else None
        return Control(action, trigger, 1, target, grace, reason or "stop requested")
    grace = rng.choice([0.05, 0.2, 0.5]) if action == "cancel_grace" else None
    trigger = _pick(rng, TRIGGER_WEIGHTS)
    nth = int(_pick(rng, {"1": 5, "2": 2, "3": 1}))
    return Control(action, trigger, nth, None, grace, reason)


def _ensure_gated(rng: random.Random, replies: list[ModelReply]) -> list[ModelReply]:
    """Make sure some tool round asks for a gated call (turning the text reply into one if need be)."""
    if any(c.kind == "gated" for r in replies for c in r.calls):
        return replies
    tool_rounds = [i for i, r in enumerate(replies) if r.calls]
    index = rng.choice(tool_rounds) if tool_rounds else len(replies) - 1
    reply = replies[index] if replies[index].calls else _tool_reply(rng, index + 1, kinds=[], fault="none")
    calls = list(reply.calls)
    calls.insert(rng.randint(0, len(calls)), _call_plan(rng, "gated", f"r{index + 1}gate"))
    replies = list(replies)
    replies[index] = ModelReply(tuple(calls), reply.text, reply.fault, reply.at, reply.delay, reply.pieces)
    if index == len(replies) - 1:
        replies.append(_text_reply(rng))
    return replies


def _ensure_target(rng: random.Random, replies: list[ModelReply], control: Control) -> list[ModelReply]:
    """Put the long call the control aims at into the round its id names (making that round a tool round)."""
    assert control.call_id is not None
    round_ = int(control.call_id[1 : control.call_id.index("long")])
    kind = rng.choice(LONG_KINDS)
    plan = _call_plan(rng, kind, control.call_id)
    index = round_ - 1
    reply = replies[index]
    if not reply.calls:
        reply = _tool_reply(rng, round_, kinds=[], fault="none")
    calls = list(reply.calls)
    calls.insert(rng.randint(0, len(calls)), plan)
    replies = list(replies)
    replies[index] = ModelReply(tuple(calls), reply.text, reply.fault, reply.at, reply.delay, reply.pieces)
    if index == len(replies) - 1:
        replies.append(_text_reply(rng))
    return replies


def kill_scenario(seed: int, what: str, moment: str, rng: random.Random | None = None) -> Scenario:
    """A scenario that kills a process of the runtime mid-turn.

    ``what="host"``: the turn's TurnHost (its TurnActor and LLMActor live there), whose pid
    an inline ``host_pid`` call reports in round 1; ``moment`` is ``inline_tool`` (during
    that call), ``streaming`` (during the next reply's stream), ``tool_running`` (while a
    call of round 2 runs in a tool process) or ``paused`` (waiting for an approval).
    ``what="tool"``: the tool process of a long call (``long_block`` or ``long_naive``, a
    call with naive children), killed right after it reported its pid.
    """
    rng = rng or random.Random(seed)
    extra = [_pick(rng, {k: v for k, v in CALL_WEIGHTS.items() if k != "gated"}) for _ in range(rng.randint(0, 2))]
    if what == "tool":
        kinds = extra + [moment]
        rng.shuffle(kinds)
        first = _tool_reply(rng, 1, kinds=kinds, fault=rng.choice(["none", "none", "http500", "non_streaming"]))
        target = next(c.actual_id for c in first.calls if c.kind == moment)
        replies = [first, _text_reply(rng, fault="none")]
        control = Control("kill_tool", "tool_progress", 1, target, moment=moment)
        return Scenario(seed, tuple(replies), control, approval="approve_all")
    if moment == "inline_tool":
        first = _tool_reply(rng, 1, kinds=["host_pid_wait", *extra], fault="none")
        replies = [first, _text_reply(rng, fault="none")]
        control = Control("kill_host", "tool_progress", 1, "r1c1", moment=moment)
        return Scenario(seed, tuple(replies), control)
    first = _tool_reply(rng, 1, kinds=["host_pid", *extra], fault=rng.choice(["none", "http429"]))
    if moment == "streaming":
        second = _text_reply(rng, fault="none", slow=True)
        control = Control("kill_host", "text_delta", 1, moment=moment)
        return Scenario(seed, (first, second), control)
    if moment == "tool_running":
        second = _tool_reply(rng, 2, kinds=["long_block", *extra], fault="none")
        control = Control("kill_host", "tool_progress", 1, "r2c1", moment=moment)
    else:
        second = _tool_reply(rng, 2, kinds=["gated", *extra], fault="none")
        control = Control("kill_host", "awaiting_approval", 1, moment=moment)
    return Scenario(seed, (first, second, _text_reply(rng, fault="none")), control)


# -- rendering the script ------------------------------------------------------------------------


def _fill(value: Any, workdir: Path, seed: int) -> Any:
    if value == "@keys":
        return str(workdir / f"keys-{seed}.txt")
    if value == "@marker":
        return str(workdir / f"marker-{seed}")
    return value


def _render(r: ModelReply, workdir: Path, seed: int) -> list[Reply]:
    """The replies the provider plays for one model response, its failed attempts first."""
    if r.calls:
        specs = [
            call(
                c.name, c.raw if c.raw is not None else {k: _fill(v, workdir, seed) for k, v in c.args.items()}, id=c.id
            )
            for c in r.calls
        ]
        main = use_tools(*specs, fragments=r.pieces, text=r.text or None, delay=r.delay)
    else:
        main = say(r.text, pieces=r.pieces, delay=r.delay)
        if r.finish_reason is not None:
            main = main.but(finish_reason=r.finish_reason)
    parts = len(main.parts)
    at = max(0, min(r.at, parts))
    f = r.fault
    if f == "http500":
        return [fail(500, "scripted 500"), main]
    if f == "http429":
        return [fail(429, "scripted 429", retry_after=0.05), main]
    if f == "http500_429":
        return [fail(500, "scripted 500"), fail(429, "scripted 429", retry_after=0.01), main]
    if f == "exhausted":
        return [fail(503, "scripted 503")] * 3
    if f == "cut":
        return [
            main.but(cut_after=max(1, min(at, parts - 1)) if parts > 1 else 1),
            main,
        ]  # the retry, if any, gets main
    if f == "stall":
        return [main.but(stall_after=at)]
    if f == "malformed":  # before a part that exists, or the server would never send it
        return [main.but(malformed_after=min(at, parts - 1))]
    if f == "error_mid":
        return [main.but(error_after=min(at, parts - 1))]
    if f == "html":
        return [raw_response(200, "text/html; charset=utf-8", b"<!doctype html><html><body>Bad gateway</body></html>")]
    if f == "empty":
        return [raw_response(200, "text/event-stream", b"")]
    if f == "non_streaming":
        return [main.but(non_streaming=True)]
    if f == "no_done":
        return [main.but(done_marker=False)]
    return [main]


_ALL_TOOLS: list[Tool] = [
    T.add,
    T.async_sleeper,
    T.boom,
    T.shell,
    T.spawn_naive,
    T.cooperative,
    T.weird_text,
    T.wait_for_stop,
    T.host_pid,
    F.effect,
    F.gated_effect,
    F.block,
    F.echo,
]


# -- the provider ------------------------------------------------------------------------------


def _clean(reply: Reply) -> bool:
    """A reply streamed whole: a request for the same round after it is a turn asking again."""
    faulty = (reply.stall_after, reply.cut_after, reply.malformed_after, reply.error_after, reply.hold, reply.error)
    return reply.status == 200 and all(f is None for f in faulty)


class FaultProvider(ScriptedProvider):
    """A scripted provider shared by many scenarios: each turn is served the script registered
    under its first message (the scenario's prompt); any other request is answered ``ok``.
    It still refuses (HTTP 400) any request whose history breaks the tool-call pairing."""

    def __init__(self) -> None:
        super().__init__(responder=self._route)
        self._scripts: dict[str, list[Reply]] = {}
        self._served: dict[str, tuple[int, Reply]] = {}  # prompt -> the last reply served, and its history's length
        self._scripts_lock = threading.Lock()

    def __enter__(self) -> Self:
        self.start()
        return self

    def register(self, prompt: str, script: list[Reply]) -> None:
        with self._scripts_lock:
            self._scripts[prompt] = list(script)

    def unregister(self, prompt: str) -> list[Reply]:
        """Forget a script; return the replies it did not play."""
        with self._scripts_lock:
            self._served.pop(prompt, None)
            return self._scripts.pop(prompt, [])

    def _route(self, request: Request) -> Reply:
        """The next reply of the turn's script; a round asked again after a clean reply (its
        turn was recovered mid-stream: its store or host was lost) gets that reply again."""
        messages = request.messages
        first = messages[0].get("content") if messages else None
        with self._scripts_lock:
            script = self._scripts.get(first) if isinstance(first, str) else None
            if script is None:
                return say("ok")
            last = self._served.get(first)  # type: ignore[arg-type]
            if last is not None and last[0] == len(messages) and _clean(last[1]):
                return last[1]
            if not script:
                return fail(500, f"the script of {first!r} has no reply left")
            reply = script.pop(0)
            self._served[first] = (len(messages), reply)  # type: ignore[index]
            return reply

    def requests_of(self, prompt: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.messages and r.messages[0].get("content") == prompt]

    def forget_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def accepts(self, messages: list[ChatMessage]) -> tuple[int, str]:
        """POST ``messages`` plus a new user message, as the conversation's next request would be
        sent; return the status and body (400: the history breaks the pairing rule)."""
        try:
            body = {
                "model": "m",
                "stream": True,
                "messages": [to_openai_message(m) for m in messages] + [{"role": "user", "content": "next"}],
            }
            response = httpx.post(self.base_url + "/chat/completions", json=body, timeout=10)
        except (httpx.HTTPError, UnicodeEncodeError, ValueError) as exc:  # it cannot even be sent (a lone surrogate)
            return -1, f"{type(exc).__name__}: {exc}"
        return response.status_code, response.text[:300]


# -- running a scenario -------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one scenario did, as the caller saw it."""

    scenario: Scenario
    turn_id: str = ""
    events: list[TurnEvent] = field(default_factory=list)
    hang: str | None = None
    elapsed: float = 0.0
    fired: str | None = None  # what the control did: "stop: accepted", "kill_host: pid 123", ...
    control_effective: bool = False  # the turn accepted the stop/cancel/stop_tool and it acted
    control_call: str | None = None  # the call a stop_tool or kill_tool aimed at
    killed_pid: int | None = None
    decisions: dict[str, tuple[bool, str | None]] = field(default_factory=dict)  # call -> (approved, reason), accepted
    refused_answers: list[str] = field(default_factory=list)  # answers refused that should have been accepted
    accepted_duplicates: list[str] = field(default_factory=list)  # second answers the turn accepted
    late: list[str] = field(default_factory=list)  # problems with a command sent after the end
    child_pids: list[int] = field(default_factory=list)  # processes the tools started
    pgids: list[int] = field(default_factory=list)  # process groups run_command started
    runtime_pids: list[int] = field(default_factory=list)  # tool processes and hosts the tools ran in
    leaked: list[int] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    accepted_status: int = 0
    accepted_body: str = ""
    refused_requests: list[str] = field(default_factory=list)  # 400s the turn's own requests got
    requests: int = 0
    unused_replies: int = 0
    errors: list[str] = field(default_factory=list)  # exceptions the harness met
    sent_reasons: list[str] = field(default_factory=list)  # reasons of accepted stops, cancels, stop_tools, denials
    approved_then_halted: list[str] = field(default_factory=list)  # approve_then_*: the calls approved
    # approve_then_*: seconds from sending the approval to the stop's reply, a bound on how long
    # after the approval the host had the stop, whatever the network delayed
    window_gap: float | None = None
    seen_at_hang: int | None = None  # events the caller had when a wait ran out
    withheld: int = 0  # events the turn had produced by then that had not reached the caller
    violations: list[str] = field(default_factory=list)  # filled in by callers of check()

    @property
    def finish(self) -> Finish | None:
        """The terminal Finish, with the turn's whole history (Finish events carry what is new)."""
        last = self.events[-1] if self.events else None
        if not isinstance(last, Finish) or not last.terminal:
            return None
        return last.model_copy(update={"messages": whole_history(self.events), "history_from": 0})

    @property
    def finish_reason(self) -> str:
        f = self.finish
        return f.finish_reason if f is not None else ("hang" if self.hang else "none")

    @property
    def error_type(self) -> str | None:
        errors = [e for e in self.events if isinstance(e, Error)]
        return errors[-1].error_type if errors and self.finish is not None else None

    @property
    def kill_result(self) -> str | None:
        """For a scenario that killed a process: ``error`` (the turn ended with an error),
        ``recovered`` (it ended otherwise), ``hang``; None if nothing was killed."""
        if self.killed_pid is None:
            return None
        if self.hang or self.finish is None:
            return "hang"
        return "error" if self.finish.finish_reason == "error" else "recovered"


class _Driver:
    """Carries one scenario through the public API; see ``run_scenario``."""

    def __init__(self, runtime: Runtime, provider: FaultProvider, scenario: Scenario, workdir: Path) -> None:
        self.rt = runtime
        self.provider = provider
        self.s = scenario
        self.workdir = workdir
        self.out = Outcome(scenario)
        self.handle: TurnHandle | None = None
        self.counts: Counter[str] = Counter()
        self.host_pid: int | None = None
        self.workers: dict[str, int] = {}  # call id -> the tool process it reported
        self.answered: set[str] = set()
        self.fired = False
        self.command_timeout = 10.0  # seconds a command waits for its answer
        self.halted = False  # an accepted stop or cancel
        self.unstick_timeout = 10.0

    # -- the loop ---------------------------------------------------------------------------

    def run(self, event_timeout: float, deadline: float) -> Outcome:
        self.unstick_timeout = min(5.0, event_timeout / 4)
        s, out = self.s, self.out
        self.provider.register(s.prompt, s.script(self.workdir))
        started = time.monotonic()
        end_by = started + deadline
        try:
            self.handle = self.rt.run(
                s.prompt, tools=s.tools(), provider=self.provider.provider(**s.provider_kwargs()), options=s.options()
            )
            out.turn_id = self.handle.turn_id
            while True:
                finish = self._read_run(event_timeout, end_by)
                if finish is None or finish.terminal:
                    break
                self._on_pause(finish)
        except Exception as exc:  # noqa: BLE001 - whatever the driver meets is a finding, reported as one
            out.errors.append(f"{type(exc).__name__}: {exc}")
        out.elapsed = time.monotonic() - started
        if out.hang is not None:
            self._unstick()
        if self.handle is not None:
            out.events = self.handle.all_events
        if (
            out.finish is not None
            and s.control.trigger == "finish"
            and s.control.action in ("stop", "cancel", "cancel_grace", "stop_tool")
        ):
            self._late_control()
        self._after()
        return out

    def _read_run(self, event_timeout: float, end_by: float) -> Finish | None:
        """Read events up to the next Finish; None if that wait ran out (a hang)."""
        assert self.handle is not None
        last: TurnEvent | None = None
        try:
            for event in self.handle.events(timeout=event_timeout):
                last = event
                self._on_event(event)
                if time.monotonic() > end_by:
                    self.out.seen_at_hang = len(self.handle.all_events)
                    self.out.hang = f"the turn was still going at its deadline, after {self.out.seen_at_hang} events"
                    return None
        except TurnTimeout:
            seen = self.handle.all_events
            tail = ", ".join(_kind(e) for e in seen[-4:])
            self.out.hang = f"no event for {event_timeout:g} s after {len(seen)} events (... {tail})"
            self.out.seen_at_hang = len(seen)
            return None
        return last if isinstance(last, Finish) else None

    def _on_event(self, e: TurnEvent) -> None:
        if isinstance(e, ToolProgress):
            self._note_pids(e)
        if isinstance(e, ToolApprovalRequest) and self.s.approval == "early" and not self.halted:
            self._answer([e.call_id])
        kind = "awaiting_approval" if isinstance(e, Finish) and not e.terminal else _kind(e)
        if isinstance(e, Finish) and e.terminal:
            return  # a control after the end is sent by _late_control
        self._maybe_fire(kind, e)

    def _note_pids(self, e: ToolProgress) -> None:
        data = e.data if isinstance(e.data, dict) else {}
        out = self.out
        for pid in data.get("pids") or []:
            if isinstance(pid, int) and pid not in out.child_pids:
                out.child_pids.append(pid)
        if isinstance(data.get("pgid"), int):
            out.pgids.append(data["pgid"])
        for key in ("worker", "pid"):
            pid = data.get(key)
            if isinstance(pid, int):
                if pid not in out.runtime_pids:
                    out.runtime_pids.append(pid)
                if key == "worker":
                    self.workers[e.call_id] = pid
        call = next((c for c in self.s.calls if c.actual_id == e.call_id), None)
        if call is not None and call.kind.startswith("host_pid") and isinstance(data.get("pid"), int):
            self.host_pid = data["pid"]

    # -- the control action -----------------------------------------------------------------

    def _maybe_fire(self, kind: str, e: TurnEvent) -> None:
        c = self.s.control
        if self.fired or c.action == "none" or c.trigger == "finish":
            return
        if kind != c.trigger:
            return
        if c.call_id is not None and getattr(e, "call_id", None) != c.call_id:
            return
        if c.action == "kill_host" and self.host_pid is None:
            return  # kills count their events from the moment the pid is known
        self.counts[kind] += 1
        if self.counts[kind] < c.nth:
            return
        self.fired = True
        self._fire(e)

    def _fire(self, e: TurnEvent) -> None:
        c, out = self.s.control, self.out
        assert self.handle is not None
        turn_id = self.handle.turn_id
        try:
            if c.action == "stop":
                reply = self.rt.control(StopTurn(turn_id=turn_id, reason=c.reason), timeout=self.command_timeout)
                self._note_reply("stop", reply.ok, reply.message)
            elif c.action in ("cancel", "cancel_grace"):
                reply = self.rt.control(CancelTurn(turn_id=turn_id, reason=c.reason, grace=c.grace), timeout=self.command_timeout)
                self._note_reply(c.action, reply.ok, reply.message)
            elif c.action in ("approve_then_stop", "approve_then_cancel") and isinstance(e, Finish):
                pending = list(e.pending_approvals)
                approved_at = time.monotonic()  # the host had the approval after this, and the stop before its reply
                approvals = [ToolApprovalResponse(call_id=x, approved=True) for x in pending]
                self.handle.respond(approvals, timeout=self.command_timeout)
                out.decisions.update({x: (True, None) for x in pending})
                self.answered.update(pending)
                out.approved_then_halted = pending
                if c.action == "approve_then_stop":
                    command: Any = StopTurn(turn_id=turn_id, reason=c.reason)
                else:
                    command = CancelTurn(turn_id=turn_id, reason=c.reason)
                reply = self.rt.control(command, timeout=self.command_timeout)
                out.window_gap = time.monotonic() - approved_at
                self._note_reply(c.action, reply.ok, reply.message)
            elif c.action == "stop_tool":
                target = str(getattr(e, "call_id", None) or c.call_id)
                out.control_call = target
                try:
                    self.handle.stop_tool(target, reason=c.reason, timeout=self.command_timeout)
                    out.fired, out.control_effective = f"stop_tool {target}: accepted", True
                    out.sent_reasons.append(c.reason)
                except ControlRejected as exc:
                    out.fired = f"stop_tool {target}: refused ({exc.code})"
            elif c.action == "kill_host":
                assert self.host_pid is not None
                os.kill(self.host_pid, signal.SIGKILL)
                out.killed_pid, out.fired = (
                    self.host_pid,
                    f"kill_host pid {self.host_pid} after {_kind(e)} ({c.moment})",
                )
            elif c.action == "kill_tool":
                victim = str(getattr(e, "call_id", ""))
                pid = self.workers.get(victim)
                if pid is None:
                    out.errors.append(f"kill_tool: call {victim} reported no pid")
                    return
                out.control_call = victim
                os.kill(pid, signal.SIGKILL)
                out.killed_pid, out.fired = pid, f"kill_tool pid {pid} of {victim} ({c.moment})"
        except ProcessLookupError:
            out.fired = f"{c.action}: the process was already gone"
        except (TurnTimeout, ControlRejected) as exc:
            out.errors.append(f"{c.action} after {_kind(e)}: {type(exc).__name__}: {exc}")

    def _note_reply(self, action: str, ok: bool, message: str) -> None:
        if not ok:
            self.out.errors.append(f"{action} refused: {message}")
            return
        effective = message == ""  # "no effect" / "the turn has already ended" otherwise
        self.out.fired = f"{action}: {'accepted' if effective else message}"
        if effective:
            self.out.sent_reasons.append(self.s.control.reason)
        self.out.control_effective = effective
        self.halted = self.halted or effective

    def _late_control(self) -> None:
        """A command sent after the terminal Finish: it changes nothing, and no event follows."""
        c, out = self.s.control, self.out
        assert self.handle is not None
        before = len(self.handle.all_events)
        turn_id = self.handle.turn_id
        try:
            if c.action == "stop_tool":
                try:
                    self.handle.stop_tool(c.call_id or "r1c1", timeout=self.command_timeout)
                    out.late.append("a stop_tool after the end was accepted")
                except ControlRejected as exc:
                    if exc.code != "turn_finished":
                        out.late.append(f"a stop_tool after the end was refused {exc.code!r}, not 'turn_finished'")
            else:
                command = (
                    StopTurn(turn_id=turn_id, reason=c.reason)
                    if c.action == "stop"
                    else CancelTurn(turn_id=turn_id, reason=c.reason, grace=c.grace)
                )
                reply = self.rt.control(command, timeout=self.command_timeout)
                if not reply.ok or reply.message == "":
                    out.late.append(f"a {c.action} after the end was answered {reply.ok}/{reply.message!r}")
            out.fired = f"{c.action} after the end"
        except TurnTimeout as exc:
            out.late.append(f"a {c.action} after the end got no answer: {exc}")
        try:  # nothing may follow: this bounded wait for one more event must run out
            extra = self.handle.wait_for(lambda e: e.seq >= before, timeout=0.3)
            out.late.append(f"an event followed a {c.action} after the end: {_kind(extra)} (of {before})")
        except TurnTimeout:
            pass

    # -- approvals --------------------------------------------------------------------------

    def _on_pause(self, finish: Finish) -> None:
        if self.halted or (self.fired and self.s.control.action == "kill_host"):
            return
        stopped = self.out.control_call if self.s.control.action == "stop_tool" and self.out.control_effective else None
        pending = [c for c in finish.pending_approvals if c not in self.answered and c != stopped]
        if self.s.approval == "timeout" or not pending:
            return
        self._answer(pending)

    def _decide(self, call_id: str) -> tuple[bool, str | None]:
        s = self.s
        plan = next((c for c in s.calls if c.actual_id == call_id), None)
        if s.approval == "approve_all":
            return True, None
        if s.approval == "deny_all":
            return False, s.deny_reason
        return (plan is None or plan.decision == "approve"), (
            None if plan is None or plan.decision == "approve" else s.deny_reason
        )

    def _answer(self, call_ids: list[str]) -> None:
        s, out = self.s, self.out
        assert self.handle is not None
        if s.approval == "timeout":
            return
        try:
            if s.approval == "deny_rest":
                first = call_ids[0]
                self.handle.respond(
                    [ToolApprovalResponse(call_id=first, approved=True)], deny_rest=True, deny_reason=s.deny_reason,
                    timeout=self.command_timeout,
                )  # fmt: skip
                out.decisions[first] = (True, None)
                for other in call_ids[1:]:
                    out.decisions[other] = (False, s.deny_reason)
            elif s.approval == "mixed":
                decided = {c: self._decide(c) for c in call_ids}
                responses = [ToolApprovalResponse(call_id=c, approved=a, reason=r) for c, (a, r) in decided.items()]
                self.handle.respond(responses, timeout=self.command_timeout)
                out.decisions.update(decided)
            else:
                for c in call_ids:
                    approved, reason = self._decide(c)
                    if approved:
                        self.handle.approve(c, timeout=self.command_timeout)
                    else:
                        self.handle.deny(c, reason=reason, timeout=self.command_timeout)
                    out.decisions[c] = (approved, reason)
        except ControlRejected as exc:
            if not self.halted:
                out.refused_answers.append(f"{call_ids}: {exc.code} {exc}")
        except TurnTimeout as exc:
            out.errors.append(f"approval of {call_ids}: {exc}")
        out.sent_reasons.extend(r or "" for cid, (a, r) in out.decisions.items() if cid in call_ids and not a)
        self.answered.update(call_ids)
        if s.double_answer and call_ids:
            try:
                self.handle.approve(call_ids[0], timeout=self.command_timeout)
                out.accepted_duplicates.append(call_ids[0])
            except ControlRejected as exc:
                if exc.code not in ("duplicate", "not_waiting", "turn_finished"):
                    out.accepted_duplicates.append(f"{call_ids[0]} refused with {exc.code!r}")
            except TurnTimeout as exc:
                out.errors.append(f"second answer for {call_ids[0]}: {exc}")

    # -- after the end ----------------------------------------------------------------------

    def _unstick(self) -> None:
        """After a hang: stop the turn so the next scenario starts clean (reported, not repaired),
        and count the events the turn had produced before that stop but the caller had not seen."""
        if self.handle is None:
            return
        try:
            self.rt.control(StopTurn(turn_id=self.handle.turn_id, reason=HARNESS_STOP), timeout=5)
            self.handle.result(timeout=self.unstick_timeout, final=True)
        except Exception as exc:  # noqa: BLE001 - reported, like the hang itself
            self.out.errors.append(f"after the hang: {type(exc).__name__}: {exc}")
        events = self.handle.all_events
        caused = [
            i
            for i, e in enumerate(events)
            if HARNESS_STOP in (getattr(e, "content", "") or getattr(e, "detail", "") or "")
        ]
        produced = caused[0] if caused else len(events)
        self.out.withheld = max(0, produced - (self.out.seen_at_hang or 0))

    def _after(self) -> None:
        out, s = self.out, self.s
        out.unused_replies = len(self.provider.unregister(s.prompt))
        mine = self.provider.requests_of(s.prompt)
        out.requests = len(mine)
        out.refused_requests = [f"request {i}: HTTP 400" for i, r in enumerate(mine) if r.status == 400]
        def gone() -> bool:  # the worker sweeps what a call left after stop_grace
            return not [p for p in out.child_pids if alive(p)] and not [g for g in out.pgids if group_processes(g)]

        wait_until(gone)
        out.leaked = [p for p in out.child_pids if alive(p)] + [p for g in out.pgids for p in group_processes(g)]
        keys = self.workdir / f"keys-{s.seed}.txt"
        out.keys = keys.read_text().split() if keys.exists() else []
        finish = out.finish
        if finish is not None:
            out.accepted_status, out.accepted_body = self.provider.accepts(list(finish.messages))


def run_scenario(
    runtime: Runtime,
    provider: FaultProvider,
    scenario: Scenario,
    workdir: Path,
    *,
    event_timeout: float = 20.0,
    deadline: float = 60.0,
    command_timeout: float = 10.0,
) -> Outcome:
    """Drive ``scenario`` to its end on ``runtime``; every wait is bounded (``event_timeout``
    between two events, ``deadline`` in all, ``command_timeout`` for a command's answer), and
    one that runs out is reported as a hang."""
    driver = _Driver(runtime, provider, scenario, workdir)
    driver.command_timeout = command_timeout
    return driver.run(event_timeout, deadline)


# -- checking an outcome -----------------------------------------------------------------------


def _tool_messages(messages: list[ChatMessage]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in messages:
        if m.role == "tool" and m.tool_call_id is not None:
            out.setdefault(m.tool_call_id, []).append(m.content or "")
    return out


def check(outcome: Outcome) -> list[str]:
    """Every broken promise in ``outcome`` (see the module docstring); empty when all held."""
    o, s = outcome, outcome.scenario
    v: list[str] = []
    v.extend(f"harness: {e}" for e in o.errors)
    if o.hang is not None:
        v.append(f"hang: {o.hang}")
    if o.withheld:
        v.append(
            f"events withheld: the turn had produced {o.withheld + (o.seen_at_hang or 0)} events before the "
            f"harness stopped it, but the caller had received {o.seen_at_hang}"
        )
    events = o.events
    if [e.seq for e in events] != list(range(len(events))):
        v.append(f"seqs are not 0..{len(events) - 1}: {[e.seq for e in events]}")
    terminal = [i for i, e in enumerate(events) if isinstance(e, Finish) and e.terminal]
    if terminal != [len(events) - 1]:
        v.append(f"terminal Finish at {terminal}, expected exactly one, last, of {len(events)} events")
    finish = o.finish
    if finish is None:
        return v
    reason = finish.finish_reason
    host_lost = o.error_type == "host_lost"
    if reason in ("error", "stopped", "cancelled"):
        before = events[-2] if len(events) >= 2 else None
        if not isinstance(before, Error) or not before.message:
            v.append(f"Finish({reason}) without a clear Error just before it")
        elif reason in ("stopped", "cancelled") and before.error_type != reason:
            v.append(f"Finish({reason}) after Error({before.error_type})")
    problems = history_problems(finish.messages)
    if problems:
        v.append(f"invalid history: {problems}")
    if o.accepted_status != 200:
        v.append(f"the strict provider refused the next request: {o.accepted_status} {o.accepted_body}")
    v.extend(f"the turn's own request was refused: {r}" for r in o.refused_requests)

    # every call: one ToolFinished, whose content is its tool message
    tool_msgs = _tool_messages(finish.messages)
    finished: dict[str, list[ToolFinished]] = {}
    started: Counter[str] = Counter()
    for e in events:
        if isinstance(e, ToolFinished):
            finished.setdefault(e.call_id, []).append(e)
        elif isinstance(e, ToolCallStarted):
            started[e.call_id] += 1
    calls = [tc for m in finish.messages if m.role == "assistant" for tc in m.tool_calls or ()]
    for tc in calls:
        ends = finished.get(tc.id, [])
        if len(ends) != 1 and not host_lost:
            v.append(f"call {tc.id}: {len(ends)} ToolFinished events, expected 1")
        if ends and tool_msgs.get(tc.id) and ends[-1].content != tool_msgs[tc.id][0]:
            content, message = ends[-1].content, tool_msgs[tc.id][0]
            v.append(f"call {tc.id}: ToolFinished content {content!r} is not its tool message {message!r}")
    v.extend(f"call {cid}: started {n} times" for cid, n in started.items() if n > 1)
    if not host_lost:
        seen = _streamed_text(events)
        kept = "".join(m.content or "" for m in finish.messages if m.role == "assistant")
        if seen != kept:
            v.append(f"the text streamed to the caller ({len(seen)} chars) is not the history's ({len(kept)} chars)")

    # every failed attempt before the first delta is announced, and nothing more is asked
    if not host_lost and not o.control_effective:
        assistants = sum(1 for m in finish.messages if m.role == "assistant")
        retries = sum(1 for e in events if isinstance(e, TurnRetrying))
        streams = o.requests - retries
        if not assistants <= streams <= assistants + 1:
            v.append(
                f"{o.requests} provider requests and {retries} TurnRetrying events for {assistants} assistant messages"
            )

    # the control action did what it says
    c = s.control
    if o.control_effective and c.action in ("stop", "approve_then_stop") and reason != "stopped":
        v.append(f"an accepted stop ended the turn {reason!r}")
    if o.control_effective and c.action in ("cancel", "cancel_grace", "approve_then_cancel") and reason != "cancelled":
        v.append(f"an accepted cancel ended the turn {reason!r}")
    gap = o.window_gap
    # the gap bounds the time from the commit timer's start to the command's handling: only a
    # command that surely landed inside the window must have kept the approved calls from starting
    if o.control_effective and gap is not None and gap < s.approval_window:
        for cid in o.approved_then_halted:
            if started[cid]:
                v.append(
                    f"approved call {cid} started although the host had a {c.action} at most {gap * 1000:.1f} ms "
                    f"after the approval, inside its {s.approval_window:g} s window"
                )
            if any(k.endswith(":" + cid) for k in o.keys):
                v.append(f"approved call {cid} had its side effect although a {c.action} followed inside the window")
    if o.control_effective and c.action == "stop_tool" and o.control_call and not host_lost:
        ends = finished.get(o.control_call, [])
        # what its tool process reports: the tool saw its stop, or never started, or ignored
        # it and was ended with its process at the grace
        why = safe_text(c.reason)
        ended = f"the tool did not return within its stop grace ({STOP_GRACE:g} s) and its process was ended"
        wants = [
            interrupted_content(what, why)
            for what in ("the call was stopped", "the call was stopped before it started", ended)
        ]
        # its host lost the store while the call was stopping: the turn, claimed back, ends
        # the call as it was stopped, saying its process never reported (``rules.recover``)
        wants += [with_note(w, unreported_note("store")) for w in wants]
        # a tool that failed because the stop ended its children says so after its note
        raised = [w[: -len('", "data": null}')] + "; it raised " for w in wants]
        content = ends[0].content if ends else ""
        if [e.outcome for e in ends] != ["interrupted"] or not (
            content in wants or any(content.startswith(r) for r in raised)
        ):
            v.append(
                f"stop_tool {o.control_call}: ended {[(e.outcome, e.content) for e in ends]}, expected interrupted"
            )
    if c.action == "kill_tool" and o.killed_pid is not None and o.control_call:
        ends = finished.get(o.control_call, [])
        if ends and ends[0].outcome not in ("failed", "interrupted"):
            v.append(f"kill_tool {o.control_call}: the killed call ended {ends[0].outcome!r}")
        if ends and ends[0].outcome == "failed" and PROCESS_EXITED not in ends[0].content:
            v.append(f"kill_tool {o.control_call}: unclear failure {ends[0].content!r}")
    v.extend(f"late command: {p}" for p in o.late)

    # approvals
    v.extend(f"an answer was refused: {r}" for r in o.refused_answers)
    v.extend(f"a second answer was accepted: {d}" for d in o.accepted_duplicates)
    stopped_early = reason in ("stopped", "cancelled") or host_lost
    stopped_call = o.control_call if c.action == "stop_tool" and o.control_effective else None
    for call_id, (approved, why) in o.decisions.items():
        if call_id == stopped_call:
            continue  # a stop_tool before the decision was committed: interrupted, as checked above
        if approved:
            if not stopped_early and started[call_id] != 1 and call_id in tool_msgs:
                v.append(f"approved call {call_id} never started")
            continue
        if started[call_id]:
            v.append(f"denied call {call_id} was started")
        if not stopped_early and call_id in tool_msgs:
            want = "Rejected: " + ("User denied" if why is None else safe_text(why))
            if tool_msgs[call_id] != [want]:
                v.append(f"denied call {call_id}: tool message {tool_msgs[call_id]!r}, expected {[want]!r}")
    if s.approval == "timeout" and not stopped_early:
        for plan in s.calls:
            if (
                plan.kind == "gated"
                and plan.actual_id != stopped_call  # stop_tool while it waited: interrupted, checked above
                and plan.actual_id in tool_msgs
                and tool_msgs[plan.actual_id] != ["Rejected: Approval timed out"]
            ):
                v.append(
                    f"unanswered call {plan.actual_id}: {tool_msgs[plan.actual_id]!r}, expected the approval timeout"
                )

    # side effects and processes
    for key, n in Counter(o.keys).items():
        if n > 1:
            v.append(f"duplicate side effect: key {key} recorded {n} times")
    denied = {cid for cid, (a, _) in o.decisions.items() if not a}
    for key in o.keys:
        if key.split(":", 1)[-1] in denied:
            v.append(f"a denied call had its side effect: {key}")
    if o.leaked:
        v.append(f"processes left after the turn ended: {sorted(o.leaked)}")
    return v


# -- product bugs this harness found and that are still open (reported, not hidden) ---------------
#
# Found and fixed since, each now a plain test in test_faults.py: a stop, cancel, stop_tool or
# deny reason with a lone surrogate made every event carrying it unencodable and the caller
# waited for ever for a Finish that had been dropped; a host lost while paused left unpaired
# tool calls in the caller's history; a killed tool process orphaned what its call had
# started; run_command waited for a background child that held its pipes (all fixed in
# 63fcb1e); the events of a running turn stopped reaching its caller until the caller sent the
# turn a command (introduced in 63fcb1e, fixed in 085d1fc).


@dataclass(frozen=True)
class KnownBug:
    """An open product bug found by this harness: when ``applies`` holds for an outcome, the
    violations that contain one of ``explains`` are its symptoms. Callers report them as known
    (an xfail naming the bug), never as passing; any other violation still fails. Remove an
    entry once its bug is fixed, or it would hide the bug's return."""

    id: str
    summary: str
    applies: Callable[[Outcome], bool]
    explains: tuple[str, ...]


def _start_refused_mid_turn(o: Outcome) -> bool:
    return any("is already in use" in e for e in o.errors) and any(e.seq > 0 for e in o.events)


KNOWN_BUGS: tuple[KnownBug, ...] = ()
# "start-delivered-twice" (a StartTurn resent after a lost ACK, refused as "already in use" and
# that refusal raised in the middle of the running turn) was fixed with issue 23: a frame is
# acknowledged and dropped when it comes again, and a StartTurn of a turn that runs is a
# re-subscription (tests/test_lossy_network.py catches it by a cut ACK).


def explain(outcome: Outcome, violations: list[str]) -> tuple[list[str], list[str]]:
    """The known bugs behind ``violations`` and the violations none of them explains."""
    bugs = [b for b in KNOWN_BUGS if b.applies(outcome)]
    found: list[str] = []
    left: list[str] = []
    for v in violations:
        match = next((b for b in bugs if any(x in v for x in b.explains)), None)
        if match is None:
            left.append(v)
        elif match.id not in found:
            found.append(match.id)
    return found, left


def format_failure(outcome: Outcome, violations: list[str]) -> str:
    """A failure message: the seed, the scenario, what happened, and every violation."""
    from .helpers import summary

    lines = [
        outcome.scenario.describe(),
        f"  turn {outcome.turn_id}: fired={outcome.fired} finish={outcome.finish_reason}",
    ]
    lines.append(f"  events: {summary(outcome.events)[-12:]}")
    lines.extend(f"  VIOLATION: {x}" for x in violations)
    return "\n".join(lines)


def reap(pids: list[int]) -> list[int]:
    """SIGKILL what was found left behind, once it is recorded, so that it does not outlive the run:
    each pid, its descendants, and the members of its session and of its group (an orphan's
    own children are re-parented away from it, but keep its session). Returns what was killed."""
    targets: set[int] = set()
    for pid in pids:
        targets.add(pid)
        targets.update(descendants(pid))
        targets.update(session_processes(pid))
        targets.update(group_processes(pid))
    targets.discard(os.getpid())
    live = sorted(p for p in targets if alive(p))
    end_processes(live, timeout=2.0)
    return live


def reported_pids(outcomes: list[Outcome]) -> list[int]:
    """Every pid the tools of ``outcomes`` reported (children, tool processes, hosts)."""
    pids: set[int] = set()
    for o in outcomes:
        pids.update(o.child_pids)
        pids.update(o.runtime_pids)
    return sorted(pids)


def json_safe(outcome: Outcome, violations: list[str]) -> dict[str, Any]:
    """A compact record of an outcome for JSON results."""
    return {
        "seed": outcome.scenario.seed,
        "control": outcome.scenario.control.action,
        "fired": outcome.fired,
        "finish": outcome.finish_reason,
        "error_type": outcome.error_type,
        "kill": outcome.kill_result,
        "elapsed_s": round(outcome.elapsed, 3),
        "violations": violations,
        "scenario": outcome.scenario.describe(),
    }


def _streamed_text(events: list[TurnEvent]) -> str:
    """The text a caller keeps from the deltas: a ``TurnRetrying`` right after some (a turn
    recovered mid-stream asks the model again) says to drop the stream's partial text."""
    kept: list[str] = []
    partial: list[str] = []
    for e in events:
        if isinstance(e, TextDelta):
            partial.append(e.text)
            continue
        if not isinstance(e, TurnRetrying):
            kept.extend(partial)
        partial = []
    return "".join(kept + partial)

