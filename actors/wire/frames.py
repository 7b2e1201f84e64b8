"""Frames on the wire: parsed within bounds, authenticated, bound to their target, never
accepted twice, optionally encrypted.

Thespian frames a message as ``<length>>`` followed by the serialized envelope, over TCP,
and answers each with a fixed ACK. greenroom replaces the serialization (``FrameCodec``) and
the length parser (``BoundedReceiveBuffer``):

    GRv2 | flags (1) | key id (8) | sender (16) | counter (8) | time ms (8)
         | target port (2) | target host length (1) | target host | body, then the tag

- the body is the pickled envelope, protected by HMAC-SHA256 over the header and body, or
  encrypted with AES-GCM (the header as associated data) when ``encrypt`` is on; keys come
  from the deployment key through HKDF, one encryption key per sender, whose nonce is its
  counter (never reused);
- a frame is accepted only by a process listening on its target port and host, within
  ``FRESHNESS`` seconds of its time, and once: each sender (a random id per process) numbers
  its frames, and a receiver keeps, per sender, the highest number and a window of the
  ones below it it has seen, as IPsec does;
- a frame already accepted (its number is in the window) is opened as ``DUPLICATE``: the
  transport acknowledges it again and delivers nothing. Thespian resends the same sealed
  bytes when an ACK is lost, so the resend succeeds and the message is delivered once; a
  replay by anyone else is dropped the same way, having done nothing;
- nothing is unpickled before all of that holds; anything else raises ``FrameRejected``
  (the connection is then closed, and the reason logged once per peer and reason).

The length prefix is read as at most 12 ASCII digits, and a size over ``max_frame`` or a
prefix that is not digits fails the frame before any buffer is sized from it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import struct
import threading
import time
from typing import Any, Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..logs import logger

__all__ = [
    "DUPLICATE",
    "FRESHNESS",
    "BoundedReceiveBuffer",
    "FrameCodec",
    "FrameRejected",
    "add_endpoint",
    "is_duplicate",
    "log_rejection",
]

MAGIC = b"GRv2"
FRESHNESS = 300.0  # seconds a frame stays acceptable; also how long a sender's window is kept
WINDOW = 4096  # frames a sender may deliver out of order
_FLAG_ENCRYPTED = 1
_HEAD = struct.Struct("!4sB8s16sQQHB")  # magic, flags, key id, sender, counter, ms, port, host length


log = logger("greenroom.transport")


class FrameRejected(ValueError):
    """A frame that is malformed, forged, stale, misdirected or replayed."""


_logged: dict[tuple[str, str], float] = {}


def log_rejection(peer: str, reason: str) -> None:
    """Log a refused frame once per peer and reason per minute (an attacker cannot flood the log)."""
    key = (peer, reason.split(":")[0])
    now = time.monotonic()
    if now - _logged.get(key, -1e9) > 60:
        _logged[key] = now
        log().warning("refused a frame from %s: %s", peer, reason)


# -- who we are --------------------------------------------------------------------------

_endpoints: set[tuple[str, int]] = set()  # (host, port) this process listens on
_sender = os.urandom(16)
_counter = 0
_counter_lock = threading.Lock()


def add_endpoint(host: str, port: int) -> None:
    """This process listens on ``host:port``: frames for it are accepted here."""
    _endpoints.add((host, port))


def _forked() -> None:
    global _sender, _counter
    _sender, _counter = os.urandom(16), 0
    _endpoints.clear()
    _windows.clear()


os.register_at_fork(after_in_child=_forked)


def _next_counter() -> int:
    global _counter
    with _counter_lock:
        _counter += 1
        return _counter


# -- replay windows ----------------------------------------------------------------------


class _Window:
    __slots__ = ("last", "seen", "top")

    def __init__(self) -> None:
        self.top = 0
        self.seen = 0  # bit i: frame top - i was accepted
        self.last = 0.0

    def accept(self, n: int) -> Receipt:
        if n > self.top:
            shift = n - self.top
            self.seen = ((self.seen << shift) | 1) & ((1 << WINDOW) - 1) if shift < WINDOW else 1
            self.top = n
            return "new"
        offset = self.top - n
        if offset >= WINDOW:
            return "outside"
        if self.seen >> offset & 1:
            return "again"
        self.seen |= 1 << offset
        return "new"


_windows: dict[bytes, _Window] = {}
_windows_lock = threading.Lock()


Receipt = Literal["new", "again", "outside"]  # first time; already accepted; too old to tell


class _Duplicate:
    """What a frame already accepted opens as: acknowledged again, delivered to nobody."""

    def __repr__(self) -> str:
        return "DUPLICATE"


DUPLICATE: Any = (None, _Duplicate())  # in the shape of an opened frame: (sender's address, message)


def is_duplicate(message: Any) -> bool:
    return message is DUPLICATE[1]


def _receipt(sender: bytes, counter: int) -> Receipt:
    now = time.monotonic()
    with _windows_lock:
        window = _windows.get(sender)
        if window is None:
            if len(_windows) > 10_000:  # forget senders silent for longer than a frame stays fresh
                for k in [k for k, w in _windows.items() if now - w.last > FRESHNESS]:
                    del _windows[k]
            window = _windows[sender] = _Window()
        window.last = now
        return window.accept(counter)


# -- the codec ---------------------------------------------------------------------------


def _hkdf(key: bytes, info: bytes, length: int = 32) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=b"greenroom transport", info=info).derive(key)


class FrameCodec:
    """Seals and opens frames with one deployment key; see the module docstring."""

    def __init__(self, key: bytes, encrypt: bool) -> None:
        if len(key) < 16:
            raise ValueError("the transport key must be at least 16 bytes")
        self.encrypt = encrypt
        self.key_id = _hkdf(key, b"key id", 8)
        self._mac_key = _hkdf(key, b"frame mac")
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
        """The frame of ``obj`` for the endpoint ``host:port``."""
        body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        counter = _next_counter()
        target = host.encode()
        flags = _FLAG_ENCRYPTED if self.encrypt else 0
        head = _HEAD.pack(MAGIC, flags, self.key_id, _sender, counter, int(time.time() * 1000), port, len(target))
        head += target
        if self.encrypt:
            return head + self._cipher(_sender).encrypt(counter.to_bytes(12, "big"), body, head)
        return head + body + hmac.new(self._mac_key, head + body, hashlib.sha256).digest()

    def open(self, data: bytes) -> Any:
        """The object in a frame, once every check has passed; ``FrameRejected`` says which failed."""
        if len(data) < _HEAD.size:
            raise FrameRejected("too short to be a frame")
        magic, flags, key_id, sender, counter, ms, port, host_len = _HEAD.unpack_from(data)
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
        if (host, port) not in _endpoints:
            raise FrameRejected(f"meant for {host}:{port}, not for this process")
        if abs(time.time() - ms / 1000) > FRESHNESS:
            raise FrameRejected("stale")
        receipt = _receipt(sender, counter)
        if receipt == "again":
            return DUPLICATE
        if receipt == "outside":
            raise FrameRejected("replayed, or too old to tell")
        return pickle.loads(body)


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
        if self._opened is None:
            self._opened = (self._deserialize(bytes(self._buf)),)
        return self._opened[0], self._extra
