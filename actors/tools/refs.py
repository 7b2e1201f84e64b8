"""Import paths: how a tool (or an approval predicate, or a factory) is named in plain data.

A ``ToolSpec`` names its function as ``"package.module:qualname"``; any process (a tool
process, a TurnHost, a node) loads it from that path. Only module-level objects have one.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import ToolDefinitionError

__all__ = ["import_ref", "ref_of"]


def ref_of(obj: Any) -> str:
    """The import path ``module:qualname`` of a module-level function or object."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        raise ToolDefinitionError(
            f"{obj!r} has no import path: define it at module level (not a lambda or a nested function)"
        )
    return f"{module}:{qualname}"


def import_ref(ref: str) -> Any:
    """The object at ``module:qualname``."""
    module_name, _, qualname = ref.partition(":")
    if not module_name or not qualname:
        raise ToolDefinitionError(f"bad import path {ref!r}: expected 'module:qualname'")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ToolDefinitionError(f"cannot import {ref!r}: {exc}") from None
    return obj
