"""What a turn costs each role of a cluster, and what a cluster does against one node.

    python bench/cluster.py [--turns 40] [--sizes 1,2,4] [--no-store] [--no-count] [--failover 10] [--orphans 1000]
                            [--drain 20]
                                                        (root, iproute2, nftables, PostgreSQL)

Each size is a cluster in network namespaces on one bridge (``tests.cluster_harness``), on
one PostgreSQL store, the scripted provider beside it on the bridge. Each turn calls a tool
placed on the tools node (``requires={"tools": True}``), then streams 40 words. The roles:

- 1 node: the leader runs the turns and the tools (the baseline);
- 2 nodes: the leader (it advertises nothing: no turn and no tool goes there), and member 1
  runs the turns (``Runtime.run(requires={"turns": True})``) and the tools;
- 4 nodes: the leader; members 1 and 2 run the turns, member 3 the tools.

The turns are started at once by the leader's Runtime (``run_many``: the callers are on the
leader, so its figures include receiving every event); a few warm-up turns first.

- **Messages**: a ``FaultRelay`` passing everything, in each node's namespace, takes every
  connection started there (but those to PostgreSQL and to the provider) and counts each
  Thespian frame (not the ACKs) by the node that sends it and the node that receives it.
  A cluster of its own per size (the relays cost time), net of the frames of an idle window
  (the convention's heartbeats), per turn.
- **CPU**: user + system time of every process in a node's namespace (children reaped
  included), before and after, net of an idle window, per turn; in the cluster without relays.
  The leader's is also given for its caller alone (the process of the Runtime that started
  the turns and receives their events): the rest is what the leader itself costs.
- **Turns/s**: N turns at once, first start to last end, without relays; the ratio is
  against the 1-node cluster of the same run.

- **Time to resume** (``--failover M``, with the store): M durable turns on one member,
  each in a tool call, when that node is killed (its namespace torn down); from the kill to
  each caller's ``ToolFinished(interrupted)``, the turn going on elsewhere.

- **Failover at scale** (``--orphans N``): N durable turns on one member, each waiting for
  an approval, when that node is killed; two other members may take them (they advertise
  what the turns require; the leader does not). From the kill to each turn's claim by a
  live host (``turns.claimed_at``; both on the database's clock), for 10 turns (the
  baseline, a cluster of its own in the same run) and for N.

- **Drain** (``--drain D``, with the store): D durable turns on one member, each in a tool
  call, when that node gets SIGTERM (``greenroom node``: it drains); the calls are let go
  as soon as the store shows the node's hosts draining, and finish where they started (a
  call let go before the drain reaches its host would take its next step there, and its
  turn would finish there). From the signal to the node's exit (its process
  ends, 0), and to the last turn claimed by another node's host (``turns.claimed_at``, on
  the database's clock, as the signal's time): each against the lease (``LEASE``), which a
  node killed instead would make its turns wait out.

Absolute figures on a shared 2-core machine are noisy; the ratios are the result.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actors.testing import FaultPolicy, FaultRelay, Frame, Rule, Text, call, use_tools  # noqa: E402
from actors.testing import PASS, Reply  # noqa: E402
from actors.testing.netns import Namespace, available, interpose  # noqa: E402
from bench.common import save, table  # noqa: E402
from tests.cluster_harness import Cluster  # noqa: E402

WORDS = 40
IDLE = 5.0  # seconds of the idle window
ROLES: dict[int, dict[str, list[int]]] = {
    1: {"leader, turns, tools": [0]},
    2: {"leader": [0], "turns, tools": [1]},
    4: {"leader": [0], "turns": [1, 2], "tools": [3]},
}


def layout(size: int) -> dict[int, dict[str, Any]]:
    """The capabilities of each node of a cluster of ``size``."""
    if size == 1:
        return {0: {"turns": True, "tools": True}}
    if size == 2:
        return {0: {}, 1: {"turns": True, "tools": True}}
    return {0: {}, 1: {"turns": True}, 2: {"turns": True}, 3: {"tools": True}}


class Tally:
    """Frames by the node that sends them and the node that receives them (thread-safe)."""

    def __init__(self, nodes: dict[str, int]) -> None:
        self.nodes = nodes
        self.sent: Counter[int] = Counter()
        self.received: Counter[int] = Counter()
        self._lock = threading.Lock()

    def rule(self, here: int) -> Rule:
        """A rule that never applies, counting each frame the relay of node ``here`` sees."""

        def count(frame: Frame) -> bool:
            there = self.nodes.get(frame.target[0], here)  # 127.0.0.1: the node itself
            sender, receiver = (here, there) if frame.outbound else (there, here)
            with self._lock:
                self.sent[sender] += 1
                self.received[receiver] += 1
            return False

        return Rule(when=count, fault=PASS, times=None)

    def snapshot(self) -> tuple[Counter[int], Counter[int]]:
        with self._lock:
            return Counter(self.sent), Counter(self.received)


@contextlib.contextmanager
def relayed(ns: Namespace, rule: Rule, exclude: list[int]) -> Iterator[FaultRelay]:
    """A counting relay in ``ns`` taking every connection started there (set up, and taken
    down, from inside the namespace)."""
    relay = FaultRelay(FaultPolicy([rule]), keep=1, log_bytes=0)
    with ns.entered():
        relay.start()
        table = interpose(relay, exclude)
        table.__enter__()
    try:
        yield relay
    finally:
        with ns.entered():
            table.__exit__(None, None, None)
        relay.stop()


def cpu_seconds(pids: list[int]) -> float:
    """User + system time of these processes, with the children they reaped."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def cpu_of(c: Cluster) -> dict[Any, float]:
    """Each node's CPU time (every process in its namespace), and the leader's caller's (the
    process of its Runtime, where the turns' events arrive) under ``"caller"``."""
    out: dict[Any, float] = {n.index: cpu_seconds(n.ns.processes()) for n in c.nodes}
    out["caller"] = cpu_seconds([c.leader.announced["pid"]])
    return out


def responder_replies() -> tuple[Reply, Reply]:
    text = Reply(parts=tuple(Text(f"word{i:02d} ") for i in range(WORDS)), usage=None)
    return use_tools(call("placed_lookup", {"key": "alpha"}), usage=None), text


def boot(c: Cluster, size: int, store: bool, hosts: int) -> None:
    caps = layout(size)
    c.start_leader(hosts=hosts, store=store, tool_processes=2, capabilities=caps[0])
    for i in range(1, size):
        c.start_member(i, hosts=hosts, store=store, tool_processes=2, capabilities={"name": f"m{i}", **caps[i]})
        c.ask(op="wait_node", caps={"name": f"m{i}"}, timeout=60)
    c.scripts.add("bench", *responder_replies())


def batch(c: Cluster, size: int, prefix: str, count: int) -> dict[str, Any]:
    requires = {"requires": {"turns": True}} if size > 1 else {}
    out = c.ask(op="run_many", prefix=prefix, count=count, prompt="bench", tools=["placed_lookup"], timeout=300, **requires)
    bad = {t: f for t, f in out["finish"].items() if f != "stop"}
    assert not bad, f"turns that did not end with stop: {bad}"
    turn_nodes = set(ROLES[size].get("turns", ROLES[size].get("turns, tools", [0])))
    placed = {c.node_of(h) for h in out["hosts"].values() if h is not None}
    assert placed <= turn_nodes, f"turns placed on nodes {placed}, not only on {turn_nodes}"
    return out


def measure(size: int, turns: int, store: bool, hosts: int, count: bool, tmp: Path) -> dict[str, Any]:
    """One cluster of ``size``: with ``count``, messages per turn per node; else CPU and turns/s."""
    with Cluster(size, tmp, store=store) as c, contextlib.ExitStack() as relays:
        tally = Tally({n.address: n.index for n in c.nodes})
        if count:
            exclude = [c.provider.port] + ([c.pg.port] if c.pg is not None else [])  # type: ignore[union-attr]
            for node in c.nodes:
                relays.enter_context(relayed(node.ns, tally.rule(node.index), exclude))
        boot(c, size, store, hosts)
        batch(c, size, "warm", 4)
        before = cpu_of(c), tally.snapshot(), time.monotonic()
        time.sleep(IDLE)  # the idle window: what the cluster costs with no turn
        idle = cpu_of(c), tally.snapshot(), time.monotonic()
        out = batch(c, size, "b", turns)
        after = cpu_of(c), tally.snapshot(), time.monotonic()
    idle_s, busy_s = idle[2] - before[2], after[2] - idle[2]

    def per_turn(i: int, value: Any) -> tuple[float, float]:
        """Node ``i``'s figure per turn (net of the idle rate) and its idle rate per second."""
        rate = (value(idle, i) - value(before, i)) / idle_s
        return (value(after, i) - value(idle, i) - rate * busy_s) / turns, rate

    per_node: dict[int, dict[str, float]] = {}
    for i in range(size):
        cpu, cpu_idle = per_turn(i, lambda s, i: s[0][i])
        received, received_idle = per_turn(i, lambda s, i: s[1][1][i])
        sent, _ = per_turn(i, lambda s, i: s[1][0][i])
        per_node[i] = {"cpu_ms": cpu * 1000, "received": received, "sent": sent,
                       "idle_cpu_ms_per_s": cpu_idle * 1000, "idle_frames_per_s": received_idle}  # fmt: skip
    per_node[0]["caller_cpu_ms"] = per_turn(0, lambda s, i: s[0]["caller"])[0] * 1000
    return {"seconds": out["seconds"], "turns_per_s": turns / out["seconds"], "nodes": per_node}


def calls_on_m1(c: Cluster, count: int, hosts: int, tmp: Path, prefix: str, effects: str) -> None:
    """The leader (no ``doomed``: it never takes them), member 1 running ``count`` durable turns
    named ``<prefix><i>``, each in a call (its effect at ``tmp/<effects><i>``), and member 2 joined,
    able to take them over."""
    processes = ("--max-tool-processes", str(max(16, count)))  # every call running at once, none queued
    c.start_leader(hosts=hosts)
    c.start_member(1, *processes, hosts=hosts, store=True, capabilities={"name": "m1", "doomed": True})
    c.ask(op="wait_node", caps={"name": "m1"}, timeout=60)
    for i in range(count):
        effect = str(tmp / f"{effects}{i}")
        reply = use_tools(call("side_effect", {"path": effect}), usage=None)
        c.scripts.add(f"{prefix}{i}", reply, Reply(usage=None))
        c.ask(op="run", turn_id=f"{prefix}{i}", prompt=f"{prefix}{i}", tools=["side_effect"], requires={"doomed": True})
    for i in range(count):
        c.ask(op="wait_progress", turn_id=f"{prefix}{i}", timeout=120)
    c.start_member(2, *processes, hosts=hosts, store=True, capabilities={"name": "m2", "doomed": True})
    c.ask(op="wait_node", caps={"name": "m2"}, timeout=60)


def failover(count: int, hosts: int, tmp: Path) -> dict[str, Any]:
    """Seconds from a node's loss to each of its ``count`` durable turns going on elsewhere."""
    with Cluster(3, tmp) as c:
        calls_on_m1(c, count, hosts, tmp, "f", "failover")
        killed = time.monotonic()
        c.kill(1)
        resumed = [c.ask(op="wait_event", turn_id=f"f{i}", kind="tool_finished", timeout=120)["at"] - killed
                   for i in range(count)]  # fmt: skip
    return {"turns": count, "p50_s": sorted(resumed)[len(resumed) // 2], "max_s": max(resumed)}


def orphans(count: int, hosts: int, tmp: Path) -> dict[str, Any]:
    """Seconds from a node's loss to each of its ``count`` durable turns (each waiting for an
    approval) claimed and loaded by a live host, on the database's clock."""
    import psycopg

    with Cluster(4, tmp) as c:
        c.start_leader(hosts=hosts, tool_processes=1)  # no "doomed": it never takes them
        c.start_member(1, hosts=hosts, store=True, tool_processes=1, capabilities={"name": "m1", "doomed": True})
        c.ask(op="wait_node", caps={"name": "m1"}, timeout=60)
        pause = use_tools(call("delete_file", {"path": str(tmp / "never")}), usage=None)
        c.scripts.add("pause", pause, Reply(usage=None))
        doomed = {"requires": {"doomed": True}}
        c.ask(op="start_many", prefix="o", count=count, prompt="pause", tools=["delete_file"], **doomed)
        db = psycopg.connect(c.store_url or "", autocommit=True)

        def one(text: str) -> Any:
            return db.execute(text).fetchone()

        deadline = time.monotonic() + 600
        while one("SELECT count(*) FROM turns WHERE status = 'awaiting_approval'")[0] < count:
            assert time.monotonic() < deadline, "the turns did not all pause"
            time.sleep(0.2)  # polling the database: no event to wait on
        for i in (2, 3):  # where they can go: two more nodes with "doomed"
            c.start_member(i, hosts=hosts, store=True, tool_processes=1, capabilities={"name": f"m{i}", "doomed": True})
            c.ask(op="wait_node", caps={"name": f"m{i}"}, timeout=60)
        lost = f"{c.nodes[1].name}/%"
        killed = one("SELECT EXTRACT(EPOCH FROM clock_timestamp())")[0]
        c.kill(1)
        taken = f"SELECT count(*) FROM turns WHERE owner NOT LIKE '{lost}' AND epoch >= 2"
        while one(taken)[0] < count:
            assert time.monotonic() < deadline + 120, "the turns were not all taken over"
            time.sleep(0.1)  # polling the database: no event to wait on
        rows = db.execute(f"SELECT claimed_at, owner FROM turns WHERE owner NOT LIKE '{lost}'").fetchall()
        db.close()
        c.ask(op="approve", turn_id=f"o{count - 1}", call_id="call_1")  # the last one started goes on where it went
        ended = c.ask(op="result", turn_id=f"o{count - 1}", timeout=120)["events"][-1]
        assert ended == [ended[0], "finish", "stop"], ended
    resumed = sorted(float(at) - float(killed) for at, _ in rows)
    by_node = Counter(c.node_of(owner) for _, owner in rows)
    p50, spread = resumed[len(resumed) // 2], resumed[-1] - resumed[0]
    return {"turns": count, "p50_s": p50, "max_s": resumed[-1], "spread_s": spread, "by_node": dict(by_node)}


def drain(count: int, hosts: int, tmp: Path) -> dict[str, Any]:
    """Seconds from SIGTERM on a node with ``count`` durable turns in calls to its exit, and
    to the last of them claimed elsewhere."""
    import signal

    import psycopg

    from actors.store.ownership import LEASE

    with Cluster(3, tmp) as c:
        calls_on_m1(c, count, hosts, tmp, "d", "drain")
        db = psycopg.connect(c.store_url or "", autocommit=True)
        node = c.nodes[1].proc
        assert node is not None
        signalled_db = db.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())").fetchone()[0]  # type: ignore[index]
        signalled = time.monotonic()
        node.send_signal(signal.SIGTERM)
        marked = "SELECT count(*) FROM hosts WHERE draining = 1 AND node = %s"
        while db.execute(marked, (c.nodes[1].name,)).fetchone()[0] < hosts:  # type: ignore[index]
            assert time.monotonic() < signalled + 30, "the node did not mark its hosts draining"
            time.sleep(0.01)  # polling the database: no event to wait on
        for i in range(count):  # the calls end now, while the node drains: each where it started
            Path(tmp / f"drain{i}.release").touch()
        code = node.wait(120)
        exited = time.monotonic() - signalled
        ends = [c.ask(op="result", turn_id=f"d{i}", timeout=120)["events"][-1] for i in range(count)]
        assert all(e[1:] == ["finish", "stop"] for e in ends), ends
        lost = f"{c.nodes[1].name}/%"
        elsewhere = f"SELECT claimed_at FROM turns WHERE owner NOT LIKE '{lost}' AND turn_id LIKE 'd%'"
        rows = db.execute(elsewhere).fetchall()
        every = db.execute("SELECT turn_id, owner, epoch, status FROM turns WHERE turn_id LIKE 'd%'").fetchall()
        db.close()
    assert code == 0 and len(rows) == count, (code, len(rows), every)
    claimed = max(float(at) - float(signalled_db) for (at,) in rows)
    return {"turns": count, "exit_s": exited, "last_claim_s": claimed, "lease_s": LEASE,
            "exit_x_lease": exited / LEASE, "claim_x_lease": claimed / LEASE}  # fmt: skip


def by_role(size: int, per_node: dict[int, dict[str, float]], key: str) -> dict[str, float]:
    return {role: sum(per_node[i][key] for i in nodes) for role, nodes in ROLES[size].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--sizes", default="1,2,4")
    parser.add_argument("--hosts", type=int, default=1, help="TurnHosts per node")
    parser.add_argument("--no-store", action="store_true", help="no PostgreSQL: turns are not durable")
    parser.add_argument("--no-count", action="store_true", help="skip the message counts (a cluster less per size)")
    parser.add_argument("--failover", type=int, default=0, metavar="M", help="also time M turns' resumption")
    parser.add_argument("--orphans", type=int, default=0, metavar="N", help="also time N paused turns' takeover (x 10)")
    parser.add_argument("--drain", type=int, default=0, metavar="D", help="also time a drain of D turns in calls")
    args = parser.parse_args()
    if (why := available()) is not None:
        parser.error(why)
    sizes = [int(s) for s in args.sizes.split(",") if s]  # --sizes "": only the failovers
    assert not sizes or (set(sizes) <= set(ROLES) and 1 in sizes), "sizes among 1, 2, 4, with 1 (the baseline)"
    results: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-cluster-") as tmp:
        for size in sizes:
            speed = measure(size, args.turns, not args.no_store, args.hosts, False, Path(tmp))
            results[size] = {"speed": speed}
            if not args.no_count:
                results[size]["count"] = measure(size, args.turns, not args.no_store, args.hosts, True, Path(tmp))
        resume = failover(args.failover, args.hosts, Path(tmp)) if args.failover else None
        scale = [orphans(n, args.hosts, Path(tmp)) for n in (10, args.orphans)] if args.orphans else None
        drained = drain(args.drain, args.hosts, Path(tmp)) if args.drain else None
    if results:
        base = results[1]["speed"]["turns_per_s"]
        rows = []
        for size, r in results.items():
            cpu = by_role(size, r["speed"]["nodes"], "cpu_ms")
            frames = by_role(size, r["count"]["nodes"], "received") if "count" in r else {}
            for role in ROLES[size]:
                rows.append([size, role, cpu[role], frames.get(role, float("nan"))])
                if role.startswith("leader"):
                    rows.append([size, "  of which its caller", r["speed"]["nodes"][0]["caller_cpu_ms"], float("nan")])
        print(table(rows, ["nodes", "role", "CPU ms/turn", "frames in/turn"]))
        print()
        rows = [[size, r["speed"]["turns_per_s"], r["speed"]["turns_per_s"] / base] for size, r in results.items()]
        print(table(rows, ["nodes", "turns/s", "x 1 node"]))
    if resume is not None:
        print(f"\na node lost with {resume['turns']} durable turns: each resumed elsewhere within "
              f"p50 {resume['p50_s']:.2f} s, max {resume['max_s']:.2f} s of the kill")  # fmt: skip
    if scale is not None:
        base_s, big = scale[0], scale[1]
        for r in scale:
            print(f"a node lost with {r['turns']} durable turns waiting for approval: each taken over within p50"
                  f" {r['p50_s']:.2f} s, max {r['max_s']:.2f} s of the kill (by node: {r['by_node']})")  # fmt: skip
        print(f"{big['turns']} turns against {base_s['turns']}: max x{big['max_s'] / base_s['max_s']:.2f}"
              f" (first to last claim: {big['spread_s']:.2f} s against {base_s['spread_s']:.2f} s)")  # fmt: skip
    if drained is not None:
        d = drained
        print(f"a node drained with {d['turns']} durable turns in calls: exited {d['exit_s']:.2f} s after SIGTERM"
              f" (x{d['exit_x_lease']:.2f} the lease of {d['lease_s']:g} s), its last turn claimed elsewhere"
              f" {d['last_claim_s']:.2f} s after (x{d['claim_x_lease']:.2f})")  # fmt: skip
    out = {str(k): v for k, v in results.items()}
    print(json.dumps({"results": out, "failover": resume, "orphans": scale, "drain": drained}))
    print("saved", save("cluster", {"turns": args.turns, "hosts": args.hosts, "store": not args.no_store,
                                    "results": out, "failover": resume, "orphans": scale, "drain": drained}))  # fmt: skip


if __name__ == "__main__":
    main()
