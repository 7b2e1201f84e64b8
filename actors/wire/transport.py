"""The TCP transport, hardened: bound where configured, every frame authenticated and bound
to its target, accepted once, optionally encrypted, parsed within bounds, connections limited.

Thespian's ``TCPTransport`` unpickles whatever reaches any of its ports, binds every socket
on all interfaces, trusts the length a peer announces, and keeps a connection that never
completes a frame for seven minutes. ``install()`` changes all of that, in this process and
in every admin and actor forked from it (so it runs before the ActorSystem starts):

- every listening socket binds to ``bind_host`` only, and the system advertises it;
- frames are sealed and opened by ``frames.FrameCodec`` (signed or encrypted, bound to their
  target and its incarnation, fresh, accepted once); nothing is unpickled before every
  check has passed; a frame already accepted (a resend after a lost ACK) is acknowledged
  again and dropped;
- a frame for another incarnation of the endpoint it reached is answered with a notice
  instead of Thespian's refusal; a sender that gets a notice for its frame seals the
  message again for the incarnation it names and sends it at once, at most three times
  per message (``incarnation``); an actor address, when pickled, carries the incarnation
  the pickling process knows for it, and teaches it to the process that unpickles it;
- the length prefix is read within bounds (``TransportConfig.max_frame``); a malformed,
  oversized, forged or replayed frame closes its connection only, and is logged once;
- a connection must deliver a whole frame within ``frame_timeout`` seconds; from one peer
  address at most ``max_pending_per_peer`` connections may be waiting for their first frame
  (a new one evicts the oldest), so idle connections cannot pile up.

One key per process tree: an embedded Runtime draws a fresh random key the first time the
process starts one, and every later Runtime of that process shares it; a deployment across
machines shares the deployment's key (``$GREENROOM_KEY`` or a key file).
"""

from __future__ import annotations

import errno
import os
import pickle
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..debug_trace import trace
from ..errors import ConfigurationError, TransportAuthError
from .frames import (
    BoundedReceiveBuffer,
    ForAnother,
    FrameCodec,
    FrameRejected,
    Notice,
    add_endpoint,
    is_marker,
    log_rejection,
)
from .incarnation import CURRENT
from .ordering import in_order
from .thespian_compat import check, report_child_exits, tune_delivery

__all__ = ["KEY_ENV", "KEY_FILE_ENV", "TransportConfig", "current_key", "install", "load_key"]

KEY_ENV = "GREENROOM_KEY"
KEY_FILE_ENV = "GREENROOM_KEY_FILE"
LOOPBACK = ("127.0.0.1", "localhost", "::1")

_lock = threading.Lock()
_installed: dict[str, Any] = {}


@dataclass(frozen=True)
class TransportConfig:
    """Limits and confidentiality of the transport. ``encrypt=None``: on when the runtime
    or node listens beyond the loopback interface.

    Delivery: a message whose connection breaks before its ACK is sent again, first after
    ``retry_every`` seconds, then after 2x, 3x, ... as long as ``deliver_within`` seconds
    have not passed since it was sent; after that its sender is told it failed (Thespian's
    defaults are 35 s between tries and 5 min in all)."""

    encrypt: bool | None = None
    max_frame: int = 64 * 1024 * 1024
    frame_timeout: float = 10.0
    max_pending_per_peer: int = 64
    retry_every: float = 0.5
    deliver_within: float = 30.0


class _Refused(TransportAuthError):
    """A frame sealed for another incarnation of this endpoint: answered with ``notice``."""

    def __init__(self, message: str, notice: bytes) -> None:
        super().__init__(message)
        self.notice = notice


class _Serializer:
    """What Thespian's transport calls ``serializer``: opens frames (and its two fixed ACKs)."""

    def __init__(self, codec: FrameCodec) -> None:
        from thespian.system.transport.streamBuffer import ackDataErrPacket, ackPacket

        self.codec = codec
        self._acks = {pickle.dumps(ackPacket): ackPacket, pickle.dumps(ackDataErrPacket): ackDataErrPacket}

    def loads(self, data: bytes) -> Any:
        data = bytes(data)
        if data in self._acks:
            return self._acks[data]
        try:
            return self.codec.open(data)
        except ForAnother as exc:  # its sender learns from the notice: not worth a warning
            trace("frame for another incarnation", str(exc))
            raise _Refused(f"refused a frame: {exc}", exc.notice) from None
        except FrameRejected as exc:
            log_rejection("a peer", str(exc))
            raise TransportAuthError(f"refused a frame: {exc}") from None

    def dumps(self, obj: Any) -> bytes:
        raise TransportAuthError("frames are sealed for a target (see TCPTransport.serializer)")


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


def install(bind_host: str, key: bytes | None = None, config: TransportConfig | None = None) -> bytes:
    """Harden Thespian's TCP transport in this process (see the module docstring).

    Process-wide and idempotent: the first call fixes the host, the key (a fresh random
    key when none is given) and the config; a later call with another host, key or config
    raises ``ConfigurationError``, since processes already forked would not follow.
    """
    config = config or TransportConfig()
    encrypt = config.encrypt if config.encrypt is not None else bind_host not in LOOPBACK
    with _lock:
        if _installed:
            same = _installed["bind_host"] == bind_host and _installed["encrypt"] == encrypt
            if not same or (key is not None and key != _installed["key"]):
                raise ConfigurationError(
                    f"this process already runs Thespian bound to {_installed['bind_host']} with another key or "
                    "setting; one process, one transport setting"
                )
            return _installed["key"]  # type: ignore[no-any-return]
        key = key if key is not None else secrets.token_bytes(32)
        if len(key) < 16:
            raise ConfigurationError("the transport key must be at least 16 bytes")
        check()
        _patch(bind_host, FrameCodec(key, encrypt), config)
        _installed.update(bind_host=bind_host, key=key, encrypt=encrypt)
        return key


def _patch(bind_host: str, codec: FrameCodec, config: TransportConfig) -> None:
    from thespian.system.transport import IPBase, TCPTransport
    from thespian.system.transport.streamBuffer import toSendBuffer

    def bind_args(self: Any) -> tuple[tuple[str, int]]:
        host, port = self.bindname[:2]
        return ((bind_host if host in ("", "0.0.0.0") else host, port),)

    def seal(self: Any, intent: Any) -> bytes:
        host, port = intent.targetAddr.addressDetails.connectArgs[0][:2]
        trace("frame sealed again" if hasattr(intent, "serMsg") else "frame", type(intent.message).__name__)
        return toSendBuffer((self.myAddress, intent.message), lambda obj: codec.seal(obj, host, port))  # type: ignore[no-any-return]

    original_init, original_close = TCPTransport.TCPTransport.__init__, TCPTransport.TCPTransport.close

    def endpoint(self: Any) -> tuple[str, int] | None:
        connect = getattr(getattr(getattr(self, "myAddress", None), "addressDetails", None), "connectArgs", None)
        return (connect[0][0], connect[0][1]) if connect else None

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.greenroom_endpoint = endpoint(self)
        if self.greenroom_endpoint is not None:
            add_endpoint(*self.greenroom_endpoint)

    def close(self: Any) -> None:
        listened, self.greenroom_endpoint = getattr(self, "greenroom_endpoint", None), None
        original_close(self)
        if listened is not None:  # its port is free for any process now: frames for it are not ours
            CURRENT.unlisten(*listened)

    TCPTransport.TCPTransport._next_XMIT_1, TCPTransport.TCPTransport._finishIntent = in_order(
        TCPTransport.TCPTransport._next_XMIT_1, TCPTransport.TCPTransport._finishIntent
    )
    IPBase.IPActorAddress.bindArgs = property(bind_args)
    TCPTransport.serializer = _Serializer(codec)
    TCPTransport.TCPTransport.serializer = seal
    TCPTransport.TCPTransport.__init__ = init
    TCPTransport.TCPTransport.close = close
    TCPTransport.TCPTransport._acceptNewIncoming = _accept_with_limits(config)
    TCPTransport.TCPTransport._handlePossibleIncoming = _expire_slow(TCPTransport.TCPTransport._handlePossibleIncoming)
    TCPTransport.TCPTransport._processReceivedEnvelope = _drop_markers(
        TCPTransport.TCPTransport._processReceivedEnvelope
    )
    TCPTransport.TCPTransport._addedDataToIncoming = _answer_with_notices(
        TCPTransport.TCPTransport._addedDataToIncoming
    )
    TCPTransport.TCPTransport._check_XMIT_4_done = _learn_from_notices(
        TCPTransport.TCPTransport._check_XMIT_4_done, codec
    )
    _addresses_carry_incarnations(IPBase.IPActorAddress)
    TCPTransport.ReceiveBuffer = BoundedReceiveBuffer
    tune_delivery(retry_every=config.retry_every, deliver_within=config.deliver_within)
    report_child_exits()
    TCPTransport.MAX_INCOMING_SOCKET_PERIOD = timedelta(seconds=config.frame_timeout)
    BoundedReceiveBuffer.max_frame = config.max_frame
    if bind_host not in ("", "0.0.0.0"):
        os.environ["THESPIAN_BASE_IPADDR"] = bind_host
        IPBase.thisSystem.add_local_addr(bind_host)


def _drop_markers(process: Any) -> Any:
    """A frame already accepted was acknowledged again (Thespian sends the ACK before this
    runs), and so was a notice that came where no frame of ours waited for an answer; each
    is delivered to nobody."""

    def process_envelope(self: Any, envelope: Any, has_exclusive_flag: bool = False) -> Any:
        if is_marker(envelope.message):
            trace("frame dropped", envelope.message)
            return None
        return process(self, envelope, has_exclusive_flag=has_exclusive_flag)

    return process_envelope


def _answer_with_notices(added: Any) -> Any:
    """A whole frame received for another incarnation of this endpoint is answered with a
    notice (``frames``) and its connection closed; every other frame as Thespian does (a
    refused one with ``ACK+DATAERR``)."""

    def added_data(self: Any, inc: Any, skipFinish: bool = False, has_exclusive_flag: bool = False) -> Any:
        if inc.receivedAllData():
            try:
                inc.data  # opened once; Thespian's own read below gets the same answer
            except _Refused as refused:
                try:
                    inc.socket.send(refused.notice)
                except OSError:
                    pass  # its sender tries again, and is told again
                inc.close()
                return None
            except Exception:
                pass  # refused: Thespian answers ACK+DATAERR and closes the connection
        return added(self, inc, skipFinish=skipFinish, has_exclusive_flag=has_exclusive_flag)

    return added_data


_RESEALS = 3  # notices a message may get before its send is retried as if its connection broke


def _learn_from_notices(check: Any, codec: FrameCodec) -> Any:
    """While a sent frame waits for its ACK: a notice from its target (``frames.Notice``)
    is heeded, and makes the message sealed again for the incarnation it names and sent at
    once on a new connection, and the messages queued behind it for that target sealed
    again too; an answer that cannot be read (or a notice about another endpoint) is taken
    as a broken connection (the message is sent again later), where Thespian would drop
    the message."""
    from thespian.system.transport.TCPTransport import _safeSocketShutdown

    def check_ack(self: Any, intent: Any, rcv: Any) -> Any:
        try:
            intent.ackbuf.addMore(rcv)
            opened = intent.ackbuf.completed()
        except (FrameRejected, TransportAuthError):
            intent.backoffPause(True)
            intent.stage = self._XMITStepRetry
            return self._nextTransmitStep(intent)
        notice = opened[0][1] if opened is not None and isinstance(opened[0], tuple) else None
        if not isinstance(notice, Notice):
            return check(self, intent, b"")  # the data is in the buffer: Thespian's own reading of it
        resealed = getattr(intent, "greenroom_reseals", 0)
        target = intent.targetAddr.addressDetails.connectArgs[0][:2]
        if resealed >= _RESEALS or (notice.host, notice.port) != tuple(target):
            intent.backoffPause(True)
            intent.stage = self._XMITStepRetry
            return self._nextTransmitStep(intent)
        codec.heed(notice)
        intent.greenroom_reseals = resealed + 1
        _safeSocketShutdown(intent)
        delattr(intent, "socket")
        delattr(intent, "ackbuf")
        intent.serMsg = self.serializer(intent)  # for the incarnation just learned, with a new counter
        for queued in getattr(self, "_waitingTransmits", ()):  # sealed before the notice, unsent: sealed again
            if queued.targetAddr == intent.targetAddr and queued.stage == self._XMITStepSendConnect:
                if not hasattr(queued, "socket"):
                    queued.serMsg = self.serializer(queued)
        intent.stage = self._XMITStepSendConnect
        return self._nextTransmitStep(intent)

    return check_ack


def _addresses_carry_incarnations(address_class: Any) -> None:
    """A pickled actor address carries the incarnation this process knows for it (its own,
    for an address of this process); unpickling it teaches it (``Incarnation.learn``)."""
    getstate = address_class.__getstate__

    def get_state(self: Any) -> Any:
        state = getstate(self)
        endpoint = self.__dict__.get("sockname")
        if endpoint is not None and len(endpoint) != 2:
            endpoint = endpoint[:2]  # IPv6: (host, port, flow, scope)
        known = CURRENT.peers.get(endpoint) if endpoint else None
        if known is None:
            return state
        state = dict(state)
        state["greenroom_incarnation"] = (known, endpoint in CURRENT.endpoints)
        return state

    def set_state(self: Any, state: dict[str, Any]) -> None:
        known = state.pop("greenroom_incarnation", None)
        self.__dict__.update(state)
        endpoint = state.get("sockname")
        if isinstance(known, tuple) and len(known) == 2 and isinstance(known[0], bytes) and endpoint:
            if CURRENT.peers.get(endpoint[:2]) != known[0]:
                CURRENT.learn(endpoint[0], endpoint[1], known[0], sure=bool(known[1]))

    address_class.__getstate__ = get_state
    address_class.__setstate__ = set_state


def _expire_slow(handle: Any) -> Any:
    """A connection that has not delivered its first whole frame by its deadline is closed
    (Thespian's own expiry only retries the read, with a growing backoff)."""

    def handle_possible(
        self: Any, incoming: Any, fileno: int, closed: bool = False, has_exclusive_flag: bool = False
    ) -> Any:
        deadline = getattr(incoming, "deadline", None)
        if deadline is not None and not closed and time.monotonic() > deadline:
            log_rejection(incoming.peer_ip, "no whole frame within the frame timeout")
            incoming.close()
            return None
        return handle(self, incoming, fileno, closed, has_exclusive_flag=has_exclusive_flag)

    return handle_possible


def _accept_with_limits(config: TransportConfig) -> Any:
    """Thespian's accept of a new connection, with at most ``max_pending_per_peer``
    connections per peer address waiting for their first frame (a new one evicts the
    oldest), each given ``frame_timeout`` seconds to deliver it."""
    max_pending = config.max_pending_per_peer
    from thespian.actors import ActorAddress
    from thespian.system.transport import Thespian__UpdateWork
    from thespian.system.transport.TCPTransport import TCPIncoming, TCPIncomingPersistent
    from thespian.system.utilis import thesplog

    def accept(self: Any) -> None:
        try:
            lsock, peer = self.new_socket(self.socket.accept)
        except OSError as exc:
            thesplog("Error accepting incoming: %s", exc)
            lsock = None
        self._check_indicators()
        if lsock is None or peer == self.myAddress:
            self._incomingEnvelopes.append(Thespian__UpdateWork())
        if lsock is None:
            return
        lsock.setblocking(0)
        try:
            lsock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
        ip = peer[0] if isinstance(peer, tuple) else str(peer)
        pending = [fd for fd, inc in self._incomingSockets.items() if getattr(inc, "peer_ip", None) == ip]
        if len(pending) >= max_pending:
            oldest = self._incomingSockets.pop(pending[0])
            oldest.close()
            log_rejection(ip, f"more than {max_pending} connections waiting for a first frame")
        incoming = (TCPIncomingPersistent if hasattr(self, "_openSockets") else TCPIncoming)(ActorAddress(None), lsock)
        incoming.peer_ip = ip
        incoming.deadline = time.monotonic() + config.frame_timeout
        self._incomingSockets[lsock.fileno()] = incoming

    return accept
