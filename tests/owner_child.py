"""Own a Runtime in a process of its own, bring one turn to a point, then end as told.

    python -m tests.owner_child STORE|- BASE_URL SCENARIO TURN_ID MODE

Scenarios: ``approval`` (paused at ``Finish(awaiting_approval)``), ``gated`` (the same,
for a side effect: ``append_key``), ``tool`` (a side effect
recorded, the call still running: ``record_key``), ``naive`` (a tool with naive children,
``spawn_naive``). Prints one JSON line ``{"pid", "sid", "pids"}`` (``pids``: what the tool
reported), then ends by MODE: ``wait`` (until killed), ``exit`` (``os._exit`` at once),
``raise`` (an exception escapes the main thread), ``spam`` (writes to stdout until the pipe
breaks).
"""

from __future__ import annotations

import json
import os
import sys

from actors import Runtime
from messages import ProviderConfig, RetryPolicy, ToolProgress

from . import tools_for_tests as T


def main() -> None:
    store, base_url, scenario, turn_id, mode = sys.argv[1:6]
    provider = ProviderConfig(base_url=base_url, model="scripted-model", retry=RetryPolicy(max_attempts=1))
    rt = Runtime(provider, store=None if store == "-" else store).start()
    pids: list[int] = []
    if scenario in ("approval", "gated"):
        tool = T.write_file if scenario == "approval" else T.append_key
        turn = rt.run("write it", tools=[tool], turn_id=turn_id)
        assert turn.result(60).finish_reason == "awaiting_approval"
    else:
        tool = T.record_key if scenario == "tool" else T.spawn_naive
        turn = rt.run("go", tools=[tool], turn_id=turn_id)
        progress = turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=60)
        if isinstance(progress.data, dict):
            pids = progress.data["pids"]
    print(json.dumps({"pid": os.getpid(), "sid": rt.admin_sid, "pids": pids}), flush=True)
    if mode == "exit":
        os._exit(3)
    if mode == "raise":
        raise SystemExit("the application gave up")
    if mode == "spam":
        while True:
            print("x" * 1000, flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
