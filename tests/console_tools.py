"""Tools the console tests offer to turns (module level, so tool processes import them)."""

from __future__ import annotations

from actors import tool


@tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish a note (needs a person's approval)."""
    return f"published {len(text)} characters"


@tool(inline=True)
async def host_armed() -> bool:
    """Whether the TurnHost this runs in records metrics (an inline tool runs in the host)."""
    from actors.telemetry.metrics import armed

    return armed()
