"""Own a Runtime whose turn has started a stdio MCP server, then wait to be killed.

    python -m tests.mcp_owner_child BASE_URL MARKS

The scripted model calls the server's ``stubborn`` tool (only SIGKILL ends it then); prints one JSON line
``{"pid", "server_pid"}`` once the turn has ended, then blocks until stdin closes (the test
kills this process with SIGKILL instead).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from actors import Runtime, mcp_tools
from messages import ProviderConfig, RetryPolicy


def main() -> None:
    base_url, marks = sys.argv[1:3]
    provider = ProviderConfig(base_url=base_url, model="scripted-model", retry=RetryPolicy(max_attempts=1))
    server = [sys.executable, str(Path(__file__).with_name("mcp_servers.py")), "stdio", marks]
    rt = Runtime(provider, hosts=1, tool_processes=1).start()
    result = rt.run("which process?", tools=mcp_tools(server)).result(60)
    content = next(m.content for m in result.messages if m.role == "tool")
    print(json.dumps({"pid": os.getpid(), "server_pid": json.loads(content or "{}")["data"]["result"]}), flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
