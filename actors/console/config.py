"""Where a Runtime's console listens (``Runtime(console=ConsoleConfig(...))``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ConsoleConfig"]


@dataclass(frozen=True)
class ConsoleConfig:
    """Where a Runtime's console listens: ``host`` (``127.0.0.1``), ``port`` (8765; 0 takes
    a free one); ``key`` (at least 16 characters) replaces the anonymous token drawn at
    start; ``users`` (name to token, each at least 16 characters and its own) are the named
    users, whose commands carry their name (``by``; with users and no key, no anonymous
    token is drawn); ``trust_proxy``: behind a TLS reverse proxy, whose forwarded scheme
    and host are the console's (``security``); ``quiet`` does not print the address."""

    host: str = "127.0.0.1"
    port: int = 8765
    key: str | None = None
    quiet: bool = False
    users: Mapping[str, str] | None = None
    trust_proxy: bool = False
