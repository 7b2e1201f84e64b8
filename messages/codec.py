"""msgpack encoding of every message class, and of turn snapshots.

``decode(encode(m)) == m`` for every message. The wire form is a msgpack map of the
model's JSON-mode fields, ``kind`` among them; ``decode`` finds the class by ``kind``.
A class whose fields are all strings, integers, booleans or None (``TextDelta``, say) is
encoded from its fields as they are, without ``model_dump``: the bytes are the same.
``join_encoded`` puts encoded messages in one msgpack array (their bytes as they are) and
``decode_many`` reads such an array back, validating each message as ``decode`` does;
``split_encoded`` reads it back as each message's fields and bytes, validating nothing (a
receiver that keeps the bytes and decodes them later, when they are asked for).
Bytes that are not msgpack, a payload that is not a map, an unknown ``kind`` or fields that
do not fit the class raise ``CodecError`` with a message that says which.

Snapshots (``encode_snapshot``) are a map ``{"v": SCHEMA_VERSION, "state": {...}}``; an
unknown version raises ``SnapshotVersionError`` before any field is read.
"""

from __future__ import annotations

import types
import typing
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
    "decode_many",
    "decode_snapshot",
    "encode",
    "encode_snapshot",
    "join_encoded",
    "message_classes",
    "split_encoded",
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

_PLAIN = (str, int, bool, type(None))


def _plain(annotation: Any) -> bool:
    """Whether a field so annotated dumps in JSON mode as the value it holds."""
    if annotation in _PLAIN:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return all(isinstance(a, _PLAIN) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return all(_plain(a) for a in typing.get_args(annotation))
    return False


def _flat_fields(cls: type[Message]) -> tuple[str, ...] | None:
    """The fields of ``cls`` in dump order, if ``model_dump(mode="json")`` is just their values."""
    decorators = cls.__pydantic_decorators__
    if decorators.field_serializers or decorators.model_serializers or decorators.computed_fields:
        return None
    fields = cls.model_fields
    for f in fields.values():
        if f.alias is not None or f.serialization_alias is not None or not _plain(f.annotation):
            return None
    return tuple(fields)


_FLAT: dict[type[Message], tuple[str, ...]] = {
    cls: names for cls in _BY_KIND.values() if (names := _flat_fields(cls)) is not None
}


def message_classes() -> dict[str, type[Message]]:
    """Every message class by its ``kind``."""
    return dict(_BY_KIND)


def encode(message: Message) -> bytes:
    """The msgpack bytes of ``message``; ``CodecError`` if it holds something that is not
    plain data (an object, a string that is not valid Unicode, nesting past msgpack's limit)."""
    if _BY_KIND.get(getattr(message, "kind", "")) is not type(message):
        raise CodecError(f"{type(message).__name__} is not a greenroom message class")
    try:
        names = _FLAT.get(type(message))
        if names is not None:
            fields = message.__dict__
            data: bytes = msgpack.packb({name: fields[name] for name in names}, use_bin_type=True)
        else:
            data = msgpack.packb(message.model_dump(mode="json"), use_bin_type=True)
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
    return _message(_unpack(data, "message payload"))


def join_encoded(payloads: list[bytes]) -> bytes:
    """One msgpack array of the messages encoded in ``payloads``, their bytes as they are."""
    n = len(payloads)
    if n < 16:
        head = bytes([0x90 | n])
    else:
        head = b"\xdc" + n.to_bytes(2, "big") if n < 65536 else b"\xdd" + n.to_bytes(4, "big")
    return head + b"".join(payloads)


def decode_many(data: bytes) -> list[Message]:
    """The messages of a ``join_encoded`` array; ``CodecError`` when any is not one."""
    payloads = _unpack(data, "message array")
    if not isinstance(payloads, list):
        raise CodecError(f"malformed message array: expected an array, got {type(payloads).__name__}")
    return [_message(p) for p in payloads]


def split_encoded(data: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """The messages of a ``join_encoded`` array, each as its fields (unpacked, not validated)
    and its own bytes (``decode`` takes them); ``CodecError`` when it is not such an array."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True)
    unpacker.feed(data)
    out: list[tuple[dict[str, Any], bytes]] = []
    try:
        count = unpacker.read_array_header()
        start = unpacker.tell()
        for _ in range(count):
            fields = unpacker.unpack()
            end = unpacker.tell()
            if not isinstance(fields, dict):
                raise CodecError(f"malformed message payload: expected a map, got {type(fields).__name__}")
            out.append((fields, data[start:end]))
            start = end
    except (ValueError, TypeError, msgpack.UnpackException) as exc:  # CodecError is a ValueError: raised as it is
        if isinstance(exc, CodecError):
            raise
        raise CodecError(f"malformed message array: {type(exc).__name__}" + (f": {exc}" if str(exc) else "")) from None
    return out


def _message(payload: Any) -> Message:
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
