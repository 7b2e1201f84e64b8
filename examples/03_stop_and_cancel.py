"""Stop and cancel: stop ends everything now; cancel lets a cooperative tool finish its step.

python examples/03_stop_and_cancel.py
"""

from __future__ import annotations

import time

from actors import Runtime, ToolContext, run_command, tool
from actors.testing import ScriptedProvider, call, use_tools
from actors.testing.demo import print_event
from messages import ToolProgress


@tool
def build(target: str) -> str:
    """Run a long build: a shell that starts a background job and waits (needs a stop)."""
    ctx = ToolContext.current()
    ctx.cancellation.on_stop(lambda: print(f"\n  (on_stop callback: releasing the lock on {target})"))
    run_command(["sh", "-c", "sleep 300 & sleep 300"], on_start=lambda p: ctx.report_progress({"pgid": p.pid}))
    return "built"


@tool
def index_pages(pages: int) -> str:
    """Index pages one by one, checking for cancellation between pages."""
    ctx = ToolContext.current()
    for page in range(pages):
        ctx.cancellation.throw_if_requested()  # a safe boundary
        ctx.report_progress({"page": page})
        time.sleep(0.05)  # index one page
    return f"indexed {pages} pages"


def main() -> None:
    script = [use_tools(call("build", {"target": "app"})), use_tools(call("index_pages", {"pages": 1000}))]
    with ScriptedProvider(script) as model, Runtime(model.provider()) as runtime:
        print("== stop: the build's whole process group is ended at once")
        turn = runtime.run("build the app", tools=[build])
        for event in turn.events(timeout=60):
            print_event(event)
            if isinstance(event, ToolProgress):
                turn.stop("the user pressed stop")

        print("\n== cancel: the indexer leaves at its next check")
        turn = runtime.run("index everything", tools=[index_pages])
        for event in turn.events(timeout=60):
            if isinstance(event, ToolProgress) and event.data["page"] == 3:
                print_event(event)
                turn.cancel("the supervisor winds down")
            elif not isinstance(event, ToolProgress):
                print_event(event)


if __name__ == "__main__":
    main()
