"""msgpack encoding of every message class, and of turn snapshots.

``decode(encode(m)) == m`` for every message. The wire form is a msgpack map of the
model's JSON-mode fields, ``kind`` among them; ``decode`` finds the class by ``kind``.
Bytes that are not msgpack, a payload that is not a map, an unknown ``kind`` or fields that
do not fit the class raise ``CodecError`` with a message that says which.

Snapshots (``encode_snapshot``) are a map ``{"v": SCHEMA_VERSION, "state": {...}}``; an
unknown version raises ``SnapshotVersionError`` before any field is read.
"""

from __future__ import annotations

from typing import Any

import msgpack
from pydantic import ValidationError

from . import chat, cluster, control, events, llm, tool
from .base import Message
from .state import READABLE_VERSIONS, TurnState

__all__ = [
    "CodecError",
    "SnapshotVersionError",
    "decode",
    "decode_snapshot",
    "encode",
    "encode_snapshot",
    "message_classes",
]


class CodecError(ValueError):
    """Bytes that do not decode to a known message or snapshot."""


class SnapshotVersionError(CodecError):
    """A snapshot written with a schema version this code does not know."""


def _collect() -> dict[str, type[Message]]:
    found: dict[str, type[Message]] = {}
    for module in (chat, llm, tool, control, events, cluster):
        for name in module.__all__:
            cls = getattr(module, name)
            if isinstance(cls, type) and issubclass(cls, Message) and "kind" in cls.model_fields:
                kind = cls.model_fields["kind"].default
                if not isinstance(kind, str):
                    continue  # a base class (Message, TurnEvent) has no kind of its own
                if kind in found and found[kind] is not cls:
                    raise RuntimeError(f"two message classes share kind {kind!r}")
                found[kind] = cls
    return found


_BY_KIND: dict[str, type[Message]] = _collect()


def message_classes() -> dict[str, type[Message]]:
    """Every message class by its ``kind``."""
    return dict(_BY_KIND)


def encode(message: Message) -> bytes:
    """The msgpack bytes of ``message``; ``CodecError`` if it holds something that is not
    plain data (an object, a string that is not valid Unicode, nesting past msgpack's limit)."""
    if _BY_KIND.get(getattr(message, "kind", "")) is not type(message):
        raise CodecError(f"{type(message).__name__} is not a greenroom message class")
    try:
        data: bytes = msgpack.packb(message.model_dump(mode="json"), use_bin_type=True)
        return data
    except Exception as exc:  # pydantic and msgpack raise several unrelated types
        raise CodecError(f"cannot encode a {message.kind!r} message: {type(exc).__name__}: {exc}") from None


def _unpack(data: bytes, what: str) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(f"{what} must be bytes, not {type(data).__name__}")
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types, some without a message
        raise CodecError(f"malformed {what}: {type(exc).__name__}" + (f": {exc}" if str(exc) else "")) from None


def decode(data: bytes) -> Message:
    """The message encoded in ``data``; ``CodecError`` when it is not one."""
    payload = _unpack(data, "message payload")
    if not isinstance(payload, dict):
        raise CodecError(f"malformed message payload: expected a map, got {type(payload).__name__}")
    kind = payload.get("kind")
    if not isinstance(kind, str):
        raise CodecError("malformed message payload: no 'kind' field")
    cls = _BY_KIND.get(kind)
    if cls is None:
        raise CodecError(f"unknown message kind {kind!r}")
    try:
        return cls.model_validate(payload)
    except ValidationError as exc:
        raise CodecError(f"malformed {kind!r} message: {exc}") from None


def encode_snapshot(state: TurnState) -> bytes:
    """The msgpack bytes of a turn snapshot, tagged with its schema version."""
    data: bytes = msgpack.packb({"v": state.schema_version, "state": state.model_dump(mode="json")}, use_bin_type=True)
    return data


def decode_snapshot(data: bytes) -> TurnState:
    """The snapshot in ``data``; ``SnapshotVersionError`` for an unknown version."""
    payload = _unpack(data, "snapshot")
    if not isinstance(payload, dict) or "v" not in payload or "state" not in payload:
        raise CodecError("malformed snapshot: expected a map with 'v' and 'state'")
    if payload["v"] not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS[:-1])) + f" and {READABLE_VERSIONS[-1]}"
        raise SnapshotVersionError(
            f"snapshot schema version {payload['v']!r} is not supported (this code reads {readable})"
        )
    try:
        return TurnState.model_validate(payload["state"])
    except ValidationError as exc:
        raise CodecError(f"malformed snapshot: {exc}") from None
