"""Tools: defining them (``@tool``, ``ToolContext``, ``run_command``, ``run_subagent``) and the
tool processes that run them (``pool.ToolPool``, ``worker.ToolWorker``, one
``tool_actor.ToolActor`` per call).

Runs in: the application (defining tools), each node's ToolPool process, each pooled tool
process, and a TurnHost for inline ``async def`` tools.

May import: ``turn`` (the tool message format), ``wire``, ``telemetry.spans``,
``lifecycle.processes`` and the shared modules; never ``client``, ``host`` or ``cluster``.

The names of the 0.1.0 module ``actors.tools`` stay importable from here.
"""

from ..turn.results import error_result, ok_result
from .definition import Approval, Tool, requires_approval, tool, tool_specs
from .loading import load_tool, needs_approval
from .refs import import_ref, ref_of

__all__ = [
    "Approval",
    "Tool",
    "error_result",
    "import_ref",
    "load_tool",
    "needs_approval",
    "ok_result",
    "ref_of",
    "requires_approval",
    "tool",
    "tool_specs",
]
