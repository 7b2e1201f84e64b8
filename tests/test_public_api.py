"""The public surface is locked: exported names and every message's wire ``kind``.

Wire names are forever: renaming a kind breaks every stored snapshot, event log and peer on
another host. Changing this file is a decision, not a side effect.
"""

from __future__ import annotations

import actors
import messages

ACTORS = [
    "AsyncQueued", "AsyncRuntime", "AsyncSession", "AsyncTurnHandle", "BudgetWarning", "CancelTurn", "Cancellation", "ChatMessage", "ChildTurnFailed", "CodecError",
    "CommandResult", "ConfigurationError", "ControlRejected", "ControlReply", "DIRECTORY_NAME", "DirectoryActor",
    "Error", "EventBatch", "Finish", "FinishReason", "ForkOrigin", "GreenroomError", "HostUnreachable", "InputAccepted",
    "MembershipChanged", "Overloaded", "PauseTurn", "ProviderConfig", "Queued", "RateLimit", "RateLimited", "ReaderDropped",
    "Registration", "RespondToApprovals", "ResumeTurn", "RetryPolicy", "Runtime", "RuntimeClosedError", "SendInput",
    "Session", "SnapshotError",
    "StartTurn", "StopTool", "StopTurn", "StoreError", "StoreUnavailable", "Subscribe", "Supervisor", "TextDelta",
    "Timeouts", "Tool",
    "ToolApprovalRequest", "ToolApprovalResponse", "ToolCall", "ToolCallStarted", "ToolCancelled", "ToolContext",
    "ToolContextError", "ToolDefinitionError", "ToolFinished", "ToolProgress", "TransportAuthError",
    "TransportConfig", "TurnEvent", "TurnHandle", "TurnOptions", "TurnResult", "TurnRetrying", "TurnStarted",
    "TurnTimeout", "UnknownSession", "Usage", "history_problems", "mcp_tools", "messages_from", "requires_approval", "run_command",
    "run_subagent", "tool", "tool_specs",
]  # fmt: skip

MESSAGES = [
    "AbortStream", "ApprovalMode", "BudgetWarning", "CallState", "CancelTurn", "ChatMessage", "CodecError", "Consumed", "ControlReply", "Error",
    "Finish", "FinishReason", "FinishReasonLLM", "ForkOrigin", "InputAccepted", "InterruptTool", "LLMCompleted", "LLMDeltas",
    "LLMFailed", "LLMRateLimited", "LLMRetrying", "LLMUsage", "ListNodes", "Marker", "MembershipChanged", "Message", "NodeInfo",
    "NodeList", "PauseTurn", "ProviderConfig", "RateLimit", "RateLimited", "RejectCode", "ReportProgress", "RespondToApprovals", "ResumeTurn",
    "RetryPolicy", "Role", "RunTool", "SCHEMA_VERSION", "SendInput", "SnapshotVersionError", "StartTurn", "StopCause", "StopTool", "StopTurn", "StreamChat", "Subscribe", "TERMINAL_REASONS",
    "TURN_COMMANDS",
    "TextDelta", "Timeouts", "ToolAlive", "ToolApprovalRequest", "ToolApprovalResponse", "ToolCall", "ToolCallStarted",
    "ToolFinished", "ToolOutcome", "ToolProgress", "ToolResult", "ToolSpec", "TurnCommand", "TurnEvent", "TurnEventUnion",
    "TurnOptions", "TurnRetrying", "TurnStarted", "TurnState", "Unsubscribe", "Usage", "WatchMembership", "decode", "decode_snapshot",
    "encode", "encode_snapshot", "extend_history", "host_lost", "message_classes", "new_turn_id", "reply_for", "unaddressed", "whole_history",
]  # fmt: skip

KINDS = {
    "AbortStream": "abort_stream", "BudgetWarning": "budget_warning", "InputAccepted": "input_accepted",
    "LLMUsage": "llm_usage", "PauseTurn": "pause_turn", "ResumeTurn": "resume_turn", "SendInput": "send_input", "CancelTurn": "cancel_turn", "ChatMessage": "chat_message", "Consumed": "consumed",
    "ControlReply": "control_reply", "Error": "error", "Finish": "finish", "ForkOrigin": "fork_origin", "InterruptTool": "interrupt_tool",
    "ListNodes": "list_nodes", "LLMCompleted": "llm_completed", "LLMDeltas": "llm_deltas", "LLMFailed": "llm_failed",
    "LLMRetrying": "llm_retrying", "LLMRateLimited": "llm_rate_limited", "RateLimit": "rate_limit",
    "RateLimited": "rate_limited", "MembershipChanged": "membership_changed", "NodeInfo": "node_info",
    "NodeList": "node_list", "ProviderConfig": "provider_config", "ReportProgress": "report_progress",
    "RespondToApprovals": "respond_to_approvals", "RetryPolicy": "retry_policy", "RunTool": "run_tool",
    "StartTurn": "start_turn", "StopTool": "stop_tool", "StopTurn": "stop_turn", "StreamChat": "stream_chat",
    "Subscribe": "subscribe", "TextDelta": "text_delta", "Timeouts": "timeouts", "ToolAlive": "tool_alive",
    "ToolApprovalRequest": "tool_approval_request", "ToolApprovalResponse": "tool_approval_response",
    "ToolCall": "tool_call", "ToolCallStarted": "tool_call_started", "ToolFinished": "tool_finished",
    "ToolProgress": "tool_progress", "ToolResult": "tool_result", "ToolSpec": "tool_spec",
    "TurnOptions": "turn_options", "TurnRetrying": "turn_retrying", "TurnStarted": "turn_started", "Usage": "usage",
    "Unsubscribe": "unsubscribe",
    "WatchMembership": "watch_membership",
}  # fmt: skip


def test_the_actors_package_exports_exactly_these_names() -> None:
    assert sorted(actors.__all__) == ACTORS
    assert all(hasattr(actors, name) for name in ACTORS)


def test_the_messages_package_exports_exactly_these_names() -> None:
    assert sorted(messages.__all__) == MESSAGES
    assert all(hasattr(messages, name) for name in MESSAGES)


def test_every_message_kind_is_locked() -> None:
    assert {cls.__name__: kind for kind, cls in messages.message_classes().items()} == KINDS


def test_message_class_names_are_unique_because_thespian_dispatches_on_them() -> None:
    names = [cls.__name__ for cls in messages.message_classes().values()]
    assert len(names) == len(set(names))


def test_internal_message_names_do_not_collide_with_public_ones_because_thespian_dispatches_on_them() -> None:
    from actors import internal

    public = {cls.__name__ for cls in messages.message_classes().values()}
    assert set(internal.__all__).isdisjoint(public)


def test_every_reject_code_is_locked() -> None:
    from typing import get_args

    assert get_args(messages.RejectCode) == (
        "unknown_turn", "turn_finished", "unknown_call", "not_waiting", "duplicate", "invalid", "not_allowed",
        "overloaded", "queued",
    )  # fmt: skip
