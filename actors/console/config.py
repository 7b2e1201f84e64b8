"""Where a Runtime's console listens (``Runtime(console=ConsoleConfig(...))``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConsoleConfig"]


@dataclass(frozen=True)
class ConsoleConfig:
    """Where a Runtime's console listens: ``host`` (``127.0.0.1``), ``port`` (8765; 0 takes
    a free one); ``key`` (at least 16 characters) replaces the token drawn at start;
    ``quiet`` does not print the address."""

    host: str = "127.0.0.1"
    port: int = 8765
    key: str | None = None
    quiet: bool = False
