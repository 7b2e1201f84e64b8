"""greenroom's messages: plain, immutable data exchanged by actors, processes and hosts.

Families: chat data (``chat``), provider and LLM stream (``llm``), tools (``tool``), turn
control (``control``), turn events (``events``), a turn's state (``state``) and the msgpack
codec (``codec``).
"""

from __future__ import annotations

from .base import Message
from .chat import ChatMessage, Role, ToolCall, Usage
from .cluster import ListNodes, MembershipChanged, NodeInfo, NodeList, WatchMembership
from .codec import (
    CodecError,
    SnapshotVersionError,
    decode,
    decode_snapshot,
    encode,
    encode_snapshot,
    message_classes,
)
from .control import (
    CancelTurn,
    ControlReply,
    RejectCode,
    RespondToApprovals,
    StartTurn,
    StopTool,
    StopTurn,
    Subscribe,
    ToolApprovalResponse,
    TurnOptions,
    new_turn_id,
)
from .events import (
    TERMINAL_REASONS,
    Error,
    Finish,
    FinishReason,
    TextDelta,
    ToolApprovalRequest,
    ToolCallStarted,
    ToolFinished,
    ToolProgress,
    TurnEvent,
    TurnEventUnion,
    TurnRetrying,
    TurnStarted,
)
from .llm import (
    AbortStream,
    FinishReasonLLM,
    LLMCompleted,
    LLMDeltas,
    LLMFailed,
    LLMRetrying,
    ProviderConfig,
    RetryPolicy,
    StreamChat,
    Timeouts,
)
from .state import SCHEMA_VERSION, CallState, Marker, TurnState
from .tool import ApprovalMode, InterruptTool, ReportProgress, RunTool, ToolAlive, ToolOutcome, ToolResult, ToolSpec

__all__ = [
    "AbortStream",
    "ApprovalMode",
    "CallState",
    "CancelTurn",
    "ChatMessage",
    "CodecError",
    "ControlReply",
    "decode",
    "decode_snapshot",
    "encode",
    "encode_snapshot",
    "Error",
    "Finish",
    "FinishReason",
    "FinishReasonLLM",
    "InterruptTool",
    "ListNodes",
    "LLMCompleted",
    "LLMDeltas",
    "LLMFailed",
    "LLMRetrying",
    "Marker",
    "MembershipChanged",
    "Message",
    "message_classes",
    "new_turn_id",
    "NodeInfo",
    "NodeList",
    "ProviderConfig",
    "RejectCode",
    "ReportProgress",
    "RespondToApprovals",
    "RetryPolicy",
    "Role",
    "RunTool",
    "SCHEMA_VERSION",
    "SnapshotVersionError",
    "StartTurn",
    "StopTool",
    "StopTurn",
    "StreamChat",
    "Subscribe",
    "TERMINAL_REASONS",
    "TextDelta",
    "Timeouts",
    "ToolAlive",
    "ToolApprovalRequest",
    "ToolApprovalResponse",
    "ToolCall",
    "ToolCallStarted",
    "ToolFinished",
    "ToolOutcome",
    "ToolProgress",
    "ToolResult",
    "ToolSpec",
    "TurnEvent",
    "TurnEventUnion",
    "TurnOptions",
    "TurnRetrying",
    "TurnStarted",
    "TurnState",
    "Usage",
    "WatchMembership",
]
