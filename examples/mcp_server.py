"""A small MCP server for examples/06_mcp.py, written with the official ``mcp`` package.

    python examples/mcp_server.py MARKS     # stdio; MARKS: a directory for marker files

``export_all`` runs until it is cancelled, and then writes ``MARKS/export.cancelled``: the
example shows that a stop in greenroom reaches the server.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("city-facts", log_level="WARNING")
MARKS = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
CITIES = {"Paris": 2.1, "Oslo": 0.7}


@server.tool()
def lookup_city(city: str) -> dict[str, object]:
    """Population of a city, in millions."""
    return {"city": city, "population_m": CITIES.get(city)}


@server.tool()
async def index_pages(pages: int, ctx: Context) -> str:
    """Index pages, reporting progress after each."""
    for page in range(1, pages + 1):
        await ctx.report_progress(page, pages, f"page {page}/{pages}")
    return f"indexed {pages} pages"


@server.tool()
async def export_all(ctx: Context) -> str:
    """Export everything (takes until it is cancelled)."""
    await ctx.report_progress(0, None, "exporting")
    try:
        await anyio.sleep(3600)
    except anyio.get_cancelled_exc_class():
        (MARKS / "export.cancelled").write_text("cancelled\n")
        raise
    return "exported"


if __name__ == "__main__":
    server.run()
