"""Hardening of Thespian's TCP transport: bind where configured, authenticate every frame.

Thespian's ``TCPTransport`` unpickles whatever reaches any of its ports and binds every
listening socket on all interfaces. ``install()`` changes both, in this process and in every
admin and actor forked from it (so it must run before the ActorSystem starts):

- every listening socket binds to ``bind_host`` (``127.0.0.1`` for an embedded runtime),
  and the system advertises that address (``THESPIAN_BASE_IPADDR``);
- every frame is ``MAGIC + HMAC-SHA256(key, pickle) + pickle`` and a frame whose MAC does
  not verify is rejected *before* ``pickle.loads`` runs. Thespian's two fixed
  acknowledgement frames are the only unsigned input accepted, compared byte for byte.

This is authentication, not confidentiality: frames travel in clear, and a recorded frame
could be replayed. Across machines, run nodes on a private network.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import secrets
import threading
from pathlib import Path
from typing import Any

from .errors import ConfigurationError, TransportAuthError
from .thespian_compat import check
from .trace import trace

__all__ = ["KEY_ENV", "KEY_FILE_ENV", "SignedPickle", "current_key", "install", "load_key"]

KEY_ENV = "GREENROOM_KEY"
KEY_FILE_ENV = "GREENROOM_KEY_FILE"
MAGIC = b"GRv1"
_MAC_LEN = hashlib.sha256().digest_size

_lock = threading.Lock()
_installed: dict[str, Any] = {}


class SignedPickle:
    """A drop-in for the ``pickle`` module in Thespian's TCP transport that signs frames."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ConfigurationError("the transport key must be at least 16 bytes")
        self._key = key
        from thespian.system.transport.streamBuffer import ackDataErrPacket, ackPacket

        self._acks = {pickle.dumps(ackPacket): ackPacket, pickle.dumps(ackDataErrPacket): ackDataErrPacket}

    def dumps(self, obj: Any) -> bytes:
        trace("frame", type(obj[1]).__name__ if isinstance(obj, tuple) and len(obj) == 2 else type(obj).__name__)
        body = pickle.dumps(obj)
        return MAGIC + hmac.new(self._key, body, hashlib.sha256).digest() + body

    def loads(self, data: bytes) -> Any:
        data = bytes(data)
        if data in self._acks:
            return self._acks[data]
        head = len(MAGIC) + _MAC_LEN
        if len(data) < head or not data.startswith(MAGIC):
            raise TransportAuthError("rejected an unsigned frame")
        mac, body = data[len(MAGIC) : head], data[head:]
        if not hmac.compare_digest(mac, hmac.new(self._key, body, hashlib.sha256).digest()):
            raise TransportAuthError("rejected a frame with a bad signature")
        return pickle.loads(body)


def load_key(key: bytes | str | None = None, key_file: str | os.PathLike[str] | None = None) -> bytes | None:
    """The deployment key: given, or from ``$GREENROOM_KEY``, or from a file
    (``key_file`` or ``$GREENROOM_KEY_FILE``); None when none is configured."""
    if key is not None:
        return key.encode() if isinstance(key, str) else key
    if os.environ.get(KEY_ENV):
        return os.environ[KEY_ENV].encode()
    path = key_file or os.environ.get(KEY_FILE_ENV)
    if path:
        data = Path(path).read_bytes().strip()
        if not data:
            raise ConfigurationError(f"the key file {path} is empty")
        return data
    return None


def current_key() -> bytes:
    """The key ``install`` set in this process."""
    if not _installed:
        raise ConfigurationError("the transport is not installed in this process")
    return _installed["key"]  # type: ignore[no-any-return]


def install(bind_host: str, key: bytes | None = None) -> bytes:
    """Bind Thespian's sockets to ``bind_host`` and sign frames with ``key``.

    Process-wide and idempotent: the first call fixes the host and the key (a fresh random
    key when none is given); a later call with a different host or key raises
    ``ConfigurationError``, since admins already forked would not follow. Returns the key.
    """
    with _lock:
        if _installed:
            if _installed["bind_host"] != bind_host or (key is not None and key != _installed["key"]):
                raise ConfigurationError(
                    "this process already runs Thespian bound to "
                    f"{_installed['bind_host']} with another key; one process, one transport setting"
                )
            return _installed["key"]  # type: ignore[no-any-return]
        key = key if key is not None else secrets.token_bytes(32)
        check()
        from thespian.system.transport import IPBase, TCPTransport

        def bind_args(self: Any) -> tuple[tuple[str, int]]:
            host, port = self.bindname[:2]
            return ((bind_host if host in ("", "0.0.0.0") else host, port),)

        IPBase.IPActorAddress.bindArgs = property(bind_args)  # type: ignore[assignment]
        TCPTransport.serializer = SignedPickle(key)  # type: ignore[attr-defined]
        if bind_host not in ("", "0.0.0.0"):
            os.environ["THESPIAN_BASE_IPADDR"] = bind_host
            IPBase.thisSystem.add_local_addr(bind_host)
        _installed.update(bind_host=bind_host, key=key, signed=True)
        return key
