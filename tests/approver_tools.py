"""Tools whose calls only some may decide (``approvers``), for the tests of who decided.
Module level, so tool processes import them by path."""

from __future__ import annotations

from actors import tool


@tool(requires_approval=True, approvers={"reviewer", "ops"})
def release(version: str) -> str:
    """Release a version (a reviewer or ops decides)."""
    return f"released {version}"


@tool(requires_approval=True)
def note(text: str) -> str:
    """Write a note (anyone decides)."""
    return f"noted {len(text)} characters"
