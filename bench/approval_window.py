"""Approval window: how often a cancel sent right behind an approval wins, per window.

A supervisor actor sends ``ToolApprovalResponse`` and ``CancelTurn`` back to back, in one
handler, to a turn paused for approval. The cancel wins when the approved tool never starts
(the turn ends cancelled). The window is how long an approval waits before it commits.

    python bench/approval_window.py [--trials 40] [--windows 0,0.001,0.002,0.005,0.01,0.05]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors import Runtime  # noqa: E402
from actors.testing import ScriptedProvider, call, use_tools  # noqa: E402
from actors.tools.definition import tool_specs  # noqa: E402
from bench.common import save, table  # noqa: E402
from messages import CancelTurn, ChatMessage, StartTurn, ToolApprovalResponse, ToolCallStarted, TurnOptions  # noqa: E402
from tests import tools_for_tests as T  # noqa: E402
from tests.actors_for_tests import Begin, Report, Seen, Supervisor  # noqa: E402


def cancel_wins(rt: Runtime, provider: ScriptedProvider, window: float) -> bool:
    provider.add(use_tools(call("write_file", {"path": "/etc/x", "text": "y"})))
    start = StartTurn(
        messages=[ChatMessage.user("w")],
        tools=tool_specs([T.write_file]),
        provider=rt.provider,
        options=TurnOptions(approval_window=window),
    )
    burst = [
        ToolApprovalResponse(turn_id=start.turn_id, call_id="call_1", approved=True),
        CancelTurn(turn_id=start.turn_id, reason="supervisor"),
    ]
    asys = rt.actor_system
    sup = asys.createActor(Supervisor)
    asys.tell(sup, Begin(start, burst))
    seen = asys.ask(sup, Report(), 60)
    assert isinstance(seen, Seen), seen
    return not any(isinstance(e, ToolCallStarted) for e in seen.events)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--windows", default="0,0.001,0.002,0.005,0.01,0.05")
    args = parser.parse_args()
    windows = [float(w) for w in args.windows.split(",")]
    rows, results = [], {}
    with ScriptedProvider() as provider, Runtime(provider.provider()) as rt:
        for window in windows:
            wins = sum(cancel_wins(rt, provider, window) for _ in range(args.trials))
            results[str(window)] = wins
            rows.append([f"{window * 1000:g} ms", f"{wins}/{args.trials}"])
    print("a cancel sent right behind an approval: how often it wins, per approval window")
    print(table(rows, ["approval_window", "cancel won"]))
    print("saved", save("approval_window", {"trials": args.trials, "wins": results}))


if __name__ == "__main__":
    main()
