"""Frames on the wire: parsed within bounds, authenticated, bound to their target and to its
incarnation, never accepted twice, optionally encrypted.

Thespian frames a message as ``<length>>`` followed by the serialized envelope, over TCP,
and answers each with a fixed ACK. greenroom replaces the serialization (``FrameCodec``) and
the length parser (``BoundedReceiveBuffer``):

    GRv3 | flags (1) | key id (8) | sender (16) | receiver (16) | counter (8) | time ms (8)
         | target port (2) | target host length (1) | target host | body, then the tag

- the body is the pickled envelope, protected by HMAC-SHA256 over the header and body, or
  encrypted with AES-GCM (the header as associated data) when ``encrypt`` is on; keys come
  from the deployment key through HKDF, one encryption key per sender, whose nonce is its
  counter (never reused: a frame sealed again gets a new counter);
- *sender* is the incarnation of the process that sealed it, *receiver* the incarnation the
  sender knows listens on the target (``incarnation``: a random id per process);
- a frame is accepted only by a process listening on its target port and host, within
  ``FRESHNESS`` seconds of its time, whose incarnation is its *receiver*, and once: each
  sender numbers its frames, and a receiver keeps, per sender, the highest number and a
  window of the ones below it it has seen, as IPsec does;
- a frame for the right endpoint but another incarnation (its sender did not know this
  one, or it was recorded from an earlier process on the same address and port) is refused
  with a notice (a frame of its own, ``NOTICE_MAGIC``) naming this incarnation, signed with the deployment key and bound
  to the refused frame's sender and counter; the sender that gets it, in answer to its
  frame, learns where to send (``FrameCodec.heed``) and seals its message again
  (``transport``); anyone else who replayed the frame gets nothing they can use;
- a frame already accepted (its number is in the window) is opened as ``DUPLICATE``: the
  transport acknowledges it again and delivers nothing. Thespian resends the same sealed
  bytes when an ACK is lost, so the resend succeeds and the message is delivered once; a
  replay by anyone else is dropped the same way, having done nothing;
- nothing is unpickled before all of that holds; anything else raises ``FrameRejected``
  (the connection is then closed, and the reason logged once per peer and reason).

Thespian's two ACK frames are fixed bytes, compared, never unpickled, and not signed: they
carry nothing but "delivered" or "refused" for the frame just sent on that connection.

The length prefix is read as at most 12 ASCII digits, and a size over ``max_frame`` or a
prefix that is not digits fails the frame before any buffer is sized from it.
"""

from __future__ import annotations

import hashlib
import hmac
import pickle
import struct
import time
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..logs import logger
from .incarnation import CURRENT, FRESHNESS, UNKNOWN, Incarnation

__all__ = [
    "DUPLICATE",
    "FRESHNESS",
    "BoundedReceiveBuffer",
    "ForAnother",
    "FrameCodec",
    "FrameRejected",
    "Notice",
    "add_endpoint",
    "is_marker",
    "log_rejection",
]

MAGIC = b"GRv3"
NOTICE_MAGIC = b"GRn1"
_FLAG_ENCRYPTED = 1
# magic, flags, key id, sender, receiver, counter, ms, port, host length
_HEAD = struct.Struct("!4sB8s16s16sQQHB")
# magic, key id, the refused frame's sender and counter, the incarnation here, ms, port, host length
_NOTICE = struct.Struct("!4s8s16sQ16sQHB")


log = logger("greenroom.transport")


class FrameRejected(ValueError):
    """A frame that is malformed, forged, stale, misdirected or replayed."""


class ForAnother(FrameRejected):
    """A frame for this endpoint sealed for another incarnation of it; ``notice`` is the
    framed answer that tells its sender which one listens here."""

    def __init__(self, reason: str, notice: bytes) -> None:
        super().__init__(reason)
        self.notice = notice


_logged: dict[tuple[str, str], float] = {}


def log_rejection(peer: str, reason: str) -> None:
    """Log a refused frame once per peer and reason per minute (an attacker cannot flood the log)."""
    key = (peer, reason.split(":")[0])
    now = time.monotonic()
    if now - _logged.get(key, -1e9) > 60:
        _logged[key] = now
        log().warning("refused a frame from %s: %s", peer, reason)


def add_endpoint(host: str, port: int) -> None:
    """This process listens on ``host:port``: frames for it are accepted here."""
    CURRENT.listen(host, port)


class _Marker:
    """What a frame opens as when it delivers nothing: acknowledged, given to nobody."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class Notice(_Marker):
    """A notice, opened: ``incarnation`` listens on ``host:port``. Only the sender waiting
    for the answer to its frame to that endpoint learns from it (``FrameCodec.heed``);
    anywhere else it is acknowledged and dropped, having taught nothing."""

    def __init__(self, host: str, port: int, incarnation: bytes) -> None:
        super().__init__("NOTICE")
        self.host, self.port, self.incarnation = host, port, incarnation


DUPLICATE: Any = (None, _Marker("DUPLICATE"))  # a frame already accepted, as (sender's address, message)


def is_marker(message: Any) -> bool:
    return isinstance(message, _Marker)


# -- the codec ---------------------------------------------------------------------------


def _hkdf(key: bytes, info: bytes, length: int = 32) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=b"greenroom transport", info=info).derive(key)


class FrameCodec:
    """Seals and opens frames with one deployment key, as ``incarnation`` (this process's,
    unless a test plays another); see the module docstring."""

    def __init__(self, key: bytes, encrypt: bool, incarnation: Incarnation = CURRENT) -> None:
        if len(key) < 16:
            raise ValueError("the transport key must be at least 16 bytes")
        self.encrypt = encrypt
        self.incarnation = incarnation
        self.key_id = _hkdf(key, b"key id", 8)
        self._mac_key = _hkdf(key, b"frame mac")
        self._notice_key = _hkdf(key, b"notice mac")
        self._enc_root = _hkdf(key, b"frame encryption")
        self._ciphers: dict[bytes, AESGCM] = {}

    def _cipher(self, sender: bytes) -> AESGCM:
        cipher = self._ciphers.get(sender)
        if cipher is None:
            if len(self._ciphers) > 10_000:
                self._ciphers.clear()
            cipher = self._ciphers[sender] = AESGCM(_hkdf(self._enc_root, b"sender " + sender))
        return cipher

    def seal(self, obj: Any, host: str, port: int) -> bytes:
        """The frame of ``obj`` for the endpoint ``host:port``, for the incarnation this
        process knows listens there (``UNKNOWN`` if none: it will be told)."""
        body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        me = self.incarnation
        counter = me.next_counter()
        target = host.encode()
        flags = _FLAG_ENCRYPTED if self.encrypt else 0
        head = _HEAD.pack(
            MAGIC, flags, self.key_id, me.me, me.of(host, port), counter, int(time.time() * 1000), port, len(target)
        )
        head += target
        if self.encrypt:
            return head + self._cipher(me.me).encrypt(counter.to_bytes(12, "big"), body, head)
        return head + body + hmac.new(self._mac_key, head + body, hashlib.sha256).digest()

    def open(self, data: bytes) -> Any:
        """The object in a frame, once every check has passed; ``FrameRejected`` says which
        failed (``ForAnother`` carries the notice to answer with). A notice for this process
        opens as ``(None, Notice)``."""
        if data[:4] == NOTICE_MAGIC:
            return self._open_notice(data)
        if len(data) < _HEAD.size:
            raise FrameRejected("too short to be a frame")
        magic, flags, key_id, sender, receiver, counter, ms, port, host_len = _HEAD.unpack_from(data)
        if magic != MAGIC:
            raise FrameRejected("not a greenroom frame")
        if key_id != self.key_id:
            raise FrameRejected("made with another key")
        if bool(flags & _FLAG_ENCRYPTED) != self.encrypt:
            raise FrameRejected("encrypted" if flags & _FLAG_ENCRYPTED else "not encrypted, and this node requires it")
        start = _HEAD.size + host_len
        if len(data) < start + 16:
            raise FrameRejected("truncated")
        head, rest = data[:start], data[start:]
        if self.encrypt:
            try:
                body = self._cipher(sender).decrypt(counter.to_bytes(12, "big"), rest, head)
            except InvalidTag:
                raise FrameRejected("bad tag") from None
        else:
            body, mac = rest[:-32], rest[-32:]
            if len(rest) < 32 or not hmac.compare_digest(
                mac, hmac.new(self._mac_key, head + body, hashlib.sha256).digest()
            ):
                raise FrameRejected("bad signature")
        host = data[_HEAD.size : start].decode("ascii", "replace")
        me = self.incarnation
        if (host, port) not in me.endpoints:
            raise FrameRejected(f"meant for {host}:{port}, not for this process")
        if abs(time.time() - ms / 1000) > FRESHNESS:
            raise FrameRejected("stale")
        if receiver != me.me:
            why = "an unknown" if receiver == UNKNOWN else "another"
            notice = self._notice(sender, counter, host, port)
            raise ForAnother(f"sealed for {why} incarnation of {host}:{port}", notice)
        receipt = me.receipt(sender, counter)
        if receipt == "again":
            return DUPLICATE
        if receipt == "outside":
            raise FrameRejected("replayed, or too old to tell")
        return pickle.loads(body)

    # -- notices ---------------------------------------------------------------------------

    def _notice(self, to: bytes, counter: int, host: str, port: int) -> bytes:
        """The framed notice to the sender of frame ``counter`` of ``to``: this incarnation
        listens on ``host:port``."""
        target = host.encode()
        ms = int(time.time() * 1000)
        head = _NOTICE.pack(NOTICE_MAGIC, self.key_id, to, counter, self.incarnation.me, ms, port, len(target))
        body = head + target
        body += hmac.new(self._notice_key, body, hashlib.sha256).digest()
        return b"%d>" % len(body) + body

    def _open_notice(self, data: bytes) -> Any:
        if len(data) < _NOTICE.size + 32:
            raise FrameRejected("a truncated notice")
        _, key_id, to, _, incarnation, ms, port, host_len = _NOTICE.unpack_from(data)
        end = _NOTICE.size + host_len
        if key_id != self.key_id:
            raise FrameRejected("a notice made with another key")
        if len(data) != end + 32 or not hmac.compare_digest(
            data[end:], hmac.new(self._notice_key, data[:end], hashlib.sha256).digest()
        ):
            raise FrameRejected("a notice with a bad signature")
        if to != self.incarnation.me:
            raise FrameRejected("a notice for another process")
        if abs(time.time() - ms / 1000) > FRESHNESS:
            raise FrameRejected("a stale notice")
        return None, Notice(data[_NOTICE.size : end].decode("ascii", "replace"), port, incarnation)

    def heed(self, notice: Notice) -> None:
        """Send to the incarnation ``notice`` names from now on (see ``Notice``)."""
        self.incarnation.told(notice.host, notice.port, notice.incarnation)


class BoundedReceiveBuffer:
    """Thespian's ``<length>>body`` framing, read within bounds (a drop-in for its
    ``ReceiveBuffer``): the length is at most 12 digits and at most ``max_frame``."""

    max_frame = 64 * 1024 * 1024

    def __init__(self, deserialize: Any) -> None:
        self._deserialize = deserialize
        self._head = b""
        self._size: int | None = None
        self._buf = bytearray()
        self._extra = b""
        self._opened: tuple[Any] | None = None  # Thespian may ask for the same frame twice
        self._failed: Exception | None = None  # and is refused the same way each time

    def addMore(self, data: bytes | str) -> None:
        if not data:
            return  # Thespian feeds an empty str after a frame that crossed its own transmit
        if isinstance(data, str):
            data = data.encode("latin-1")
        if self._size is None:
            self._head += data
            mark = self._head.find(b">")
            if mark < 0:
                if len(self._head) > 12 or not self._head.isdigit():
                    raise FrameRejected("no length prefix")
                return
            digits, data = self._head[:mark], self._head[mark + 1 :]
            if not digits.isdigit() or len(digits) > 12:
                raise FrameRejected("malformed length prefix")
            size = int(digits)
            if size > self.max_frame:
                raise FrameRejected(f"frame of {size} bytes over the limit of {self.max_frame}")
            self._size = size
        want = self._size - len(self._buf)
        self._buf += data[:want]
        self._extra += data[want:]

    def is_empty(self) -> bool:
        return not self._head

    def remainingAmount(self) -> int:
        if self._size is None:
            return max(1, 13 - len(self._head))
        return max(1, self._size - len(self._buf))

    def isDone(self) -> bool:
        return self._size is not None and len(self._buf) == self._size

    def removeExtra(self) -> None:
        self._extra = b""

    def completed(self) -> tuple[Any, bytes] | None:
        if not self.isDone():
            return None
        if self._failed is not None:
            raise self._failed
        if self._opened is None:
            try:
                self._opened = (self._deserialize(bytes(self._buf)),)
            except Exception as exc:
                self._failed = exc
                raise
        return self._opened[0], self._extra
