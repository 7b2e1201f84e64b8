"""A second process writing to a durable session: one message each time the test says so.

    WRITER_KEY=HEX python -m tests.session_writer STORE BASE_URL SESSION_ID

Its Runtime has the transport key ``$WRITER_KEY`` (the test's Runtime's: the processes of one
deployment share a key, and a turn of another's is reached only with it). Prints {"ready": true} once its Runtime runs and the session is open. Then, for each line
on stdin: ``{"text": ..., "on_busy": ...}`` sends that message (``session.run``) and prints
what came of it ({"ok": true, "returned": "handle" | "queued", "turn_id": ...} or
{"ok": false, "code": ..., "message": ...}); ``"exit"`` closes the Runtime and exits.
"""

from __future__ import annotations

import json
import os
import sys

from actors import ControlRejected, Queued, Runtime
from messages import ProviderConfig, RetryPolicy


def main() -> None:
    store, base_url, session_id = sys.argv[1:4]
    provider = ProviderConfig(base_url=base_url, model="scripted-model", retry=RetryPolicy(max_attempts=1))
    key = bytes.fromhex(os.environ["WRITER_KEY"])
    with Runtime(provider, store=store, hosts=1, tool_processes=1, key=key) as rt:
        chat = rt.session(session_id)
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            if line.strip() == "exit":
                break
            ask = json.loads(line)
            try:
                out = chat.run(ask["text"], on_busy=ask["on_busy"])
            except ControlRejected as exc:
                print(json.dumps({"ok": False, "code": exc.code, "message": str(exc)}), flush=True)
                continue
            returned = "queued" if isinstance(out, Queued) else "handle"
            print(json.dumps({"ok": True, "returned": returned, "turn_id": out.turn_id}), flush=True)


if __name__ == "__main__":
    main()
