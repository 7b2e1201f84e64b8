"""What the running side does with a ``ToolSpec``: load the tool behind it, ask its predicate.

``load_tool`` runs where a call runs (a tool process, or a TurnHost for inline tools);
``needs_approval`` runs where the turn runs (a TurnHost), on each fresh call, and
``argument_problem`` there too, on arguments an approver edited (and in the command line
and the console, which check a command against a stored turn).
"""

from __future__ import annotations

from typing import Any

from messages import ToolSpec

from ..errors import ToolDefinitionError
from ..logs import logger
from .definition import Tool
from .refs import import_ref

__all__ = ["argument_problem", "load_tool", "needs_approval"]


log = logger("greenroom.tools")


def load_tool(spec: ToolSpec) -> Tool:
    """The ``Tool`` behind ``spec``, imported in this process (or built by the factory at
    ``spec.ref`` from ``spec.config``)."""
    obj = import_ref(spec.ref)
    if spec.config is not None:
        built = obj(spec)
        if not isinstance(built, Tool):
            raise ToolDefinitionError(f"{spec.ref!r} did not build a Tool from the spec of {spec.name!r}")
        return built
    if isinstance(obj, Tool):
        return obj
    if callable(obj):
        return Tool(obj, name=spec.name, description=spec.description)
    raise ToolDefinitionError(f"{spec.ref!r} is not a function or a Tool")


def needs_approval(spec: ToolSpec, arguments: dict[str, Any]) -> bool:
    """Whether a call of ``spec`` with ``arguments`` waits for a human decision."""
    if spec.approval == "never":
        return False
    if spec.approval == "always" or not spec.approval_ref:
        return True
    try:
        return bool(import_ref(spec.approval_ref)(arguments))
    except Exception:
        log().exception("approval predicate %s raised; the call needs approval", spec.approval_ref)
        return True


def argument_problem(spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not fit the parameters of ``spec``'s tool (what ``Tool.validate``
    says, as a call with them would fail), or None. A tool that cannot be loaded here is not
    checked: the process that runs the call checks its arguments again."""
    try:
        tool = load_tool(spec)
    except Exception as exc:  # an import error of the user's module, say: not this check's to report
        log().debug("cannot load %s to check edited arguments here: %s", spec.ref, exc)
        return None
    try:
        tool.validate(arguments)
    except ValueError as exc:
        return str(exc)
    return None
