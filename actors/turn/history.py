"""The tool-call pairing rule every history must keep, checked the way providers check it.

An assistant message with ``tool_calls`` must be followed at once by exactly one ``tool``
message per call (any order within that run of tool messages), and every ``tool`` message
must answer a call of the assistant message just before its run. The scripted provider
rejects a request that breaks the rule with HTTP 400, as OpenAI does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from messages import ChatMessage, ToolSpec

__all__ = ["close_open_calls", "history_problems", "opening_problems"]


def history_problems(messages: Sequence[ChatMessage]) -> list[str]:
    """Every way ``messages`` breaks the pairing rule; empty when the history is valid."""
    problems: list[str] = []
    open_calls: list[str] = []  # calls of the last assistant message not yet answered
    in_tool_run = False
    for i, m in enumerate(messages):
        if m.role == "tool":
            if not in_tool_run:
                problems.append(
                    f"message {i}: tool message for {m.tool_call_id!r} does not follow an assistant tool call"
                )
            elif m.tool_call_id not in open_calls:
                problems.append(f"message {i}: tool message for {m.tool_call_id!r} answers no open tool call")
            else:
                open_calls.remove(m.tool_call_id)
            continue
        if open_calls:
            problems.append(f"message {i}: tool call(s) {', '.join(map(repr, open_calls))} have no tool message")
        open_calls, in_tool_run = [], False
        if m.role == "assistant" and m.tool_calls:
            ids = [c.id for c in m.tool_calls]
            dupes = sorted({x for x in ids if ids.count(x) > 1})
            if dupes:
                problems.append(f"message {i}: duplicate tool call id(s) {', '.join(map(repr, dupes))}")
            open_calls, in_tool_run = list(dict.fromkeys(ids)), True
    if open_calls:
        problems.append(f"end of history: tool call(s) {', '.join(map(repr, open_calls))} have no tool message")
    return problems


def close_open_calls(
    messages: Sequence[ChatMessage], content: str, results: Mapping[str, Sequence[str]] | None = None
) -> list[ChatMessage]:
    """``messages`` with a tool message for every call of the last assistant message that
    has none yet (a turn ended from outside while its calls were open).

    ``results`` holds, per call id, the contents of the turn's ``ToolFinished`` events in
    order: a call that had finished keeps its result; only the others get ``content``.
    Earlier rounds may have used the same id: their tool messages, already in ``messages``,
    say how many of that id's results are theirs."""
    out = list(messages)
    for i in range(len(out) - 1, -1, -1):
        m = out[i]
        if m.role == "assistant":
            if m.tool_calls:
                answered = {x.tool_call_id for x in out[i + 1 :] if x.role == "tool"}
                for c in m.tool_calls:
                    if c.id in answered:
                        continue
                    earlier = sum(1 for x in out[:i] if x.role == "tool" and x.tool_call_id == c.id)
                    known = (results or {}).get(c.id, ())
                    text = known[earlier] if len(known) > earlier else content
                    out.append(ChatMessage.tool(text, c.id, name=c.name))
            break
        if m.role != "tool":
            break
    return out


def opening_problems(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> list[str]:
    """Why a turn cannot start with ``messages`` and ``tools``; empty when it can."""
    problems = []
    if not messages:
        problems.append("a turn needs at least one message")
    names = [t.name for t in tools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"tool names must be unique: {', '.join(dupes)}")
    return problems + history_problems(messages)
