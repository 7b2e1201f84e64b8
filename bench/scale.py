"""Scale: N concurrent turns, each calling a tool and then streaming text. For N in
10, 50, 100, 200, 1000: turns per second, p99 delta latency, memory per streaming turn,
errors, and lost or reordered deltas. Baseline in the same run: the same N turns by N
threads running a hand-written httpx loop in one process. Also: the memory of an idle
TurnActor (a turn paused for approval), from the unique RSS of the runtime's processes
before and after 200 of them.

Memory per streaming turn is given two ways, both from the unique RSS (USS) of the actor
system's processes while every turn streams: "USS/N" is all of it divided by N (it shrinks
as N grows, since it includes what the processes hold anyway), "added/turn" is what it grew
by since just before the N turns started, divided by N (what a turn costs; the target).
CPU per turn is the CPU time (user + system) the turns cost, divided by N: for greenroom,
that of the actor system's processes and of this process (its pump and the N reader
threads); for the baseline, that of this process; the provider's process is left out of
both. On a machine shared with other work it varies much less than the wall-clock figures.
Targets (issue 25): at N=200 at least 0.9x the baseline's turns/s and a p99 delta latency
at most 2x the baseline's; at N=1000 every delta intact and in order, and at most 0.5 MiB
added per streaming turn.

    python bench/scale.py [--sizes 10,50,100,200,1000]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from actors import Runtime, requires_approval, tool  # noqa: E402
from actors.lifecycle.processes import session_processes  # noqa: E402
from actors.providers import OpenAIStream, iter_sse  # noqa: E402
from actors.testing import Reply, Request, Text, call, use_tools  # noqa: E402
from bench.common import pct, save, table  # noqa: E402
from messages import Finish, ProviderConfig, TextDelta  # noqa: E402

CHUNKS = 40
DELAY = 0.01


@tool
def fetch(name: str) -> str:
    """Fetch a record."""
    return f"record {name}"


def text_of(name: str) -> str:
    return "".join(f"{name}-{i:03d} " for i in range(CHUNKS))


gated_fetch = requires_approval(fetch)


def responder(request: Request) -> Reply:
    name = request.messages[0]["content"]
    if request.messages[-1]["role"] == "user":
        return use_tools(call("fetch", {"name": name}), usage=None)
    return Reply(parts=tuple(Text(f"{name}-{i:03d} ") for i in range(CHUNKS)), delay=DELAY, usage=None)


class RemoteProvider:
    """The scripted provider in a process of its own, so that no side shares its GIL."""

    def __init__(self, responder: str = "bench.scale:responder") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "actors.testing", "--responder", responder],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
        self.port = json.loads(self.proc.stdout.readline())["port"]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def provider(self) -> ProviderConfig:
        return ProviderConfig(base_url=self.base_url, model="scripted-model")

    def requests(self) -> list[dict]:
        return httpx.get(f"http://127.0.0.1:{self.port}/requests", timeout=30).json()["requests"]

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)


def uss_mib(pids: list[int], fields: tuple[str, ...] = ("Private_Clean:", "Private_Dirty:")) -> float:
    """The unique memory of ``pids`` (or, with ``fields=("Pss:",)``, their proportional share)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith(fields):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def pss_mib(pids: list[int]) -> float:
    return uss_mib(pids, ("Pss:",))


WORN_TURNS = 1000  # turns run before the second footprint, 200 at a time


def idle_footprint_mib(provider: "RemoteProvider") -> tuple[float, float, float]:
    """The PSS of every process of a runtime with the default hosts and tool processes, after
    one turn and with none running (issue 33: at most 100 MiB), of the process that started
    it, and of the runtime's processes again once ``WORN_TURNS`` more turns have run and
    none runs (what a process grows by as it runs: its own objects, and the pages it shares
    with its parent until it writes to them). Measured in a fresh process, so that what this
    one grew by is not inherited."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--footprint", provider.base_url],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    runtime, caller, worn = json.loads(out.stdout.strip().splitlines()[-1])
    return runtime, caller, worn


def footprint(base_url: str) -> None:
    """``--footprint URL``: print ``[PSS of the runtime's processes, PSS of this one, PSS of
    the runtime's processes after WORN_TURNS turns]`` in MiB."""
    with Runtime(ProviderConfig(base_url=base_url, model="scripted-model")) as rt:
        rt.run("warm", tools=[fetch]).result(60)  # every host and tool pool is up once a turn has run
        time.sleep(1.0)  # let the hosts' start-up garbage go (a measurement, not a synchronisation)
        processes = session_processes(rt.admin_sid)  # type: ignore[arg-type]
        idle, caller = pss_mib(processes), pss_mib([os.getpid()])
        for batch in range(WORN_TURNS // 200):
            for handle in [rt.run(f"worn{batch}-{i}", tools=[fetch]) for i in range(200)]:
                handle.result(120)
        deadline = time.monotonic() + 30  # the tool processes lent for the load go back and retire
        while len(session_processes(rt.admin_sid)) > len(processes) and time.monotonic() < deadline:  # type: ignore[arg-type]
            time.sleep(0.1)
        time.sleep(1.0)
        print(json.dumps([idle, caller, pss_mib(session_processes(rt.admin_sid))]))  # type: ignore[arg-type]


def cpu_s(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system) used so far by each live process of ``pids``."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            continue
    return out


def cpu_since(sid: int, start: dict[int, float]) -> float:
    """CPU seconds the session's processes used since ``start`` (one that started since
    counts whole; one that ended since is lost: the tool processes that retire)."""
    now = cpu_s(session_processes(sid))
    return sum(v - start.get(pid, 0.0) for pid, v in now.items())


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def latencies(request: dict, arrivals: list[tuple[int, float]]) -> list[float]:
    out, j = [], 0
    for offset, wrote in request["written"]:
        while j < len(arrivals) - 1 and arrivals[j][0] < offset:
            j += 1
        out.append(arrivals[j][1] - wrote)
    return out


def stream_requests(provider: RemoteProvider, names: set[str]) -> dict[str, dict]:
    return {
        r["messages"][0]["content"]: r
        for r in provider.requests()
        if r["messages"][-1]["role"] == "tool" and r["messages"][0]["content"] in names
    }


def run_greenroom(rt: Runtime, provider: RemoteProvider, n: int, tag: str) -> dict:
    names = [f"{tag}{i}" for i in range(n)]
    pids = session_processes(rt.admin_sid)  # type: ignore[arg-type]
    before, pss_before = uss_mib(pids), pss_mib(pids)
    cpu0, own0 = cpu_s(pids), own_cpu_s()
    t0 = time.monotonic()  # before the starts: run() returns once the turn's host has admitted it
    handles = {name: rt.run(name, tools=[fetch]) for name in names}
    arrivals: dict[str, list[tuple[int, float]]] = {name: [] for name in names}
    texts: dict[str, list[str]] = {name: [] for name in names}
    errors, mem, lock = 0, [0.0, 0.0], threading.Lock()

    def follow(name: str) -> None:
        nonlocal errors
        total = 0
        try:
            for event in handles[name].events(timeout=120):
                if isinstance(event, TextDelta):
                    total += len(event.text)
                    texts[name].append(event.text)
                    arrivals[name].append((total, handles[name].received_at(event.seq) or time.monotonic()))
                    if len(texts[name]) == 3 and name == names[-1]:
                        now = session_processes(rt.admin_sid)  # type: ignore[arg-type]
                        mem[:] = [uss_mib(now), pss_mib(now)]  # every turn is streaming by now
                if isinstance(event, Finish) and event.finish_reason != "stop":
                    with lock:
                        errors += 1
        except Exception:
            with lock:
                errors += 1

    threads = [threading.Thread(target=follow, args=(name,)) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    elapsed = time.monotonic() - t0
    cpu_ms = (cpu_since(rt.admin_sid, cpu0) + own_cpu_s() - own0) * 1000 / n  # type: ignore[arg-type]
    requests = stream_requests(provider, set(names))
    lat = [x for name in names if name in requests for x in latencies(requests[name], arrivals[name])]
    intact = sum("".join(texts[name]) == text_of(name) for name in names)
    seqs_ok = all(
        [e.seq for e in handles[name].all_events] == list(range(len(handles[name].all_events))) for name in names
    )
    return {
        "turns_per_s": n / elapsed,
        "p99_delta_ms": pct(lat, 99) * 1000,
        "p50_delta_ms": pct(lat, 50) * 1000,
        "mem_per_turn_mib": mem[0] / n,
        "added_per_turn_mib": (mem[0] - before) / n,
        "pss_added_per_turn_mib": (mem[1] - pss_before) / n,
        "cpu_ms_per_turn": cpu_ms,
        "errors": errors,
        "intact": intact,
        "ordered": seqs_ok,
    }


def idle_turn_kib(rt: Runtime, n: int = 200) -> float:
    """Unique memory per idle TurnActor: N turns paused for approval, before and after."""
    before = uss_mib(session_processes(rt.admin_sid))  # type: ignore[arg-type]
    handles = [rt.run(f"idle{i}", tools=[gated_fetch]) for i in range(n)]
    for h in handles:
        assert h.result(120).finish_reason == "awaiting_approval"
    after = uss_mib(session_processes(rt.admin_sid))  # type: ignore[arg-type]
    for h in handles:
        h.stop()
    return (after - before) * 1024 / n


def run_baseline(provider: RemoteProvider, n: int, tag: str) -> dict:
    names = [f"{tag}{i}" for i in range(n)]
    url = provider.base_url + "/chat/completions"
    arrivals: dict[str, list[tuple[int, float]]] = {name: [] for name in names}
    texts: dict[str, str] = {}
    errors: list[str] = []
    tools = [{"type": "function", "function": {"name": "fetch", "description": "", "parameters": fetch.parameters}}]

    client = httpx.Client(timeout=120, limits=httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10))

    def turn(name: str) -> None:
        try:
            run(name)
        except Exception as exc:  # counted, like greenroom's errors
            errors.append(f"{name}: {exc}")

    def run(name: str) -> None:
        if True:  # one client shared by every thread, as a tuned baseline would
            messages: list[dict] = [{"role": "user", "content": name}]
            while True:
                acc, total = OpenAIStream(), 0
                with client.stream(
                    "POST", url, json={"model": "m", "messages": messages, "tools": tools, "stream": True}
                ) as r:
                    for ev in iter_sse(r.iter_lines()):
                        text = acc.feed(ev.event, ev.data)
                        if text:
                            total += len(text)
                            arrivals[name].append((total, time.monotonic()))
                        if acc.done:
                            break
                message, _, _ = acc.result()
                calls = message.tool_calls or []
                if not calls:
                    texts[name] = message.content or ""
                    return
                messages.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                            for c in calls
                        ],
                    }
                )
                for c in calls:
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": c.id,
                            "content": json.dumps({"ok": True, "data": fetch.fn(**json.loads(c.arguments))}),
                        }
                    )

    t0, cpu0 = time.monotonic(), own_cpu_s()
    threads = [threading.Thread(target=turn, args=(name,)) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    elapsed = time.monotonic() - t0
    cpu_ms = (own_cpu_s() - cpu0) * 1000 / n
    client.close()
    requests = stream_requests(provider, set(names))
    lat = [x for name in names if name in requests for x in latencies(requests[name], arrivals[name])]
    return {
        "turns_per_s": n / elapsed,
        "p99_delta_ms": pct(lat, 99) * 1000,
        "errors": len(errors),
        "cpu_ms_per_turn": cpu_ms,
        "intact": sum(texts.get(name) == text_of(name) for name in names),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,50,100,200,1000")
    parser.add_argument("--tool-processes", type=int, default=4, help="idle tool processes kept forked ahead")
    parser.add_argument("--footprint", metavar="URL", help=argparse.SUPPRESS)  # idle_footprint_mib's child
    args = parser.parse_args()
    if args.footprint:
        return footprint(args.footprint)
    sizes = [int(x) for x in args.sizes.split(",")]
    rows, results = [], {}
    provider = RemoteProvider()
    try:
        rt = Runtime(provider.provider(), tool_processes=args.tool_processes).start()
    except BaseException:
        provider.close()
        raise
    try:
        for n in sizes:
            base = run_baseline(provider, n, f"b{n}_")
            ours = run_greenroom(rt, provider, n, f"g{n}_")
            results[n] = {"baseline": base, "greenroom": ours}
            rows.append(
                [
                    n,
                    ours["turns_per_s"],
                    ours["turns_per_s"] / base["turns_per_s"],
                    ours["p99_delta_ms"],
                    base["p99_delta_ms"],
                    ours["mem_per_turn_mib"],
                    ours["added_per_turn_mib"],
                    ours["pss_added_per_turn_mib"],
                    ours["cpu_ms_per_turn"],
                    base["cpu_ms_per_turn"],
                    ours["errors"],
                    f"{ours['intact']}/{n}",
                    ours["ordered"],
                ]
            )
        idle_kib = idle_turn_kib(rt)
        rt.close()
        idle_runtime, idle_caller, worn_runtime = idle_footprint_mib(provider)
    finally:
        rt.close()
        provider.close()
    print(f"scale: N concurrent turns, each a tool call then {CHUNKS} deltas {DELAY * 1000:g} ms apart")
    print("targets: N=200 turns/s >= 0.9x baseline, p99 <= 2x baseline p99; N=1000 intact, in order, added <= 0.5 MiB")
    print(
        table(
            rows,
            [
                "N",
                "turns/s",
                "x baseline",
                "p99 delta ms",
                "baseline p99 ms",
                "USS/N MiB",
                "added/turn MiB",
                "PSS added/turn MiB",
                "CPU ms/turn",
                "baseline CPU ms/turn",
                "errors",
                "deltas intact",
                "in order",
            ],
        )
    )
    print("baseline errors:", {n: r["baseline"]["errors"] for n, r in results.items()})
    print(f"memory per idle TurnActor (a turn paused for approval, 200 of them): {idle_kib:.1f} KiB")
    print(
        f"idle footprint (PSS, default hosts, no turn running): the runtime's processes {idle_runtime:.1f} MiB "
        f"(target 100), the caller's {idle_caller:.1f} MiB; after {WORN_TURNS:,} turns, none running: "
        f"the runtime's processes {worn_runtime:.1f} MiB"
    )
    if 20 in results and 200 in results:  # issue 33: CPU per turn at 200 against the hand-written loop at 20
        ours, base = results[200]["greenroom"]["cpu_ms_per_turn"], results[20]["baseline"]["cpu_ms_per_turn"]
        print(
            f"CPU per turn at N=200 / the baseline's at N=20: {ours:.1f} / {base:.1f} ms = {ours / base:.2f}x (target 1.2x)"
        )
    print(
        "saved",
        save(
            "scale",
            {
                "results": results,
                "idle_turn_kib": idle_kib,
                "idle_footprint_mib": [idle_runtime, idle_caller],
                "worn_footprint_mib": worn_runtime,
            },
        ),
    )


if __name__ == "__main__":
    main()
