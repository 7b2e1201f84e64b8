"""Provider configuration and the messages between a TurnActor and its LLMActor.

``ProviderConfig`` is plain data that travels in messages and snapshots; it names the
environment variable that holds the API key and never holds the key itself. The LLMActor
reads the key from its own process environment when it makes the request.

A stream is addressed by ``stream_id``; every message the LLMActor sends about it carries a
``seq`` that starts at 0 and grows by one, because Thespian does not guarantee delivery
order. The receiver applies them in ``seq`` order and drops those of a stream it aborted.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .base import Message
from .chat import ChatMessage, Usage

__all__ = [
    "AbortStream",
    "FinishReasonLLM",
    "LLMCompleted",
    "LLMDeltas",
    "LLMFailed",
    "LLMRetrying",
    "LLMRateLimited",
    "LLMUsage",
    "ProviderConfig",
    "RateLimit",
    "RetryPolicy",
    "StreamChat",
    "Timeouts",
]

FinishReasonLLM = Literal["stop", "tool_calls", "length", "content_filter", "unknown"]


class Timeouts(Message):
    """Seconds: to connect, between two reads of the stream, and for the whole request."""

    kind: Literal["timeouts"] = "timeouts"
    connect: float = Field(default=10.0, gt=0)
    read: float = Field(default=60.0, gt=0)
    total: float | None = Field(default=600.0, gt=0)


class RetryPolicy(Message):
    """Bounded exponential backoff with jitter for failures before the first delta.

    Attempt ``n`` (1-based) that failed waits ``min(max_delay, initial_delay * 2**(n-1))``,
    scaled by a random factor in ``[1 - jitter, 1]``; a ``Retry-After`` header wins when it
    is longer, capped at ``max_delay``.
    """

    kind: Literal["retry_policy"] = "retry_policy"
    max_attempts: int = Field(default=4, ge=1)
    initial_delay: float = Field(default=0.5, ge=0)
    max_delay: float = Field(default=8.0, ge=0)
    jitter: float = Field(default=0.2, ge=0, le=1)


class RateLimit(Message):
    """A provider's limit per API key: at most ``requests_per_minute`` requests, and
    ``tokens_per_minute`` tokens (as the provider reports them), in any ``window`` seconds
    (60: a minute; shorter only to test it). Either may be None (no limit), not both.

    Every host of one store shares it (the store's ``rate_limits`` row of the base URL and
    the key's fingerprint); without a store each host process keeps its own count."""

    kind: Literal["rate_limit"] = "rate_limit"
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    window: float = 60.0

    @field_validator("requests_per_minute", "tokens_per_minute", mode="before")
    @classmethod
    def _whole(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{info.field_name} must be an int >= 1 (None: no limit), not {value!r}")
        return value

    @field_validator("window", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ValueError(f"window must be a number of seconds > 0 (60: a minute), not {value!r}")
        return value

    @model_validator(mode="after")
    def _some_limit(self) -> RateLimit:
        if self.requests_per_minute is None and self.tokens_per_minute is None:
            raise ValueError("a RateLimit needs requests_per_minute, tokens_per_minute or both")
        return self


class ProviderConfig(Message):
    """Where and how to reach a model. Holds the *name* of the key's variable, never the key.

    ``input_price`` and ``output_price`` are the model's prices per million prompt and
    completion tokens (in the currency of ``TurnOptions.max_cost``); without them a turn's
    cost is not known and ``max_cost`` is refused. ``rate_limit``: the provider's limit for
    this key, held by every host of the store before each request (``RateLimit``)."""

    kind: Literal["provider_config"] = "provider_config"
    api: Literal["openai", "anthropic"] = "openai"
    base_url: str
    model: str
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    max_tokens: int | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    input_price: float | None = Field(default=None, ge=0)
    output_price: float | None = Field(default=None, ge=0)
    rate_limit: RateLimit | None = None

    @property
    def priced(self) -> bool:
        """Whether the model's prices are known (both of them)."""
        return self.input_price is not None and self.output_price is not None

    def cost(self, usage: Usage) -> float:
        """What ``usage`` costs at this model's prices (0 when they are not known)."""
        if not self.priced:
            return 0.0
        assert self.input_price is not None and self.output_price is not None
        return (usage.prompt_tokens * self.input_price + usage.completion_tokens * self.output_price) / 1e6

    @model_validator(mode="after")
    def _no_secret_headers(self) -> ProviderConfig:
        for name in self.headers:
            if name.lower() in {"authorization", "x-api-key", "api-key"}:
                raise ValueError(
                    f"header {name!r} carries a secret: name its environment variable in "
                    "api_key_env instead, so that it never travels in a message"
                )
        return self


class StreamChat(Message):
    """Ask the LLMActor to stream one completion. ``tools`` are provider-neutral specs;
    ``trace_context`` (W3C carrier of the turn's span) asks for a ``chat`` span."""

    kind: Literal["stream_chat"] = "stream_chat"
    stream_id: str
    provider: ProviderConfig
    messages: list[ChatMessage]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    trace_context: dict[str, str] | None = None


class LLMDeltas(Message):
    """Text that arrived since the previous batch (one batch per LLMActor wake-up)."""

    kind: Literal["llm_deltas"] = "llm_deltas"
    stream_id: str
    seq: int
    text: str


class LLMRetrying(Message):
    """The request failed before its first delta and will be tried again after ``delay``."""

    kind: Literal["llm_retrying"] = "llm_retrying"
    stream_id: str
    seq: int
    attempt: int
    delay: float
    reason: str


class LLMRateLimited(Message):
    """The request waits for its provider's rate limit (``reason``: ``requests_per_minute``,
    ``tokens_per_minute`` or ``retry_after``, a 429 some host of the store saw) for ``delay``
    seconds, until about ``until`` (seconds since the epoch), then asks again."""

    kind: Literal["llm_rate_limited"] = "llm_rate_limited"
    stream_id: str
    seq: int
    until: float
    delay: float
    reason: str


class LLMUsage(Message):
    """The provider reported usage before the stream's end (Anthropic's ``message_start``, a
    server that reports it with every chunk): the stream's usage so far, all of it."""

    kind: Literal["llm_usage"] = "llm_usage"
    stream_id: str
    seq: int
    usage: Usage


class LLMCompleted(Message):
    """The stream ended normally; ``message`` is the accumulated assistant message."""

    kind: Literal["llm_completed"] = "llm_completed"
    stream_id: str
    seq: int
    message: ChatMessage
    finish_reason: FinishReasonLLM
    usage: Usage | None = None


class LLMFailed(Message):
    """The stream ended in an error; ``partial_text`` is the text that had arrived."""

    kind: Literal["llm_failed"] = "llm_failed"
    stream_id: str
    seq: int
    error_type: str
    message: str
    partial_text: str = ""


class AbortStream(Message):
    """Abort a stream now: its connection is shut down, later deltas are dropped."""

    kind: Literal["abort_stream"] = "abort_stream"
    stream_id: str
    reason: str
