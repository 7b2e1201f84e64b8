"""Streaming: delta latency from the provider writing a chunk to the caller receiving it
(p50, p99), and the sustained delta rate one turn carries. Baseline in the same run: the
same stream read by a plain httpx client in one process.

    python bench/streaming.py [--chunks 300]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from actors import Runtime  # noqa: E402
from actors.providers import OpenAIStream, iter_sse  # noqa: E402
from actors.testing import Reply, ScriptedProvider, Text  # noqa: E402
from bench.common import save, summary_ms, table  # noqa: E402
from messages import Finish, TextDelta  # noqa: E402


def script(chunks: int, delay: float) -> Reply:
    return Reply(parts=tuple(Text(f"t{i:05d} ") for i in range(chunks)), delay=delay, usage=None)


def latencies(written: list[tuple[int, float]], arrivals: list[tuple[int, float]]) -> list[float]:
    """For each chunk (text offset, write time), the arrival of the first batch covering it."""
    out, j = [], 0
    for offset, wrote in written:
        while arrivals[j][0] < offset:
            j += 1
        out.append(arrivals[j][1] - wrote)
    return out


def baseline(provider: ScriptedProvider, reply: Reply) -> tuple[list[float], float]:
    provider.add(reply)
    arrivals, total = [], 0
    with httpx.Client() as client:
        t0 = time.monotonic()
        with client.stream(
            "POST",
            provider.base_url + "/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "go"}], "stream": True},
        ) as r:
            acc = OpenAIStream()
            for ev in iter_sse(r.iter_lines()):
                text = acc.feed(ev.event, ev.data)
                if text:
                    total += len(text)
                    arrivals.append((total, time.monotonic()))
                if acc.done:
                    break
        elapsed = time.monotonic() - t0
    return latencies(provider.requests[-1].written, arrivals), elapsed


def ours(rt: Runtime, provider: ScriptedProvider, reply: Reply) -> tuple[list[float], float, bool]:
    provider.add(reply)
    t0 = time.monotonic()
    turn = rt.run("go")
    arrivals, total, text = [], 0, []
    for event in turn.events(timeout=120):
        if isinstance(event, TextDelta):
            total += len(event.text)
            text.append(event.text)
            arrivals.append((total, turn.received_at(event.seq) or time.monotonic()))
        if isinstance(event, Finish):
            break
    elapsed = time.monotonic() - t0
    intact = "".join(text) == "".join(p.text for p in reply.parts)  # type: ignore[union-attr]
    return latencies(provider.requests[-1].written, arrivals), elapsed, intact


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=300)
    args = parser.parse_args()
    paced, burst = script(args.chunks, 0.005), script(20 * args.chunks, 0.0)
    with ScriptedProvider() as provider, Runtime(provider.provider()) as rt:
        ours(rt, provider, script(20, 0.001))  # warm up
        base_lat, _ = baseline(provider, paced)
        our_lat, _, ok1 = ours(rt, provider, paced)
        _, base_burst = baseline(provider, burst)
        _, our_burst, ok2 = ours(rt, provider, burst)
    b, g = summary_ms(base_lat), summary_ms(our_lat)
    n = len(burst.parts)
    rows = [
        ["delta latency, baseline (httpx, one process)", b["p50_ms"], b["p99_ms"], 1.0],
        ["delta latency, greenroom (to the caller)", g["p50_ms"], g["p99_ms"], g["p50_ms"] / b["p50_ms"]],
    ]
    print(f"streaming: {args.chunks} chunks 5 ms apart, then a burst of {n} chunks")
    print(table(rows, ["", "p50 ms", "p99 ms", "x baseline (p50)"]))
    rate_b, rate_g = n / base_burst, n / our_burst
    print(
        table(
            [["baseline", rate_b, 1.0], ["greenroom", rate_g, rate_g / rate_b]],
            ["sustained rate", "chunks/s", "x baseline"],
        )
    )
    print(f"every delta delivered, in order, none lost: {ok1 and ok2}")
    print(
        "saved",
        save(
            "streaming",
            {
                "latency": {"baseline": b, "greenroom": g},
                "rate_per_s": {"baseline": rate_b, "greenroom": rate_g},
                "intact": ok1 and ok2,
            },
        ),
    )


if __name__ == "__main__":
    main()
