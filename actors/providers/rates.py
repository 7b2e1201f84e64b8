"""The rules of a provider's rate limit, pure: may a request go now, and if not, when to ask again.

A ``Window`` is what one (provider, key) has done in the last ``RateLimit.window`` seconds:
the time of each request it let go (then the time its answer began: ``sent``), the tokens each stream used (as the provider reported
them), and until when a ``Retry-After`` holds every request back. ``admit`` is a sliding
log, not a token bucket: a request goes only if fewer than ``requests_per_minute`` went in
the ``window`` seconds before it and the tokens used in them are under ``tokens_per_minute``,
so no window of that length, wherever it starts, ever holds more requests than the limit
(a bucket refilled at the same rate lets up to twice through, its burst and its refill).

The clock is given (``now``: the store's, so that every node reads one clock), the state is
plain data (``dumps``/``loads``: one short text), and nothing here does I/O: ``limiter``
holds it in a process or in the store.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from messages import RateLimit

__all__ = ["Window", "admit", "dumps", "key_of", "loads", "pause", "sent", "spend"]


@dataclass
class Window:
    """One (provider, key)'s requests and tokens of the last window, and its pause."""

    sent: list[float] = field(default_factory=list)  # when each request went, oldest first
    spent: list[tuple[float, int]] = field(default_factory=list)  # (when, tokens), oldest first
    paused_until: float = 0.0  # a Retry-After: nothing goes before it
    paused_by: str = ""  # why it is paused


def _prune(state: Window, limit: RateLimit, now: float) -> None:
    since = now - limit.window
    state.sent = [t for t in state.sent if t > since]
    state.spent = [(t, n) for t, n in state.spent if t > since]


def admit(limit: RateLimit, state: Window, now: float) -> tuple[float, str]:
    """Whether a request may go at ``now``: ``(0.0, "")`` and it is counted in ``state``; or
    ``(seconds, reason)``: ask again in that many seconds (``state`` only pruned). The
    reason is ``retry_after``, ``requests_per_minute`` or ``tokens_per_minute``."""
    _prune(state, limit, now)
    if state.paused_until > now:
        return state.paused_until - now, "retry_after"
    rpm, tpm = limit.requests_per_minute, limit.tokens_per_minute
    if rpm is not None and len(state.sent) >= rpm:
        # the request that leaves the window next makes room: the rpm-th newest
        return state.sent[-rpm] + limit.window - now, "requests_per_minute"
    if tpm is not None:
        used = sum(n for _, n in state.spent)
        if used >= tpm:
            for t, n in state.spent:  # oldest first: once enough has left, there is room
                used -= n
                if used < tpm:
                    return t + limit.window - now, "tokens_per_minute"
    state.sent.append(now)
    return 0.0, ""


def sent(limit: RateLimit, state: Window, now: float, counted_at: float) -> None:
    """The request counted at ``counted_at`` has reached the provider (its answer began) by
    ``now``: it counts from ``now`` on, so that the next one is let go a whole window after the
    provider saw it, however long it took to get there (a connection made, a busy host)."""
    _prune(state, limit, now)
    if counted_at in state.sent and now > counted_at:
        state.sent.remove(counted_at)
        state.sent.append(now)
        state.sent.sort()


def spend(limit: RateLimit, state: Window, now: float, tokens: int) -> None:
    """A stream that went used ``tokens``: they count against ``tokens_per_minute`` from ``now``."""
    _prune(state, limit, now)
    if tokens > 0 and limit.tokens_per_minute is not None:
        state.spent.append((now, tokens))


def pause(limit: RateLimit, state: Window, now: float, seconds: float, why: str = "retry_after") -> None:
    """The provider said to wait ``seconds`` (a 429's ``Retry-After``): nothing goes before then
    (a later pause than the one held wins, an earlier one changes nothing)."""
    _prune(state, limit, now)
    if now + seconds > state.paused_until:
        state.paused_until, state.paused_by = now + seconds, why


def dumps(state: Window) -> str:
    return json.dumps({"sent": state.sent, "spent": state.spent, "paused": [state.paused_until, state.paused_by]})


def loads(text: str | None) -> Window:
    """The state ``dumps`` wrote; an empty one for None (a row not written yet)."""
    if not text:
        return Window()
    data = json.loads(text)
    paused = data.get("paused", [0.0, ""])
    return Window(
        [float(t) for t in data.get("sent", [])],
        [(float(t), int(n)) for t, n in data.get("spent", [])],
        float(paused[0]),
        str(paused[1]),
    )


def key_of(base_url: str, api_key: str | None) -> str:
    """The name of a (provider, key)'s limit: the base URL and the key's fingerprint (16 hex
    digits of its SHA-256), never the key itself, which stays in the host's environment."""
    fingerprint = hashlib.sha256(api_key.encode()).hexdigest()[:16] if api_key else "no-key"
    return f"{base_url.rstrip('/')}#{fingerprint}"
