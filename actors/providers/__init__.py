"""Provider adapters (OpenAI-compatible, Anthropic Messages) and the stream worker.

Runs in: each TurnHost (its streams, on its stream loop's thread); ``formats`` also in the owner.

May import: ``messages`` and the shared modules.
"""

from __future__ import annotations

from .anthropic import AnthropicAdapter, AnthropicStream
from .base import ProviderStreamError
from .openai import OpenAIAdapter, OpenAIStream
from .sse import SSEEvent, SSEParser, aiter_sse, iter_sse
from .streaming import ADAPTERS, StreamWorker, backoff_delay

__all__ = [
    "ADAPTERS",
    "AnthropicAdapter",
    "AnthropicStream",
    "OpenAIAdapter",
    "OpenAIStream",
    "ProviderStreamError",
    "SSEEvent",
    "SSEParser",
    "StreamWorker",
    "aiter_sse",
    "backoff_delay",
    "iter_sse",
]
