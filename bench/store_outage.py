"""What a store outage costs a durable turn: PostgreSQL crashed and started again after D
seconds, paused for D seconds, failed over to its synchronous standby, or one host cut off
from it (and from it alone) for D seconds.

Each trial: ``--turns`` durable turns on ``Runtime(hosts=2)``, each two tool calls (one
that records its run, one that says which host process runs the turn) then a 3 s
streamed answer; once each streams, the fault; then, per turn, the time from the store's
return (the server accepting connections again, resumed, or its standby promoted) to the
turn's next event, and to its end. For a cut, the store never went away: the times are
from the cut's start, for the turns of the host cut off (a relay in front of the server
holds that process's connections, as a cut cable does; its calls to the provider and to
its callers go on); a cut longer than the fence (2.5 s) moves them to the other host once
the lease has run out (5 s). Every turn must end as it would have without the fault
(its answer whole, its call run once, its events numbered without a gap): a trial that
breaks one says so. The baseline, in the same run: the same turns with no fault, whose
length is what an outage adds to (the table prints the extra time as a ratio to it).

    python bench/store_outage.py [--turns 6] [--outages 2,10,60] [--trials 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actors import Runtime, TurnHandle  # noqa: E402
from actors.testing import ScriptedProvider, call, say, use_tools  # noqa: E402
from actors.testing.postgres import ThrowawayPostgres  # noqa: E402
from actors.testing.script import Reply  # noqa: E402
from actors.testing.server import Request  # noqa: E402
from actors.turn.history import history_problems  # noqa: E402
from bench.common import machine, save, table  # noqa: E402
from bench.soak_store import DbRelay, through  # noqa: E402
from messages import RetryPolicy, TextDelta, ToolFinished  # noqa: E402
from tests import tools_for_tests as T  # noqa: E402

ANSWER = " ".join(f"w{i}" for i in range(30))


def provider(effects: Path) -> ScriptedProvider:
    def respond(request: Request) -> Reply:
        if request.messages[-1]["role"] == "user":
            return use_tools(call("append_key_now", {"path": str(effects)}), call("host_pid", {}))
        return say(ANSWER, delay=0.1)

    return ScriptedProvider(responder=respond)


def problems(turns: list[TurnHandle], effects: Path) -> list[str]:
    out = []
    keys = effects.read_text().splitlines()
    for t in turns:
        r = t.result(timeout=300, final=True)
        seqs = [e.seq for e in t.all_events]
        if (r.finish_reason, r.text) != ("stop", ANSWER) or seqs != list(range(len(seqs))):
            out.append(f"{t.turn_id}: {r.finish_reason} {r.text[:30]!r}, seqs {seqs[:5]}...")
        if history_problems(r.messages):
            out.append(f"{t.turn_id}: {history_problems(r.messages)}")
        if keys.count(f"{t.turn_id}:0:call_1") != 1:
            out.append(f"{t.turn_id}: its call ran {keys.count(f'{t.turn_id}:0:call_1')} times")
    return out


def _host_pid(turn: TurnHandle) -> int:
    """The pid of the host process that ran the turn's ``host_pid`` call."""
    done = turn.wait_for(lambda e: isinstance(e, ToolFinished) and e.call_id == "call_2", timeout=60)
    assert isinstance(done, ToolFinished)
    return int(json.loads(done.content)["data"])


def trial(kind: str, outage: float, n: int) -> dict[str, Any]:
    """One fault of ``kind`` lasting ``outage`` s (none for the baseline); per turn, seconds
    from the store's return to its next event and to its end."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        ThrowawayPostgres(password="bench") as pg,
        contextlib.ExitStack() as stack,
    ):
        effects = Path(tmp) / "effects"
        standby = pg.standby(synchronous=True) if kind == "failover" else None
        relay = stack.enter_context(contextlib.closing(DbRelay(pg.port))) if kind == "cut" else None
        url = pg.url() if relay is None else through(pg, relay, "bench")
        if standby is not None:
            url = (
                url.replace(f":{pg.port}/", f":{pg.port},{pg.host}:{standby.port}/")
                + "?target_session_attrs=read-write"
            )
        with provider(effects) as p, Runtime(p.provider(retry=RetryPolicy(max_attempts=1)), store=url, hosts=2) as rt:
            started = time.monotonic()
            turns = [rt.run(f"turn {i}", tools=[T.append_key_now, T.host_pid]) for i in range(n)]
            for t in turns:
                t.wait_for(lambda e: isinstance(e, TextDelta), timeout=60)
            seen = {t.turn_id: len(t.all_events) for t in turns}
            hosted = {t.turn_id: _host_pid(t) for t in turns}
            if kind == "restart":
                pg.crash()
                time.sleep(outage)  # the outage
                pg.start()
            elif kind == "pause":
                stopped = pg.pause()
                time.sleep(outage)
                pg.resume(stopped)
            elif kind == "failover":
                pg.crash()
                assert standby is not None
                standby.promote()
            elif kind == "cut":
                assert relay is not None
                cut = max(set(hosted.values()), key=list(hosted.values()).count)  # the host of most turns
                relay.cut(cut, outage)
            back = time.monotonic()
            if kind == "cut":  # times from the cut's start, for the turns of the host cut off
                turns_timed = [t for t in turns if hosted[t.turn_id] == cut]
            else:
                turns_timed = turns
            found = problems(turns, effects)
            nxt, end = [], []
            for t in turns_timed:
                later = [at for e in t.all_events[seen[t.turn_id] :] if (at := t.received_at(e.seq)) is not None]
                nxt.append(min(later) - back if later else float("nan"))
                end.append(max(later) - back if later else float("nan"))
            return {"kind": kind, "outage_s": outage, "turns": n, "next_event_s": nxt, "end_s": end,
                    "length_s": time.monotonic() - started, "problems": found}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--outages", default="2,10,60", help="seconds, comma-separated (restart and pause)")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    outages = [float(x) for x in args.outages.split(",") if x]
    command = "python bench/store_outage.py " + " ".join(sys.argv[1:])
    plan = [("none", 0.0)] + [(k, d) for d in outages for k in ("restart", "pause", "cut")] + [("failover", 0.0)]
    results: list[dict[str, Any]] = []
    for _ in range(args.trials):
        for kind, outage in plan:
            results.append(trial(kind, outage, args.turns))
            print(f"... {kind} {outage:g} s: {results[-1]['problems'] or 'every turn ended as without it'}", flush=True)
    base = statistics.median(r["length_s"] for r in results if r["kind"] == "none")
    rows = []
    for kind, outage in plan[1:]:
        mine = [r for r in results if (r["kind"], r["outage_s"]) == (kind, outage)]
        nxt = [x for r in mine for x in r["next_event_s"]]
        end = [x for r in mine for x in r["end_s"]]
        extra = statistics.median(r["length_s"] for r in mine) - base - (outage if kind != "cut" else 0.0)
        broken = sum(len(r["problems"]) for r in mine)
        label = f"{kind} {outage:g} s" if kind != "failover" else "failover to the standby"
        label = f"one host cut off {outage:g} s (from the cut)" if kind == "cut" else label
        rows.append([label, f"{statistics.median(nxt):.2f} / {max(nxt):.2f}", f"{statistics.median(end):.2f} / {max(end):.2f}",
                     f"{extra:.2f} ({extra / base:.2f}x)", broken])  # fmt: skip
    print()
    print(f"$ {command}")
    print(f"baseline, no fault: {args.turns} turns in {base:.2f} s (median of {args.trials})")
    header = ["fault", "store back -> next event p50 / max (s)", "-> turn's end p50 / max (s)",
              "time added beyond the outage (x baseline)", "turns broken"]  # fmt: skip
    print(table(rows, header))
    print(
        "saved", save("store_outage", {"command": command, "machine": machine(), "baseline_s": base, "trials": results})
    )


if __name__ == "__main__":
    main()
