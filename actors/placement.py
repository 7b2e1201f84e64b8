"""Where a turn goes among hosts: rendezvous (highest random weight) hashing.

Every host gets a score for a turn, a hash of the pair; the turn goes to the host with the
highest. Any process that knows the same hosts computes the same answer, with no table and
no message; a host that leaves moves only its own turns (each to its next best host), and
one that joins takes about ``1/N`` of the new turns. Used for a new turn's host (the
Runtime, a directory) and for the host that takes over an orphaned turn (``host.durable``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["rendezvous"]


def rendezvous(key: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``key`` goes to (the highest score); None when there is none."""

    def score(candidate: str) -> bytes:
        return hashlib.blake2b(f"{candidate}|{key}".encode("utf-8", "surrogatepass"), digest_size=8).digest()

    return max(candidates, key=score, default=None)
