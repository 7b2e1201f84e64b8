"""Run one turn on a durable Runtime up to a point, say where it stands, and wait to be killed.

    python -m tests.durable_child STORE BASE_URL SCENARIO TURN_ID

Scenarios: ``approval`` (stops at Finish(awaiting_approval)), ``tool`` and ``tool_safely``
(stop once the side-effecting tool has recorded its key; the scripted model names the file).
Prints one JSON line {"turn_id", "sid", "pid"} and then blocks on stdin.
"""

from __future__ import annotations

import json
import os
import sys

from actors import Runtime
from messages import ProviderConfig, RetryPolicy, ToolProgress

from . import tools_for_tests as T


def main() -> None:
    store, base_url, scenario, turn_id = sys.argv[1:5]
    provider = ProviderConfig(base_url=base_url, model="scripted-model", retry=RetryPolicy(max_attempts=1))
    rt = Runtime(provider, store=store).start()
    if scenario == "approval":
        turn = rt.run("write the motd", tools=[T.write_file], turn_id=turn_id)
        assert turn.result(60).finish_reason == "awaiting_approval"
    else:
        tool = T.record_key if scenario == "tool" else T.record_key_safely
        turn = rt.run("record it", tools=[tool], turn_id=turn_id)
        turn.wait_for(lambda e: isinstance(e, ToolProgress), timeout=60)
    print(json.dumps({"turn_id": turn_id, "sid": rt.admin_sid, "pid": os.getpid()}), flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
