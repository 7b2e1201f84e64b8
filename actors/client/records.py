"""The events a caller's stream holds, as compact records decoded when a reader asks.

A turn's events reach the owner as msgpack bytes (``EventBatch``: each event's bytes as the
host encoded them). A ``TurnStream`` keeps each event as those bytes, one ``bytes`` object
(about 130 bytes beyond its text for a ``TextDelta``, against about 1.4 KB for the model),
and decodes it to its model, validated, each time a reader asks for it: the events a reader
gets are the same models, in the same order, as if they had been decoded on arrival.

- ``batch_records`` reads a batch without validating it: each event's ``turn_id``, ``seq``
  and ``kind`` (to route and order it) and its bytes. A ``Finish`` (its history is joined
  as it arrives), an event about the reader (``seq`` < 0) and anything that does not look
  like an event are decoded at once, as before (``CodecError`` for what is not an event);
  a start's answer that travels in the batch ahead of its turn's first events
  (``host.answers``) is decoded and handed back apart;
- the events made in this process (``host_lost``, ``event_lost``) are kept as models;
- a record that does not decode when read (it cannot happen: every event was encoded from
  its model) is read as an ``Error(event_lost)`` with its ``seq``, never raised at a reader.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast, overload

from messages import ControlReply, Error, TurnEvent, decode
from messages.codec import CodecError, message_classes, split_encoded

from ..logs import logger
from ..wire.protocol import EventBatch

__all__ = ["EVENT_KINDS", "NOTABLE", "EventRecords", "Record", "batch_records"]

Record = bytes | TurnEvent  # an event as its bytes, or as its model
EVENT_KINDS = frozenset(k for k, cls in message_classes().items() if issubclass(cls, TurnEvent))
NOTABLE = frozenset({"tool_finished", "tool_approval_request", "error"})  # what a stream looks back for

log = logger("greenroom.runtime")


def batch_records(batch: EventBatch) -> tuple[list[tuple[str, int, str, Record]], list[ControlReply]]:
    """``(turn_id, seq, kind, record)`` for each event of ``batch``, in its order, and the
    start answers it carried ahead of them (only a batch to a node's Runtime has any)."""
    out: list[tuple[str, int, str, Record]] = []
    replies: list[ControlReply] = []
    for fields, raw in split_encoded(batch.blob):
        if fields.get("kind") == "control_reply":
            replies.append(cast(ControlReply, decode(raw)))  # decoded by its kind, validated
            continue
        turn_id, seq, kind = fields.get("turn_id"), fields.get("seq"), fields.get("kind")
        if (
            kind == "finish"
            or kind not in EVENT_KINDS
            or not isinstance(turn_id, str)
            or not isinstance(seq, int)
            or isinstance(seq, bool)
            or seq < 0
        ):
            event = decode(raw)
            if not isinstance(event, TurnEvent):
                raise CodecError(f"a {event.kind!r} message in an event batch")
            out.append((event.turn_id, event.seq, event.kind, event))
        else:
            out.append((turn_id, seq, kind, raw))
    return out, replies


class EventRecords(Sequence[TurnEvent]):
    """One stream's events in order, from ``seq`` ``base``; indexing decodes. Not thread-safe
    (the stream's lock guards it)."""

    __slots__ = ("_notable", "_records", "base", "turn_id")

    def __init__(self, turn_id: str, base: int) -> None:
        self.turn_id, self.base = turn_id, base
        self._records: list[Record] = []
        self._notable: dict[str, list[int]] = {}  # kind -> the positions of its events (NOTABLE only)

    def append(self, record: Record, kind: str) -> None:
        if kind in NOTABLE:
            self._notable.setdefault(kind, []).append(len(self._records))
        self._records.append(record)

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> TurnEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[TurnEvent]: ...

    def __getitem__(self, index: int | slice) -> TurnEvent | list[TurnEvent]:
        if isinstance(index, slice):
            return [self._decode(i) for i in range(*index.indices(len(self._records)))]
        if index < 0:
            index += len(self._records)
        if not 0 <= index < len(self._records):
            raise IndexError("event index out of range")
        return self._decode(index)

    def __iter__(self) -> Iterator[TurnEvent]:
        for i in range(len(self._records)):
            yield self._decode(i)

    def is_model(self, index: int) -> bool:
        """Whether the record at ``index`` is kept as its model (a ``Finish``, say)."""
        return not isinstance(self._records[index], bytes)

    def of_kind(self, kind: str, end: int | None = None) -> list[TurnEvent]:
        """The events of ``kind`` (one of ``NOTABLE``) before position ``end``, in order."""
        stop = len(self._records) if end is None else end
        return [self._decode(i) for i in self._notable.get(kind, []) if i < stop]

    def _decode(self, index: int) -> TurnEvent:
        record = self._records[index]
        if not isinstance(record, bytes):
            return record
        try:
            event = decode(record)
            if isinstance(event, TurnEvent):
                return event
            why = f"a {event.kind!r} message is not an event"
        except CodecError as exc:
            why = str(exc)
        seq = self.base + index
        log().error("turn %s: event %d cannot be decoded: %s", self.turn_id, seq, why)
        return Error(turn_id=self.turn_id, seq=seq, error_type="event_lost", message=f"event {seq} cannot be decoded")
