"""Stop latency, broken down: from stop() to (a) the tool's on-stop callback running,
(b) the tool's subprocess group gone, (c) the provider seeing the connection close,
(d) Finish(stopped) at the caller. Every trial checks that no process is left and that the
history is valid. Baselines measured in the same run: a raw loopback TCP ping-pong and a
Thespian external ask round trip.

    python bench/stop_latency.py [--trials 40]
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from thespian.actors import ActorTypeDispatcher  # noqa: E402

from actors import Runtime, ToolContext, run_command, tool  # noqa: E402
from actors.lifecycle.processes import group_processes as group_members  # noqa: E402
from actors.testing import ScriptedProvider, call, say, use_tools  # noqa: E402
from actors.turn.history import history_problems  # noqa: E402
from bench.common import against_floor, save, table  # noqa: E402
from messages import Finish, TextDelta, ToolProgress  # noqa: E402


@tool
def long_build(marker: str) -> str:
    """A tool with a subprocess group and an on-stop callback that notes when it ran."""
    ctx = ToolContext.current()

    def noted() -> None:
        with open(marker, "w") as f:
            f.write(repr(time.monotonic()))

    ctx.cancellation.on_stop(noted)
    run_command(["sh", "-c", "sleep 300 & sleep 300"], on_start=lambda p: ctx.report_progress({"pgid": p.pid}))
    return "built"


class Echo(ActorTypeDispatcher):
    def receiveMsg_str(self, msg: str, sender: object) -> None:
        self.send(sender, msg)


def wait_gone(pids: list[int], timeout: float = 10.0) -> float:
    """The time (monotonic) at which the last of ``pids`` has exited, waiting on pidfds."""
    fds = []
    for pid in pids:
        try:
            fds.append(os.pidfd_open(pid))
        except ProcessLookupError:
            pass
    try:
        deadline = time.monotonic() + timeout
        pending = list(fds)
        while pending:
            ready, _, _ = select.select(pending, [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"{len(pending)} process(es) of the group survived")
            pending = [fd for fd in pending if fd not in ready]
        return time.monotonic()
    finally:
        for fd in fds:
            os.close(fd)


def ping_pong(n: int = 2000) -> list[float]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def echo() -> None:
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(64):
            conn.sendall(data)
        conn.close()

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    client = socket.create_connection(server.getsockname())
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.sendall(b"x")
        client.recv(64)
        times.append(time.perf_counter() - t0)
    client.close()
    server.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=40)
    args = parser.parse_args()
    floor = ping_pong()
    a, b, c, d_tool, d_stream, asks = [], [], [], [], [], []
    problems = 0
    with ScriptedProvider() as provider, Runtime(provider.provider()) as rt, tempfile.TemporaryDirectory() as tmp:
        echo = rt.actor_system.createActor(Echo)
        for _ in range(200):
            t0 = time.perf_counter()
            rt.actor_system.ask(echo, "x", 5)
            asks.append(time.perf_counter() - t0)
        for i in range(args.trials):
            marker = os.path.join(tmp, f"cb{i}")
            provider.add(use_tools(call("long_build", {"marker": marker})))
            turn = rt.run("build", tools=[long_build])
            pgid = turn.wait_for(lambda e: isinstance(e, ToolProgress), 30).data["pgid"]
            while len(group_members(pgid)) < 2:
                time.sleep(0.001)  # the shell has not started its background sleep yet
            members = group_members(pgid)
            t0 = time.monotonic()
            threading.Thread(target=turn.stop, args=("bench",), daemon=True).start()
            turn.wait_for(lambda e: isinstance(e, Finish), 30)
            d_tool.append(time.monotonic() - t0)
            b.append(wait_gone(members) - t0)
            while not os.path.exists(marker) or not open(marker).read():
                time.sleep(0.001)
            a.append(float(open(marker).read()) - t0)
            problems += bool(history_problems(turn.result(5).messages)) + bool(group_members(pgid))

            provider.add(say(" ".join(f"w{j}" for j in range(400)), delay=0.005))
            turn = rt.run("talk")
            turn.wait_for(lambda e: isinstance(e, TextDelta), 30)
            request = provider.requests[-1]
            t0 = time.monotonic()
            threading.Thread(target=turn.stop, args=("bench",), daemon=True).start()
            turn.wait_for(lambda e: isinstance(e, Finish), 30)
            d_stream.append(time.monotonic() - t0)
            if not request.disconnected.wait(10) or request.disconnected_at is None:
                problems += 1
                continue
            c.append(request.disconnected_at - t0)
            problems += bool(history_problems(turn.result(5).messages))
    rows, results = against_floor(
        [
            ("(a) on-stop callback ran", a),
            ("(b) subprocess group gone", b),
            ("(c) provider saw the close", c),
            ("(d) Finish(stopped) at caller, tool running", d_tool),
            ("(d) Finish(stopped) at caller, streaming", d_stream),
            ("baseline: external ask round trip", asks),
            ("floor: loopback TCP ping-pong", floor),
        ],
        floor,
    )
    print(f"stop latency, {args.trials} trials per scenario (target: (d) p50 <= 5 ms, p99 <= 20 ms)")
    print(table(rows, ["from stop() to", "p50 ms", "p99 ms", "x ping-pong (p50)"]))
    print(f"trials with an orphan process or an invalid history: {problems}")
    print("saved", save("stop_latency", {"trials": args.trials, "results": results, "problems": problems}))


if __name__ == "__main__":
    main()
