"""The public surface is locked: exported names and every message's wire ``kind``.

Wire names are forever: renaming a kind breaks every stored snapshot, event log and peer on
another host. Changing this file is a decision, not a side effect.
"""

from __future__ import annotations

import actors
import messages

ACTORS = [
    "Cancellation", "CodecError", "CommandResult", "ConfigurationError", "ControlRejected", "DIRECTORY_NAME",
    "DirectoryActor", "EventBatch", "GreenroomError", "LLMActor", "Registration", "Runtime", "RuntimeClosedError", "SnapshotError",
    "StoreError", "Supervisor", "Tool", "ToolActor", "ToolCancelled", "ToolContext", "ToolContextError", "ToolDefinitionError",
    "TransportAuthError", "TurnActor", "TurnHandle", "TurnResult", "TurnRules", "TurnTimeout", "history_problems",
    "requires_approval", "run_command", "tool",
]  # fmt: skip

MESSAGES = [
    "AbortStream", "ApprovalMode", "CallState", "CancelTurn", "ChatMessage", "CodecError", "ControlReply", "Error",
    "Finish", "FinishReason", "FinishReasonLLM", "InterruptTool", "LLMCompleted", "LLMDeltas", "LLMFailed",
    "LLMRetrying", "ListNodes", "Marker", "MembershipChanged", "Message", "NodeInfo", "NodeList", "ProviderConfig",
    "RejectCode", "ReportProgress", "RespondToApprovals", "RetryPolicy", "Role", "RunTool", "SCHEMA_VERSION",
    "SnapshotVersionError", "StartTurn", "StopCause", "StopTool", "StopTurn", "StreamChat", "Subscribe", "TERMINAL_REASONS",
    "TextDelta", "Timeouts", "ToolAlive", "ToolApprovalRequest", "ToolApprovalResponse", "ToolCall", "ToolCallStarted",
    "ToolFinished", "ToolOutcome", "ToolProgress", "ToolResult", "ToolSpec", "TurnEvent", "TurnEventUnion",
    "TurnOptions", "TurnRetrying", "TurnStarted", "TurnState", "Usage", "WatchMembership", "decode", "decode_snapshot",
    "encode", "encode_snapshot", "message_classes", "new_turn_id", "reply_for",
]  # fmt: skip

KINDS = {
    "AbortStream": "abort_stream", "CancelTurn": "cancel_turn", "ChatMessage": "chat_message",
    "ControlReply": "control_reply", "Error": "error", "Finish": "finish", "InterruptTool": "interrupt_tool",
    "ListNodes": "list_nodes", "LLMCompleted": "llm_completed", "LLMDeltas": "llm_deltas", "LLMFailed": "llm_failed",
    "LLMRetrying": "llm_retrying", "MembershipChanged": "membership_changed", "NodeInfo": "node_info",
    "NodeList": "node_list", "ProviderConfig": "provider_config", "ReportProgress": "report_progress",
    "RespondToApprovals": "respond_to_approvals", "RetryPolicy": "retry_policy", "RunTool": "run_tool",
    "StartTurn": "start_turn", "StopTool": "stop_tool", "StopTurn": "stop_turn", "StreamChat": "stream_chat",
    "Subscribe": "subscribe", "TextDelta": "text_delta", "Timeouts": "timeouts", "ToolAlive": "tool_alive",
    "ToolApprovalRequest": "tool_approval_request", "ToolApprovalResponse": "tool_approval_response",
    "ToolCall": "tool_call", "ToolCallStarted": "tool_call_started", "ToolFinished": "tool_finished",
    "ToolProgress": "tool_progress", "ToolResult": "tool_result", "ToolSpec": "tool_spec",
    "TurnOptions": "turn_options", "TurnRetrying": "turn_retrying", "TurnStarted": "turn_started", "Usage": "usage",
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
