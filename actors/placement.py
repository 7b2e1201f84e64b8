"""Where a turn goes among hosts: rendezvous (highest random weight) hashing.

Every host gets a score for a turn, a hash of the pair; the turn goes to the host with the
highest. Any process that knows the same hosts computes the same answer, with no table and
no message; a host that leaves moves only its own turns (each to its next best host), and
one that joins takes about ``1/N`` of the new turns. Used for a new turn's host (the
Runtime, a directory) and for the host that takes over an orphaned turn (``host.durable``).

What a turn requires of its host (``StartTurn.requires``) is kept as one canonical text
(``requirement``), in the turn's snapshot and its store row, and checked against a host's
capabilities (``satisfies``) wherever the turn goes: placed, or taken over.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["rendezvous", "requirement", "satisfies"]


def rendezvous(key: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``key`` goes to (the highest score); None when there is none."""

    def score(candidate: str) -> bytes:
        return hashlib.blake2b(f"{candidate}|{key}".encode("utf-8", "surrogatepass"), digest_size=8).digest()

    return max(candidates, key=score, default=None)


def requirement(requires: Mapping[str, Any]) -> str:
    """The canonical text of a requirement (or of a host's capabilities), as the store keeps
    it: JSON with sorted keys; ``""`` for none. ``ValueError`` if a value is not JSON."""
    if not requires:
        return ""
    try:
        return json.dumps(dict(requires), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"requires must map names to JSON values (strings, numbers, booleans, null, lists): {exc}"
        ) from None


def satisfies(capabilities: Mapping[str, Any], required: str) -> bool:
    """Whether a host with ``capabilities`` may run a turn whose requirement is ``required``
    (``requirement``'s text): it has every name with the same value."""
    wanted: dict[str, Any] = json.loads(required) if required else {}
    return all(k in capabilities and capabilities[k] == v for k, v in wanted.items())
