"""Own a Runtime whose caller never reads its turns' events; report the owner's memory.

    python -m tests.unread_owner TURNS EVENTS

Starts a scripted provider and a Runtime (one host) in this process, runs one turn read to
its end (the warm-up), then ``TURNS`` turns of ``EVENTS`` progress events each whose handles
are kept and never read (``reader_grace`` 1 s), waits (at most 60 s in all) until each
has its terminal ``Finish`` or was dropped by its host, and prints one JSON line: ``{"before": KiB, "after": KiB, "received": n, "dropped": n}`` (the
resident memory of this process before and after the unread turns, how many of their events
reached it, and how many handles their hosts dropped).
"""

from __future__ import annotations

import gc
import json
import sys
import time

from actors import Runtime
from actors.testing import Reply, Request, ScriptedProvider, call, say, use_tools
from messages import RetryPolicy, TurnOptions

from . import reliability_tools as R


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    turns, events = int(sys.argv[1]), int(sys.argv[2])

    def responder(request: Request) -> Reply:
        if any(m.get("role") == "tool" for m in request.messages):
            return say("done")
        count = events if "unread" in str(request.messages[-1].get("content")) else 10
        return use_tools(call("progress_burst", {"count": count}))

    with ScriptedProvider(responder=responder) as provider:
        with Runtime(provider.provider(retry=RetryPolicy(max_attempts=1)), hosts=1, tool_processes=1) as rt:
            for _ in rt.run("warm up", tools=[R.progress_burst]).events(timeout=30):
                pass
            gc.collect()
            before = rss_kib()
            unread = TurnOptions(reader_grace=1.0)
            handles = [rt.run("unread", tools=[R.progress_burst], options=unread) for _ in range(turns)]
            deadline = time.monotonic() + 60
            while not all(h.finished or h.dropped for h in handles) and time.monotonic() < deadline:
                time.sleep(0.1)  # a poll of the handles' state: reading them would move their windows
            gc.collect()
            after = rss_kib()
            received = sum(len(h.all_events) for h in handles)
            dropped = sum(h.dropped is not None for h in handles)
            print(json.dumps({"before": before, "after": after, "received": received, "dropped": dropped}), flush=True)


if __name__ == "__main__":
    main()
