"""Tools from an MCP server: list them, call them, see their progress, stop one on the server.

python examples/06_mcp.py

Runs offline: the server is examples/mcp_server.py (stdio, started by a turn's host at its
first call, then kept for the host's later calls), the model is scripted. Needs the ``mcp``
extra (``greenroom[mcp]``).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from actors import Runtime, mcp_tools
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.testing.demo import print_event
from messages import ToolProgress

SERVER = Path(__file__).with_name("mcp_server.py")


def main() -> None:
    script = [
        use_tools(call("lookup_city", {"city": "Paris"}), call("index_pages", {"pages": 3})),
        say("Paris has 2.1 million people; 3 pages indexed."),
        use_tools(call("export_all")),
    ]
    with tempfile.TemporaryDirectory() as marks, ScriptedProvider(script) as model:
        tools = mcp_tools([sys.executable, str(SERVER), marks])  # reads the server's tools/list
        for t in tools:
            print(f"tool {t.name}: {t.description}")
        with Runtime(model.provider()) as runtime:
            print("\n== a call and progress")
            turn = runtime.run("How big is Paris? And index my 3 pages.", tools=tools)
            for event in turn.events(timeout=60):
                print_event(event)

            print("\n== stop: the server sees notifications/cancelled")
            turn = runtime.run("Export everything.", tools=tools)
            for event in turn.events(timeout=60):
                print_event(event)
                if isinstance(event, ToolProgress):
                    turn.stop("the user pressed stop")
            print("tool ->", turn.result().messages[-1].content)
            cancelled = Path(marks, "export.cancelled")
            deadline = time.monotonic() + 10
            while not cancelled.exists() and time.monotonic() < deadline:
                time.sleep(0.01)  # the server writes it when its handler is cancelled
            print("the server's handler was cancelled:", cancelled.exists())


if __name__ == "__main__":
    main()
