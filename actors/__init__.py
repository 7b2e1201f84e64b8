"""greenroom: an actor-model runtime for LLM agent turns, on Thespian.

Everything a user needs is importable from here: the runtimes (``Runtime``,
``AsyncRuntime``), conversations (``Session``, ``AsyncSession``, ``Queued``), tools (``tool``, ``ToolContext``, ``run_command``, ``run_subagent``,
``mcp_tools``), the
messages a turn is made of (``ChatMessage``, ``ProviderConfig``, ``TurnOptions``, events
such as ``TextDelta`` and ``Finish``, commands such as ``StopTurn`` and ``SendInput``), what a supervisor
actor uses (``Supervisor``, ``DirectoryActor``, ``DIRECTORY_NAME``, ``EventBatch``), and the
exception tree (``errors``). Everything else is internal.

Inside: a ``TurnActor`` owns a turn's loop and history and an ``LLMActor`` streams the
provider's deltas, both inside a ``TurnHost`` process that hosts many turns; a
``ToolActor`` owns each tool call, in a pooled tool process. Stop, cancel and approval
responses are plain messages; the turn's rules are plain code (``turn.rules``, ``turn.priority``).
"""

from __future__ import annotations

import sys

if not sys.platform.startswith("linux"):
    raise ImportError(
        f"greenroom runs on Linux only (this is {sys.platform}): it ends its processes through /proc, "
        "process groups and prctl, which other platforms do not have"
    )

from . import legacy

legacy.install()  # the module paths of 0.1.0, for stored snapshots and older nodes

from messages import (
    BudgetWarning,
    CancelTurn,
    ChatMessage,
    ControlReply,
    Error,
    Finish,
    FinishReason,
    ForkOrigin,
    InputAccepted,
    MembershipChanged,
    PauseTurn,
    ProviderConfig,
    RateLimit,
    RateLimited,
    RespondToApprovals,
    ResumeTurn,
    RetryPolicy,
    SendInput,
    StartTurn,
    StopTool,
    StopTurn,
    Subscribe,
    TextDelta,
    Timeouts,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolCall,
    ToolCallStarted,
    ToolFinished,
    ToolProgress,
    TurnEvent,
    TurnOptions,
    TurnRetrying,
    TurnStarted,
    Usage,
)

from .client.async_runtime import AsyncRuntime
from .client.async_session import AsyncQueued, AsyncSession
from .client.conversation import Queued, Session
from .client.handle import AsyncTurnHandle, TurnHandle
from .client.runtime import Runtime
from .client.stream import TurnResult
from .cluster.directory import DirectoryActor
from .cluster.names import DIRECTORY_NAME
from .errors import (
    ChildTurnFailed,
    CodecError,
    ConfigurationError,
    ControlRejected,
    GreenroomError,
    HostUnreachable,
    Overloaded,
    ReaderDropped,
    RuntimeClosedError,
    SnapshotError,
    StoreError,
    StoreUnavailable,
    ToolCancelled,
    ToolContextError,
    ToolDefinitionError,
    TransportAuthError,
    TurnTimeout,
    UnknownSession,
)
from .mcp.tools import mcp_tools
from .providers.formats import messages_from
from .supervisor import Supervisor
from .tools.commands import CommandResult, run_command
from .tools.context import Cancellation, Registration, ToolContext
from .tools.definition import Tool, requires_approval, tool, tool_specs
from .tools.subagents import run_subagent
from .turn.history import history_problems
from .wire.protocol import EventBatch
from .wire.transport import TransportConfig

__all__ = [
    "DIRECTORY_NAME",
    "AsyncQueued",
    "AsyncRuntime",
    "AsyncSession",
    "AsyncTurnHandle",
    "BudgetWarning",
    "CancelTurn",
    "Cancellation",
    "ChatMessage",
    "ChildTurnFailed",
    "CodecError",
    "CommandResult",
    "ConfigurationError",
    "ControlRejected",
    "ControlReply",
    "DirectoryActor",
    "Error",
    "EventBatch",
    "Finish",
    "FinishReason",
    "ForkOrigin",
    "GreenroomError",
    "HostUnreachable",
    "InputAccepted",
    "MembershipChanged",
    "Overloaded",
    "PauseTurn",
    "ProviderConfig",
    "RateLimit",
    "RateLimited",
    "ReaderDropped",
    "Registration",
    "RespondToApprovals",
    "ResumeTurn",
    "Queued",
    "RetryPolicy",
    "Runtime",
    "RuntimeClosedError",
    "SendInput",
    "Session",
    "SnapshotError",
    "StartTurn",
    "StopTool",
    "StopTurn",
    "StoreError",
    "StoreUnavailable",
    "Subscribe",
    "Supervisor",
    "TextDelta",
    "Timeouts",
    "Tool",
    "ToolApprovalRequest",
    "ToolApprovalResponse",
    "ToolCall",
    "ToolCallStarted",
    "ToolCancelled",
    "ToolContext",
    "ToolContextError",
    "ToolDefinitionError",
    "ToolFinished",
    "ToolProgress",
    "TransportAuthError",
    "TransportConfig",
    "TurnEvent",
    "TurnHandle",
    "TurnOptions",
    "TurnResult",
    "TurnRetrying",
    "TurnStarted",
    "TurnTimeout",
    "UnknownSession",
    "Usage",
    "history_problems",
    "mcp_tools",
    "messages_from",
    "requires_approval",
    "run_command",
    "run_subagent",
    "tool",
    "tool_specs",
]
