"""Turn overhead: a two-round turn (one tool call, then streamed text), N times.

greenroom (TurnActor, LLMActor, a ToolActor per call, on multiprocTCPBase) against a
baseline that does the same work with a minimal hand-written httpx loop in one process,
against the same scripted provider, in the same run. Three cases (all by default):

- quiet: the scripted provider in this process (a thread), nothing else running;
- loaded: the scripted provider in a process of its own, and a process spinning on one of
  the cores (pinned to CPU 0) for the whole case, baseline and greenroom alike;
- apart: the scripted provider in a process of its own and nothing else running (loaded
  without the hog): unlike quiet, the baseline does not share its GIL with the provider.

Targets (issue 33): greenroom at most 2x the baseline (p50) quiet, 3x loaded; apart has none
(the issue's own measurement, its loop against a mock in a separate process, was 6.2x).

    python bench/turn_overhead.py [--turns 200] [--cases quiet,loaded,apart]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from actors import (  # noqa: E402
    Runtime,
    tool,
    trace,  # noqa: E402
)
from actors.providers import OpenAIStream, iter_sse  # noqa: E402
from actors.testing import Request, ScriptedProvider, call, say, use_tools  # noqa: E402
from bench.common import save, summary_ms, table  # noqa: E402
from bench.scale import RemoteProvider  # noqa: E402

HOG = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"
LABELS = {
    "quiet": "quiet (provider in this process)",
    "loaded": "loaded (provider apart, a hog on CPU 0)",
    "apart": "apart (provider apart, nothing else)",
}


@tool
def lookup(key: str) -> dict:
    """Look a key up."""
    return {"key": key, "value": len(key)}


def responder(request: Request):
    if request.messages[-1]["role"] == "user":
        return use_tools(call("lookup", {"key": "alpha"}), usage=None)
    return say("The value of alpha is five, as the lookup said.", usage=None)


def baseline_turn(client: httpx.Client, url: str) -> str:
    """The same turn, by hand: stream, run the tool inline, stream again."""
    messages: list[dict] = [{"role": "user", "content": "look alpha up"}]
    tools = [{"type": "function", "function": {"name": "lookup", "description": "", "parameters": lookup.parameters}}]
    while True:
        acc = OpenAIStream()
        with client.stream("POST", url, json={"model": "m", "messages": messages, "tools": tools, "stream": True}) as r:
            for ev in iter_sse(r.iter_lines()):
                acc.feed(ev.event, ev.data)
                if acc.done:
                    break
        message, _, _ = acc.result()
        calls = message.tool_calls or []
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                **(
                    {
                        "tool_calls": [
                            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                            for c in calls
                        ]
                    }
                    if calls
                    else {}
                ),
            }
        )
        if not calls:
            return message.content or ""
        for c in calls:
            result = lookup.fn(**lookup.validate(json.loads(c.arguments)))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps({"ok": True, "data": result})})


def frames(directory: str) -> Counter[str]:
    """Frames serialized so far by every process of the tree, by message class."""
    out: Counter[str] = Counter()
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[1] == "frame":
                    out[parts[2]] += 1
    return out


def count_messages(provider: ScriptedProvider, turns: int = 50) -> tuple[float, dict[str, float]]:
    """Cross-process messages per turn, counted where every process serializes a frame."""
    with tempfile.TemporaryDirectory() as directory:
        trace.enable(directory)
        try:
            with Runtime(provider.provider()) as rt:
                for _ in range(10):
                    rt.run("look alpha up", tools=[lookup]).result(30)
                before = frames(directory)
                for _ in range(turns):
                    rt.run("look alpha up", tools=[lookup]).result(30)
                counted = frames(directory) - before
        finally:
            trace.enable(None)
    return sum(counted.values()) / turns, {k: v / turns for k, v in sorted(counted.items())}


def measure(base_url: str, turns: int, provider: Any) -> tuple[list[float], list[float]]:
    """Per-turn seconds: the baseline loop, then greenroom, against ``base_url``."""
    url = base_url + "/chat/completions"
    with httpx.Client() as client:
        for _ in range(10):
            baseline_turn(client, url)  # warm up
        base = []
        for _ in range(turns):
            t0 = time.perf_counter()
            assert baseline_turn(client, url).startswith("The value")
            base.append(time.perf_counter() - t0)
    with Runtime(provider) as rt:
        for _ in range(10):
            rt.run("look alpha up", tools=[lookup]).result(30)
        ours = []
        for _ in range(turns):
            t0 = time.perf_counter()
            result = rt.run("look alpha up", tools=[lookup]).result(30)
            ours.append(time.perf_counter() - t0)
            assert result.finish_reason == "stop" and result.text.startswith("The value")
    return base, ours


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--cases", default="quiet,loaded,apart")
    args = parser.parse_args()
    cases = args.cases.split(",")
    unknown = set(cases) - set(LABELS)
    if unknown:
        parser.error(f"unknown case {', '.join(sorted(unknown))}: the cases are {', '.join(LABELS)}")
    rows, results = [], {}
    per_turn, kinds = 0.0, {}
    for case in cases:
        if case == "quiet":
            with ScriptedProvider(responder=responder) as provider:
                base, ours = measure(provider.base_url, args.turns, provider.provider())
                per_turn, kinds = count_messages(provider)
        else:
            remote = RemoteProvider("bench.turn_overhead:responder")
            hog = subprocess.Popen([sys.executable, "-c", HOG]) if case == "loaded" else None
            try:
                base, ours = measure(remote.base_url, args.turns, remote.provider())
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
                remote.close()
        b, g = summary_ms(base), summary_ms(ours)
        results[case] = {"baseline": b, "greenroom": g, "ratio_p50": g["p50_ms"] / b["p50_ms"]}
        rows.append([LABELS[case], b["p50_ms"], b["p99_ms"], g["p50_ms"], g["p99_ms"], g["p50_ms"] / b["p50_ms"]])
    targets = "greenroom at most 2x the baseline's p50 quiet, 3x loaded"
    print(f"turn overhead, {args.turns} two-round turns each (targets: {targets})")
    print(
        table(
            rows,
            ["case", "baseline p50 ms", "baseline p99 ms", "greenroom p50 ms", "greenroom p99 ms", "x baseline (p50)"],
        )
    )
    if kinds:
        detail = ", ".join(f"{k} {v:g}" for k, v in kinds.items())
        print(f"cross-process messages per two-round turn (target: under 8): {per_turn:g} ({detail})")
    results["messages_per_turn"] = per_turn
    results["messages_by_kind"] = kinds
    print("saved", save("turn_overhead", {"turns": args.turns, **results}))


if __name__ == "__main__":
    main()
