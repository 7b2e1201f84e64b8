"""Steering latency: from ``send_input(..., when="now")`` to (a) the provider seeing its
stream closed, (b) the next request (with the input) arriving at the provider, (c) the
``InputAccepted`` event at the caller; from ``pause(when="now")`` to (d) ``Finish(paused)``
at the caller. The baseline, measured in the same run on the same streams: a stop's abort,
from ``stop()`` to the provider seeing its stream closed (``bench/stop_latency.py``'s (c)).
Every trial checks that the history is valid and the input entered once.

    python bench/steer_latency.py [--trials 40] [--store PATH_OR_URL]

With ``--store`` the turns are durable (each transition written before it is acted on); the
store must be new or hold no unfinished turn. Prints p50 and p99 of each and their ratio to
the baseline's p50; saves the figures under bench/results/.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors import InputAccepted, Runtime, TurnHandle  # noqa: E402
from actors.testing import Request, ScriptedProvider, say  # noqa: E402
from actors.turn.history import history_problems  # noqa: E402
from bench.common import against_floor, save, table  # noqa: E402
from messages import Finish, TextDelta  # noqa: E402

WORDS = " ".join(f"w{j}" for j in range(400))  # 2 s of deltas at 5 ms a word: the stream is in flight


def streaming(rt: Runtime, provider: ScriptedProvider, prompt: str, *after: str) -> tuple[TurnHandle, Request]:
    """A turn whose first stream is delivering deltas, and that stream's request."""
    provider.add(say(WORDS, delay=0.005), *(say(a) for a in after))
    turn = rt.run(prompt)
    turn.wait_for(lambda e: isinstance(e, TextDelta), 30)
    return turn, provider.requests[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--store", default=None, help="a SQLite path or a PostgreSQL URL: durable turns")
    args = parser.parse_args()
    closed, next_request, accepted, paused, baseline = [], [], [], [], []
    problems = 0
    with ScriptedProvider() as provider, Runtime(provider.provider(), store=args.store) as rt:
        for _ in range(args.trials):
            # the baseline: a stop's abort of a stream in flight
            turn, request = streaming(rt, provider, "talk")
            t0 = time.monotonic()
            threading.Thread(target=turn.stop, args=("bench",), daemon=True).start()
            turn.wait_for(lambda e: isinstance(e, Finish), 30)
            if request.disconnected.wait(10) and request.disconnected_at is not None:
                baseline.append(request.disconnected_at - t0)
            else:
                problems += 1

            # new input, now: the stream closed, the next request, the event at the caller
            turn, request = streaming(rt, provider, "write", "Short, then.")
            seen = len(provider.requests)
            t0 = time.monotonic()
            send = threading.Thread(target=turn.send_input, args=("make it short",), kwargs={"when": "now"}, daemon=True)
            send.start()
            entered = turn.wait_for(lambda e: isinstance(e, InputAccepted), 30)
            accepted.append((turn.received_at(entered.seq) or t0) - t0)
            asked = provider.wait_for_requests(seen + 1, 30)[seen]
            next_request.append(asked.received_at - t0)
            result = turn.result(30)
            if request.disconnected.wait(10) and request.disconnected_at is not None:
                closed.append(request.disconnected_at - t0)
            else:
                problems += 1
            inputs = [m for m in result.messages if m.role == "user" and m.content == "make it short"]
            problems += bool(history_problems(result.messages)) + (len(inputs) != 1) + (result.finish_reason != "stop")

            # a pause, now: Finish(paused) at the caller; then the turn is stopped
            turn, _ = streaming(rt, provider, "plan")
            t0 = time.monotonic()
            threading.Thread(target=turn.pause, kwargs={"when": "now"}, daemon=True).start()
            finish = turn.wait_for(lambda e: isinstance(e, Finish), 30)
            paused.append((turn.received_at(finish.seq) or t0) - t0)
            problems += getattr(finish, "finish_reason", None) != "paused"
            turn.stop("bench")
            problems += bool(history_problems(turn.result(30).messages))
    rows, results = against_floor(
        [
            ("(a) provider saw its stream closed", closed),
            ("(b) the next request arrived, with the input", next_request),
            ("(c) InputAccepted at the caller", accepted),
            ("(d) pause(now): Finish(paused) at the caller", paused),
            ("baseline: stop(): provider saw its stream closed", baseline),
        ],
        baseline,
    )
    where = f"durable ({args.store})" if args.store else "no store"
    print(f"steering latency, {args.trials} trials per scenario, {where}")
    print(table(rows, ["from send_input(now) / pause(now) to", "p50 ms", "p99 ms", "x stop's abort (p50)"]))
    print(f"trials with a missing close, an invalid history or an input not entered once: {problems}")
    data = {"trials": args.trials, "store": bool(args.store), "results": results, "problems": problems}
    print("saved", save("steer_latency", data))


if __name__ == "__main__":
    main()
