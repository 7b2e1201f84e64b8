"""What an unread handle holds in the owner: how many events, and how many bytes each.

    python bench/held_events.py [--turns 20] [--chunks 3000] [--window 1024] [--ask-every 0.5]

Starts a scripted provider and a Runtime (one host) in this process, reads one turn to its
end (the warm-up), then starts ``--turns`` turns whose answer streams ``--chunks`` chunks of
5 to 40 characters each (one progress report per chunk, so one event per chunk), and never
reads them. Once every turn has ended in its host, it waits while each stream asks its host
again for what follows a few times (a stream that hears nothing asks every ``QUIET``
seconds, 30 by default, for as long as its reader is behind: ``reader_grace``, 300 s; here
``QUIET`` is ``--ask-every``, so that the run sees several asks in seconds), then measures:

- held: the events each handle holds (none was read), against the window;
- bytes per held event: what the owner's Python heap grew by (``tracemalloc``, started
  after the warm-up) divided by the events held, against the baseline measured in the same
  run: a bare list of the same strings (each event's text, copied), so that the difference
  is what holding an event costs beyond its text. Everything the turns cost the owner is
  counted (handles, streams, futures), so this is an upper bound;
- the owner's RSS grown by, per event held, measured in a run of its own without
  ``tracemalloc`` (whose own tables would count).

Each measurement runs in a process of its own (this script, ``--mode heap`` and ``--mode
rss``); the figures are printed and saved as JSON under ``bench/results/``.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors import Runtime, ToolContext, TurnTimeout, tool
from actors.client import stream as stream_module
from actors.testing import Reply, Request, ScriptedProvider, call, say, use_tools
from bench.common import save
from messages import RetryPolicy, StopTool, ToolProgress


def words(count: int, seed: int) -> list[str]:
    """``count`` strings of 5 to 40 characters."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz "
    return ["".join(rng.choice(letters) for _ in range(rng.randint(5, 40))) for _ in range(count)]


@tool(inline=True)
async def stream_chunks(count: int, seed: int) -> int:
    """Report ``count`` chunks of 5 to 40 characters (an event each) from the host's loop."""
    ctx = ToolContext.current()
    for chunk in words(count, seed):
        ctx.report_progress(chunk)
    return count


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def held_by(handle: Any) -> int:
    held = getattr(handle, "held", None)  # this code's count; before it, nothing was read: all of them
    return held if isinstance(held, int) else len(handle.all_events)


def finished(rt: Runtime, probe: StopTool) -> bool:
    """Whether the probe's turn has ended in its host (a busy host may answer late)."""
    try:
        return rt.control(probe, timeout=30).code == "turn_finished"
    except TurnTimeout:
        return False


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One run in this process: the unread turns, then the figures of ``args.mode``."""
    stream_module.QUIET = args.ask_every
    trace = args.mode == "heap"

    def responder(request: Request) -> Reply:
        if any(m.get("role") == "tool" for m in request.messages):
            return say("done")
        content = str(request.messages[-1].get("content"))
        count = args.chunks if content.startswith("unread") else 10
        return use_tools(call("stream_chunks", {"count": count, "seed": len(content)}))

    out: dict[str, Any] = {"code": str(Path(stream_module.__file__).resolve().parents[2])}
    with (
        ScriptedProvider(responder=responder) as provider,
        Runtime(
            provider.provider(retry=RetryPolicy(max_attempts=1)), hosts=1, tool_processes=1, event_window=args.window
        ) as rt,
    ):
        for _ in rt.run("warm up", tools=[stream_chunks]).events(timeout=60):
            pass
        gc.collect()
        rss_before = rss_kib()
        if trace:
            tracemalloc.start()
        heap_before = tracemalloc.get_traced_memory()[0]
        started = time.monotonic()
        handles = [rt.run(f"unread {i}", tools=[stream_chunks]) for i in range(args.turns)]
        deadline = time.monotonic() + 120
        for h in handles:  # every event of the turn is in its host once a probe says it has ended
            probe = StopTool(turn_id=h.turn_id, call_id="no such call")
            while not finished(rt, probe) and time.monotonic() < deadline:
                time.sleep(0.05)
        out["ended_within_s"] = round(time.monotonic() - started, 2)
        time.sleep(args.asks * args.ask_every + 0.5)  # the streams ask again meanwhile (a benchmark, not a test)
        gc.collect()
        heap_after = tracemalloc.get_traced_memory()[0]
        rss_after = rss_kib()
        held = [held_by(h) for h in handles]
        asked = getattr(handles[0]._stream, "asked", None)
        tracemalloc.stop()
        out.update(held_total=sum(held), held_max_per_handle=max(held), asked_per_stream=asked)
        if not trace:
            out["rss_grown_kib"] = rss_after - rss_before
            return out
        out["heap_grown_bytes"] = heap_after - heap_before

        # the baseline: a bare list of the same strings (copies), measured the same way
        texts = [e.data for h in handles for e in h.all_events if isinstance(e, ToolProgress)]
        gc.collect()
        tracemalloc.start()
        base_before = tracemalloc.get_traced_memory()[0]
        bare = [t.encode().decode() for t in texts]
        base_after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del bare
        out.update(baseline_bytes=base_after - base_before, baseline_strings=len(texts))
        out["mean_text_chars"] = round(sum(map(len, texts)) / max(1, len(texts)), 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--chunks", type=int, default=3000)
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--ask-every", type=float, default=0.5, help="the streams' QUIET, seconds")
    parser.add_argument("--asks", type=int, default=4, help="how many QUIET periods to wait once the turns ended")
    parser.add_argument("--mode", choices=["heap", "rss"], help=argparse.SUPPRESS)  # one run, in this process
    args = parser.parse_args()
    if args.mode is not None:
        print(json.dumps(measure(args)), flush=True)
        return
    runs = {}
    for mode in ("heap", "rss"):
        argv = [a for a in sys.argv[1:]] + ["--mode", mode]
        done = subprocess.run(
            [sys.executable, __file__, *argv], capture_output=True, text=True, timeout=300, check=False
        )
        if done.returncode != 0:
            raise SystemExit(f"the {mode} run failed:\n{done.stderr[-3000:]}")
        runs[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    heap, rss = runs["heap"], runs["rss"]
    total = heap["held_total"]
    per_event = heap["heap_grown_bytes"] / max(1, total)
    baseline = heap["baseline_bytes"] / max(1, heap["baseline_strings"])
    results = {
        "code": heap["code"],
        "turns": args.turns,
        "chunks": args.chunks,
        "window": args.window,
        "ask_every_s": args.ask_every,
        "asked_per_stream": heap["asked_per_stream"],
        "ended_within_s": heap["ended_within_s"],
        "held_total": total,
        "held_max_per_handle": heap["held_max_per_handle"],
        "held_max_over_window": round(heap["held_max_per_handle"] / args.window, 2),
        "heap_bytes_per_held_event": round(per_event, 1),
        "baseline_bytes_per_string": round(baseline, 1),
        "beyond_text_bytes": round(per_event - baseline, 1),
        "over_baseline": round(per_event / baseline, 2),
        "mean_text_chars": heap["mean_text_chars"],
        "rss_held_total": rss["held_total"],
        "rss_grown_mib": round(rss["rss_grown_kib"] / 1024, 1),
        "rss_bytes_per_held_event": round(rss["rss_grown_kib"] * 1024 / max(1, rss["held_total"]), 1),
    }
    print(f"code: {results['code']}")
    print(
        f"{args.turns} unread turns of {args.chunks} chunks, window {args.window}, ended in {heap['ended_within_s']} s"
    )
    print(
        f"held: {total} events, at most {heap['held_max_per_handle']} per handle "
        f"({results['held_max_over_window']:.2f}x the window)"
    )
    print(
        f"heap per held event: {per_event:.0f} B; a bare list of the same strings: {baseline:.0f} B "
        f"({per_event / baseline:.2f}x; {per_event - baseline:.0f} B beyond the text, "
        f"{results['mean_text_chars']} characters on average)"
    )
    print(
        f"RSS grown by {results['rss_grown_mib']} MiB for {rss['held_total']} held events "
        f"({results['rss_bytes_per_held_event']:.0f} B each; a run without tracemalloc)"
    )
    save("held_events", results)


if __name__ == "__main__":
    main()
