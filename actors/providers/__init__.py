"""Provider adapters (OpenAI-compatible, Anthropic Messages) and the stream worker.

Runs in: each TurnHost (its streams, on worker threads); ``formats`` also in the owner.

May import: ``messages`` and the shared modules.
"""

from __future__ import annotations

from .anthropic import AnthropicAdapter, AnthropicStream
from .base import ProviderStreamError
from .openai import OpenAIAdapter, OpenAIStream
from .sse import SSEEvent, iter_sse
from .streaming import ADAPTERS, ProviderClient, StreamWorker, backoff_delay

__all__ = [
    "ADAPTERS",
    "AnthropicAdapter",
    "AnthropicStream",
    "OpenAIAdapter",
    "OpenAIStream",
    "ProviderClient",
    "ProviderStreamError",
    "SSEEvent",
    "StreamWorker",
    "backoff_delay",
    "iter_sse",
]
