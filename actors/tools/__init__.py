"""Tools: defining them (``@tool``, ``ToolContext``, ``run_command``, ``run_subagent``) and the
tool processes that run them (``pool.ToolPool``, ``worker.ToolWorker``, one
``tool_actor.ToolActor`` per call).

Runs in: the application (defining tools), each node's ToolPool process, each pooled tool
process, and a TurnHost for inline ``async def`` tools.

May import: ``turn`` (the tool message format), ``wire``, ``telemetry.spans``,
``lifecycle.processes`` and the shared modules; never ``client``, ``host`` or ``cluster``.

``from actors.tools import tool`` and the other names of ``definition`` keep working.
"""

from .definition import *  # noqa: F403  (the names of the 0.1.0 module actors.tools)
from .definition import __all__
