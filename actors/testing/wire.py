"""A scripted reply rendered in a provider's wire format, and the history checks a real provider makes."""

from __future__ import annotations

import json
import time
from typing import Any

from messages import ChatMessage, ToolCall

from ..turn.history import history_problems
from .script import Chunk, Part, Raw, Reply, Text, ToolArgs, ToolStart

# -- rendering ------------------------------------------------------------------------------


def _finish_of(reply: Reply) -> str:
    if reply.finish_reason is not None:
        return reply.finish_reason
    return "tool_calls" if any(isinstance(p, ToolStart) for p in reply.parts) else "stop"


def openai_frames(reply: Reply, model: str) -> list[bytes]:
    created = int(time.time())
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": created, "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        obj = dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    frames: list[bytes] = []
    if reply.role_chunk:
        frames.append(chunk({"role": "assistant", "content": ""}))
    for p in reply.parts:
        if isinstance(p, Text):
            frames.append(chunk({"content": p.text}))
        elif isinstance(p, ToolStart):
            tc: dict[str, Any] = {
                "index": p.index,
                "type": "function",
                "function": {"name": p.name, "arguments": p.arguments},
            }
            if p.id is not None:
                tc["id"] = p.id
            frames.append(chunk({"content": None, "tool_calls": [tc]} if reply.null_content else {"tool_calls": [tc]}))
        elif isinstance(p, ToolArgs):
            delta = {"tool_calls": [{"index": p.index, "function": {"arguments": p.fragment}}]}
            frames.append(chunk({"content": None, **delta} if reply.null_content else delta))
        elif isinstance(p, Chunk):
            frames.append(b"data: " + json.dumps(dict(base, **p.obj)).encode() + b"\n\n")
        else:
            frames.append(p.data)
    return frames


def _openai_usage(usage: tuple[int, int]) -> dict[str, int]:
    prompt, completion = usage
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def openai_tail(reply: Reply, model: str) -> list[bytes]:
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    tail = [
        b"data: "
        + json.dumps(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": _finish_of(reply)}])).encode()
        + b"\n\n"
    ]
    if reply.usage is not None:
        usage = _openai_usage(reply.usage)
        tail.append(b"data: " + json.dumps(dict(base, choices=[], usage=usage)).encode() + b"\n\n")
    if reply.done_marker:
        tail.append(b"data: [DONE]\n\n")
    return tail


def _event(name: str, obj: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode()


def anthropic_frames(reply: Reply, model: str) -> list[bytes]:
    usage_in = reply.usage[0] if reply.usage else 0
    frames = []
    if reply.role_chunk:
        frames.append(
            _event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_scripted",
                        "type": "message",
                        "role": "assistant",
                        "content": [],
                        "model": model,
                        "stop_reason": None,
                        "usage": {"input_tokens": usage_in, "output_tokens": 1},
                    },
                },
            )
        )
    block = -1
    open_kind: tuple[str, int] | None = None
    call_blocks: dict[int, int] = {}

    def close() -> None:
        nonlocal open_kind
        if open_kind is not None:
            frames.append(_event("content_block_stop", {"type": "content_block_stop", "index": block}))
            open_kind = None

    # Anthropic blocks do not interleave: each call's fragments follow its start.
    ordered: list[Part] = []
    for p in reply.parts:
        if isinstance(p, ToolArgs):
            continue
        ordered.append(p)
        if isinstance(p, ToolStart):
            ordered.extend(q for q in reply.parts if isinstance(q, ToolArgs) and q.index == p.index)
    for p in ordered:
        if isinstance(p, Text):
            if open_kind is None or open_kind[0] != "text":
                close()
                block += 1
                open_kind = ("text", block)
                frames.append(
                    _event(
                        "content_block_start",
                        {"type": "content_block_start", "index": block, "content_block": {"type": "text", "text": ""}},
                    )
                )
            frames.append(
                _event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": block, "delta": {"type": "text_delta", "text": p.text}},
                )
            )
        elif isinstance(p, ToolStart):
            close()
            block += 1
            open_kind = ("tool", p.index)
            call_blocks[p.index] = block
            frames.append(
                _event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": block,
                        "content_block": {
                            "type": "tool_use",
                            "id": p.id or f"toolu_{p.index}",
                            "name": p.name,
                            "input": {},
                        },
                    },
                )
            )
            if p.arguments:
                frames.append(
                    _event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": block,
                            "delta": {"type": "input_json_delta", "partial_json": p.arguments},
                        },
                    )
                )
        elif isinstance(p, ToolArgs):
            frames.append(
                _event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": call_blocks.get(p.index, block),
                        "delta": {"type": "input_json_delta", "partial_json": p.fragment},
                    },
                )
            )
        elif isinstance(p, Raw):
            frames.append(p.data)
    close()
    return frames


_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def anthropic_tail(reply: Reply, model: str) -> list[bytes]:
    out = reply.usage[1] if reply.usage else 0
    tail = [
        _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": _STOP.get(_finish_of(reply), "end_turn")},
                "usage": {"output_tokens": out},
            },
        )
    ]
    if reply.done_marker:
        tail.append(_event("message_stop", {"type": "message_stop"}))
    return tail


def _whole_text(reply: Reply) -> str:
    return "".join(p.text for p in reply.parts if isinstance(p, Text))


def _whole_calls(reply: Reply) -> list[tuple[ToolStart, str]]:
    """Each tool call of ``reply`` in order: its first fragment and all its arguments."""
    return [
        (p, p.arguments + "".join(q.fragment for q in reply.parts if isinstance(q, ToolArgs) and q.index == p.index))
        for p in reply.parts
        if isinstance(p, ToolStart)
    ]


def openai_completion(reply: Reply, model: str) -> dict[str, Any]:
    """``reply`` as one non-streaming ``chat.completion`` (a call sent without an id has none)."""
    message: dict[str, Any] = {"role": "assistant", "content": _whole_text(reply) or None}
    calls = _whole_calls(reply)
    if calls:
        message["tool_calls"] = [
            {
                **({"id": p.id} if p.id is not None else {}),
                "type": "function",
                "function": {"name": p.name, "arguments": args},
            }
            for p, args in calls
        ]
    obj: dict[str, Any] = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_of(reply)}],
    }
    if reply.usage is not None:
        obj["usage"] = _openai_usage(reply.usage)
    return obj


def anthropic_message(reply: Reply, model: str) -> dict[str, Any]:
    """``reply`` as one non-streaming Messages response: its text block, then its tool_use blocks."""
    text = _whole_text(reply)
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "tool_use", "id": p.id or f"toolu_{p.index}", "name": p.name, "input": json.loads(args or "{}")}
        for p, args in _whole_calls(reply)
    ]
    usage_in, usage_out = reply.usage or (0, 0)
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP.get(_finish_of(reply), "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": usage_in, "output_tokens": usage_out},
    }


# -- history checks ---------------------------------------------------------------------------


def openai_history(body: dict[str, Any]) -> list[str]:
    try:
        msgs = [
            ChatMessage(
                role=m["role"],
                content=m.get("content")
                if isinstance(m.get("content"), str) or m.get("content") is None
                else json.dumps(m["content"]),
                tool_call_id=m.get("tool_call_id"),
                tool_calls=[
                    ToolCall(id=tc["id"], name=tc["function"]["name"], arguments=tc["function"].get("arguments", ""))
                    for tc in m.get("tool_calls") or []
                ]
                or None,
            )
            for m in body.get("messages", [])
        ]
    except (KeyError, TypeError, ValueError) as exc:
        return [f"malformed messages: {exc}"]
    return history_problems(msgs)


def anthropic_history(body: dict[str, Any]) -> list[str]:
    problems = []
    msgs = body.get("messages", [])
    for i, m in enumerate(msgs):
        blocks = m.get("content") if isinstance(m.get("content"), list) else []
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if m.get("role") == "assistant" and uses:
            nxt = msgs[i + 1] if i + 1 < len(msgs) else None
            answered = [
                b.get("tool_use_id")
                for b in (nxt.get("content") if nxt and isinstance(nxt.get("content"), list) else [])
                if b.get("type") == "tool_result"
            ]
            for u in uses:
                if answered.count(u) != 1:
                    problems.append(f"messages.{i}: tool_use {u!r} needs exactly one tool_result in the next message")
    return problems
