"""greenroom: an actor-model runtime for LLM agent turns, on Thespian.

A ``TurnActor`` owns a turn's loop and history and an ``LLMActor`` streams the provider's
deltas, both inside a ``TurnHost`` process that hosts many turns; a ``ToolActor`` owns each
tool call, in a pooled tool process. Stop, cancel and approval responses are plain
messages; the turn's rules live in ``TurnRules``.
"""

from __future__ import annotations

import sys

if not sys.platform.startswith("linux"):
    raise ImportError(
        f"greenroom runs on Linux only (this is {sys.platform}): it ends its processes through /proc, "
        "process groups and prctl, which other platforms do not have"
    )

from .commands import CommandResult, run_command
from .directory_actor import DirectoryActor
from .errors import (
    CodecError,
    ConfigurationError,
    ControlRejected,
    GreenroomError,
    RuntimeClosedError,
    SnapshotError,
    StoreError,
    ToolCancelled,
    ToolContextError,
    ToolDefinitionError,
    TransportAuthError,
    TurnTimeout,
)
from .handle import TurnHandle, TurnResult
from .history import history_problems
from .internal import EventBatch
from .llm_actor import LLMActor
from .names import DIRECTORY_NAME
from .runtime import Runtime
from .supervisor import Supervisor
from .tool_actor import ToolActor
from .tool_context import Cancellation, Registration, ToolContext
from .tools import Tool, requires_approval, tool
from .turn_actor import TurnActor
from .turn_rules import TurnRules

__all__ = [
    "Cancellation",
    "CodecError",
    "CommandResult",
    "ConfigurationError",
    "ControlRejected",
    "DIRECTORY_NAME",
    "DirectoryActor",
    "EventBatch",
    "GreenroomError",
    "LLMActor",
    "Registration",
    "Runtime",
    "RuntimeClosedError",
    "SnapshotError",
    "StoreError",
    "Supervisor",
    "Tool",
    "ToolActor",
    "ToolCancelled",
    "ToolContext",
    "ToolContextError",
    "ToolDefinitionError",
    "TransportAuthError",
    "TurnActor",
    "TurnHandle",
    "TurnResult",
    "TurnRules",
    "TurnTimeout",
    "history_problems",
    "requires_approval",
    "run_command",
    "tool",
]
