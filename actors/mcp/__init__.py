"""Tools from MCP servers: ``mcp_tools`` (in the caller's process), and the sessions a
TurnHost keeps with the servers (``session``, ``client``, on the host's event loop).

Runs in: the application (listing a server's tools) and each TurnHost (calls).

May import: ``tools``, ``lifecycle.processes`` and the shared modules. ``mcp`` (the
package) is imported only where a server is reached.

``actors.mcp:load_mcp_tool`` is the factory named in every MCP tool's persisted spec: it
must keep resolving.
"""

from .tools import MCPTool, load_mcp_tool, mcp_tools

__all__ = ["MCPTool", "load_mcp_tool", "mcp_tools"]
