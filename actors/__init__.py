"""greenroom: an actor-model runtime for LLM agent turns, on Thespian.

A ``TurnActor`` owns a turn's loop and history, an ``LLMActor`` streams the provider's
deltas, and a ``ToolActor`` runs each tool call in its own process. Stop, cancel and
approval responses are plain messages; the turn's rules live in ``TurnRules``.
"""

from __future__ import annotations

from .commands import CommandResult, run_command
from .directory_actor import DIRECTORY_NAME, DirectoryActor
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
from .history import history_problems
from .llm_actor import LLMActor
from .runtime import Runtime, TurnHandle, TurnResult
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
    "GreenroomError",
    "LLMActor",
    "Registration",
    "Runtime",
    "RuntimeClosedError",
    "SnapshotError",
    "StoreError",
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
