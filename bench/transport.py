"""What the transport's protection costs, and what 4,000 idle connections do to a turn.

1. Per frame, in one process: seal + open of a message (pickle, the target, freshness and
   replay checks) signed (HMAC-SHA256) and encrypted (AES-256-GCM), beside the bare
   ``pickle.dumps`` + ``loads`` that Thespian's own transport does.
2. Per turn: a two-round turn (a tool call, then text) on a Runtime whose frames are
   signed, and on one whose frames are encrypted; each in a process of its own, since the
   first Runtime of a process decides its transport.
3. Under load: the same turn while 4,000 connections that never send a frame are open to
   the runtime's admin port, from 64 loopback addresses (127.0.0.2-127.0.0.65), beside the
   same turn without them, in the same process. Target: at most 2x. The frame timeout is
   raised to 10 minutes for this run, so that no idle connection is closed while it lasts
   (by default each would be closed after 10 s): the worst case.

    python bench/transport.py [--turns 200] [--idle 4000]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors import Runtime  # noqa: E402
from actors.testing import ScriptedProvider  # noqa: E402
from actors.wire.frames import FrameCodec, add_endpoint  # noqa: E402
from actors.wire.transport import TransportConfig  # noqa: E402
from bench.common import save, summary_ms, table  # noqa: E402
from bench.turn_overhead import lookup, responder  # noqa: E402
from messages import ChatMessage, ProviderConfig, StartTurn, TurnOptions  # noqa: E402

SIZES = {"small (a command)": 0, "4 KiB history": 4096, "64 KiB history": 65536}


def frame_costs(n: int) -> dict[str, dict[str, float]]:
    add_endpoint("127.0.0.1", 1)
    signed, encrypted = FrameCodec(os.urandom(32), False), FrameCodec(os.urandom(32), True)
    out: dict[str, dict[str, float]] = {}
    for label, size in SIZES.items():
        msg = StartTurn(
            turn_id="turn_x",
            messages=[ChatMessage(role="user", content="x" * size)],
            provider=ProviderConfig(base_url="http://127.0.0.1:1/v1", model="m"),
            options=TurnOptions(),
        )
        for how, seal, open_ in (
            ("pickle only", lambda m: pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL), pickle.loads),
            ("signed", lambda m: signed.seal(m, "127.0.0.1", 1), signed.open),
            ("encrypted", lambda m: encrypted.seal(m, "127.0.0.1", 1), encrypted.open),
        ):
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                open_(seal(msg))
                times.append(time.perf_counter() - t0)
            out[f"{label}, {how}"] = summary_ms(times)
    return out


def turns(rt: Runtime, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        result = rt.run("look alpha up", tools=[lookup]).result(30)
        times.append(time.perf_counter() - t0)
        assert result.finish_reason == "stop", result.finish_reason
    return times


def idle_connections(port: int, count: int) -> list[socket.socket]:
    """``count`` connections to ``port`` that never send a byte, spread over 64 peer addresses."""
    conns = []
    for i in range(count):
        s = socket.socket()
        s.bind((f"127.0.0.{2 + i % 64}", 0))
        s.connect(("127.0.0.1", port))
        conns.append(s)
    return conns


def child(encrypt: bool, n: int, idle: int) -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, idle + 1024)), hard))
    out: dict[str, Any] = {}
    with ScriptedProvider(responder=responder) as provider:
        with Runtime(
            provider.provider(),
            hosts=1,
            tool_processes=1,
            transport=TransportConfig(encrypt=encrypt, frame_timeout=600),
        ) as rt:
            turns(rt, 10)
            out["turn"] = summary_ms(turns(rt, n))
            if idle:
                conns = idle_connections(rt.admin_port or 0, idle)
                try:
                    turns(rt, 5)
                    out["turn, idle connections open"] = summary_ms(turns(rt, n))
                    still = sum(1 for c in conns if _open(c))
                    out["idle connections still open after"] = still
                finally:
                    for c in conns:
                        c.close()
    return out


def _open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--idle", type=int, default=4000)
    parser.add_argument("--frames", type=int, default=5000)
    parser.add_argument("--child", choices=["signed", "encrypted"])
    args = parser.parse_args()
    if args.child:
        idle = args.idle if args.child == "signed" else 0
        print(json.dumps(child(args.child == "encrypted", args.turns, idle)))
        return
    costs = frame_costs(args.frames)
    runs = {}
    for how in ("signed", "encrypted"):
        cmd = [sys.executable, __file__, "--child", how, "--turns", str(args.turns), "--idle", str(args.idle)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if done.returncode:
            sys.exit(f"{how}: {done.stderr[-2000:]}")
        runs[how] = json.loads(done.stdout.strip().splitlines()[-1])
    rows = []
    for label in SIZES:
        base = costs[f"{label}, pickle only"]["p50_ms"]
        for how in ("pickle only", "signed", "encrypted"):
            s = costs[f"{label}, {how}"]
            rows.append([f"frame {label}: {how}", s["p50_ms"] * 1000, s["p99_ms"] * 1000, s["p50_ms"] / base])
    print(f"seal + open of one frame, {args.frames} each")
    print(table(rows, ["", "p50 us", "p99 us", "x pickle only (p50)"]))
    base = runs["signed"]["turn"]["p50_ms"]
    rows = [
        ["two-round turn, signed frames", base, runs["signed"]["turn"]["p99_ms"], 1.0],
        [
            "two-round turn, encrypted frames",
            runs["encrypted"]["turn"]["p50_ms"],
            runs["encrypted"]["turn"]["p99_ms"],
            runs["encrypted"]["turn"]["p50_ms"] / base,
        ],
    ]
    loaded = runs["signed"].get("turn, idle connections open")
    if loaded:
        rows.append(
            [
                f"two-round turn, {args.idle} idle connections open (target <= 2x)",
                loaded["p50_ms"],
                loaded["p99_ms"],
                loaded["p50_ms"] / base,
            ]
        )
    print(f"\nturns, {args.turns} each")
    print(table(rows, ["", "p50 ms", "p99 ms", "x signed (p50)"]))
    if loaded:
        print(
            f"idle connections still open after the loaded turns: {runs['signed']['idle connections still open after']} of {args.idle}"
        )
    print("saved", save("transport", {"frames": costs, "turns": runs, "idle": args.idle}))


if __name__ == "__main__":
    main()
