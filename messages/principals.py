"""Who sent a command: a principal, as a short printable name (``by``).

A principal names a person or a service (``"reviewer"``, ``"ada@example.com"``,
``"deploy-bot"``): 1 to ``MAX_PRINCIPAL`` characters, each printable (``str.isprintable``:
no control or format character, no line break, no separator but the ASCII space), with no
space at either end. It is compared exactly (case matters). It becomes events, snapshots
and the console's pages, so it is checked here, where a command or a tool is made: a bad
one is refused with a ``ValueError`` that says why, and nothing is sent.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

__all__ = ["MAX_PRINCIPAL", "Principal", "check_principal"]

MAX_PRINCIPAL = 64


def check_principal(value: str) -> str:
    """``value`` if it is a principal (see the module docstring); else ``ValueError``."""
    if not isinstance(value, str):
        raise ValueError(f"a principal is a string, not {type(value).__name__}")
    if not 1 <= len(value) <= MAX_PRINCIPAL:
        raise ValueError(f"a principal has 1 to {MAX_PRINCIPAL} characters, not {len(value)}")
    if not value.isprintable():
        raise ValueError(f"a principal has only printable characters: {value!r} does not")
    if value != value.strip():
        raise ValueError(f"a principal has no space at its ends: {value!r} does")
    return value


Principal = Annotated[str, AfterValidator(check_principal)]
"""A ``str`` field that holds a principal (checked by ``check_principal``)."""
