"""Hold a chat of three turns on a durable session, say where it stands, and wait to be killed.

    python -m tests.session_child STORE BASE_URL

Prints one JSON line {"session_id", "turns", "sid", "pid"} once the three turns are in the
session's history (and so in the store), then blocks on stdin.
"""

from __future__ import annotations

import json
import os
import sys

from actors import Runtime
from messages import ProviderConfig, RetryPolicy


def main() -> None:
    store, base_url = sys.argv[1:3]
    provider = ProviderConfig(base_url=base_url, model="scripted-model", retry=RetryPolicy(max_attempts=1))
    rt = Runtime(provider, store=store, hosts=1, tool_processes=1).start()
    chat = rt.session()
    for text in ("one", "two", "three"):
        assert chat.run(text).result(60).finish_reason == "stop"
    assert len(chat.wait_idle(60)) == 6
    print(json.dumps({"session_id": chat.session_id, "turns": chat.turns, "sid": rt.admin_sid, "pid": os.getpid()}))
    sys.stdout.flush()
    sys.stdin.read()


if __name__ == "__main__":
    main()
