"""A fault-injecting TCP relay for Thespian's framed transport: what a real network does, on demand.

``FaultRelay`` accepts connections that were redirected to it (``netns.interpose`` sends
every TCP connection started in a network namespace there with an nftables rule), finds
where each was going (``SO_ORIGINAL_DST``), connects there itself (its own sockets carry
``SO_MARK`` ``MARK``, which the rule lets through) and forwards both ways. It reads both
directions as Thespian frames (``<length>>body``; the receiver answers each frame with an
ACK frame on the same connection, and the sender waits for it before its next frame to
that target) and asks its ``FaultPolicy`` what to do with each frame that is not an ACK:

- ``PASS``: forward it;
- ``CUT``: forward it, and when its ACK comes back, drop the ACK and reset both sides: the
  receiver has the message, the sender never learns it (a lost ACK);
- ``DUPLICATE``: forward it and its ACK, then deliver the same bytes again (what a resend
  after a lost ACK looks like to the receiver): a frame from the side that connected goes
  on a new connection to the same destination; one going the other way (to a side whose
  listening address the relay does not know) twice on its own connection, the second
  answer swallowed. Counted by how the receiver answered the copy (``duplicate_ack``,
  ``duplicate_nak``, ``duplicate_lost``);
- ``delay(ms)``: hold it, and everything behind it in that direction of its connection,
  ``ms`` milliseconds: messages on other connections overtake it;
- ``STALL``: hold it, and everything behind it in that direction, until the relay stops;
- ``RESET``: drop it and reset both sides (RST): the receiver never sees it.

A frame refused with a notice (``wire.frames``: it was sealed for another incarnation of
its destination) is answered by the notice, which the relay treats as that frame's answer,
as it does an ACK (count ``notice``). A stream that does not start like a frame (HTTP, say)
is forwarded untouched. A connection
whose destination refuses it is reset (count ``refused``): its sender sees a reset, not a
refusal. Frames are matched by content (``Frame.carries``) only where they are not
encrypted (greenroom encrypts beyond the loopback interface).

The policy (``faults.FaultPolicy``, re-exported here) tries its ``Rule``s in order, then
draws seeded random faults. ``counts`` says what the relay did, ``log`` says it frame by
frame, and ``wait_for`` waits until a condition on either holds.
"""

from __future__ import annotations

import contextlib
import pickle
import socket
import struct
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..wire.frames import NOTICE_MAGIC
from .faults import CUT, DUPLICATE, PASS, RESET, STALL, Fault, FaultPolicy, Frame, Record, Rule, delay

__all__ = [
    "CUT",
    "DUPLICATE",
    "MARK",
    "PASS",
    "RESET",
    "STALL",
    "Fault",
    "FaultPolicy",
    "FaultRelay",
    "Frame",
    "Record",
    "Rule",
    "delay",
]

MARK = 0x6772  # SO_MARK of the relay's own connections ("gr"): the redirect rule lets them pass
SO_ORIGINAL_DST = 80
_ACKS = {pickle.dumps("ACK"): "ack", pickle.dumps("ACK+DATAERR"): "nak"}  # Thespian's two fixed answers


def _answer_kind(body: bytes) -> str | None:
    """What a frame's body answers: ``ack``, ``nak``, ``notice``; None if it is no answer."""
    return _ACKS.get(body) or ("notice" if body.startswith(NOTICE_MAGIC) else None)


class _Closed(Exception):
    """The link was reset or the relay stopped: this pump ends."""


def _reset(sock: socket.socket, hard: bool = False) -> None:
    """Make the next close of ``sock`` an RST, and wake a reader blocked on it (with
    ``hard``, a writer too: a FIN may then go before the RST)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR if hard else socket.SHUT_RD)


class _Frames:
    """Thespian's framing, parsed incrementally; a stream that does not start like a frame is raw."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.raw = False

    def feed(self, data: bytes) -> list[tuple[bytes, bytes | None]]:
        """Whole frames (bytes on the wire, body) now complete; raw bytes come as (bytes, None)."""
        if self.raw:
            return [(data, None)]
        self.buf += data
        out: list[tuple[bytes, bytes | None]] = []
        while self.buf:
            mark = self.buf.find(b">", 0, 14)
            digits = bytes(self.buf[:mark]) if mark >= 0 else bytes(self.buf[:13])
            if not digits.isdigit() or (mark < 0 and len(self.buf) > 13) or (mark >= 0 and not digits):
                self.raw = True
                out.append((bytes(self.buf), None))
                self.buf.clear()
                break
            if mark < 0:
                break
            end = mark + 1 + int(digits)
            if len(self.buf) < end:
                break
            out.append((bytes(self.buf[:end]), bytes(self.buf[mark + 1 : end])))
            del self.buf[:end]
        return out


class _Link:
    """One relayed connection: the side that connected, the destination, two pumps."""

    def __init__(self, relay: FaultRelay, conn: int, client: socket.socket, target: tuple[str, int]) -> None:
        self.relay, self.conn, self.client, self.target = relay, conn, client, target
        self.upstream: socket.socket | None = None
        self.after_ack: tuple[deque[Any], deque[Any]] = (deque(), deque())  # per direction of the ACK
        self.index = [0, 0]
        self.done = 0
        self.lock = threading.Lock()
        self.aborted = False

    def run(self) -> None:
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            upstream.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, self.relay.mark)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream.settimeout(10)
            upstream.connect(self.target)
            upstream.settimeout(None)
        except OSError:
            upstream.close()
            self.relay._count("refused")
            _reset(self.client)
            self.client.close()
            return
        self.upstream = upstream
        self.relay._track(self, True)
        threading.Thread(target=self.pump, args=(1,), name=f"relay-{self.conn}-in", daemon=True).start()
        self.pump(0)

    def pump(self, d: int) -> None:
        """Direction 0: from the side that connected to the destination; 1: back."""
        assert self.upstream is not None
        src, dst = (self.client, self.upstream) if d == 0 else (self.upstream, self.client)
        frames = _Frames()
        try:
            while True:
                data = src.recv(262144)
                if not data:
                    if not self.aborted:
                        with contextlib.suppress(OSError):
                            dst.shutdown(socket.SHUT_WR)
                    break
                for wire, body in frames.feed(data):
                    if body is None:
                        dst.sendall(wire)
                    elif (answer := _answer_kind(body)) is not None:
                        self._answer(d, wire, answer, dst)
                    else:
                        self._frame(d, wire, body, dst)
        except (OSError, _Closed):
            self.abort()
        finally:
            with self.lock:
                self.done += 1
                last = self.done == 2
            if last:
                self.client.close()
                self.upstream.close()
                self.relay._track(self, False)

    def _frame(self, d: int, wire: bytes, body: bytes, dst: socket.socket) -> None:
        frame = Frame(self.conn, d == 0, self.index[d], self.target, body)
        self.index[d] += 1
        fault = self.relay.policy.decide(frame)
        self.relay._record(fault, frame)
        if fault.kind == "reset":
            raise _Closed
        if fault.kind in ("delay", "stall"):
            if self.relay._stopping.wait(None if fault.kind == "stall" else fault.ms / 1000):
                raise _Closed
        answers = self.after_ack[1 - d]
        if fault.kind == "cut":
            answers.append("cut")
        elif fault.kind == "duplicate" and d == 0:
            answers.append(wire)
        elif fault.kind == "duplicate":
            answers.extend(["forward", "swallow"])
            dst.sendall(wire)
        else:
            answers.append("forward")
        dst.sendall(wire)

    def _answer(self, d: int, wire: bytes, answer: str, dst: socket.socket) -> None:
        self.relay._count(answer)
        action = self.after_ack[d].popleft() if self.after_ack[d] else "forward"
        if action == "cut":
            self.relay._count("ack_dropped")
            raise _Closed
        if action == "swallow":
            self.relay._count("duplicate_" + answer)
            return
        dst.sendall(wire)
        if isinstance(action, bytes):
            threading.Thread(target=self.relay._resend, args=(self.target, action), daemon=True).start()

    def abort(self, hard: bool = False) -> None:
        """Reset both sides (once); ``hard`` also wakes a pump blocked in a send."""
        with self.lock:
            if self.aborted and not hard:
                return
            self.aborted = True
        for sock in (self.client, self.upstream):
            if sock is not None:
                _reset(sock, hard)


@dataclass
class _State:
    keep: int
    log_bytes: int
    counts: Counter[str] = field(default_factory=Counter)
    log: deque[Record] = field(init=False)

    def __post_init__(self) -> None:
        self.log = deque(maxlen=self.keep)


class FaultRelay:
    """The relay; see the module docstring. Listens on ``host:port`` (port 0: a free one) in
    the network namespace of the thread that calls ``start()``, where it also connects;
    ``log`` keeps the last ``keep`` decisions, each frame's body cut to ``log_bytes``."""

    def __init__(
        self,
        policy: FaultPolicy | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        mark: int = MARK,
        keep: int = 10_000,
        log_bytes: int = 4096,
    ) -> None:
        self.policy = policy if policy is not None else FaultPolicy()
        self.host, self.mark = host, mark
        self.namespace: Any = None  # the netns.Namespace it runs in, when netns.relayed made it
        self._port = port
        self._state = _State(keep, log_bytes)
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._links: set[_Link] = set()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._conns = 0

    @property
    def port(self) -> int:
        return self._port

    @property
    def counts(self) -> Counter[str]:
        """What the relay did so far: connections, frames, ack, nak, notice, refused (the
        destination refused), unredirected (a connection not sent by the rule), each fault
        kind applied, ack_dropped (a cut whose answer came), duplicate_ack/nak/notice/lost
        (how a copy was answered)."""
        with self._cond:
            return Counter(self._state.counts)

    @property
    def log(self) -> list[Record]:
        """The faults decided, frame by frame, in order (passes included; the last ``keep``,
        bodies cut to ``log_bytes``: a message's class name comes early in its pickle)."""
        with self._cond:
            return list(self._state.log)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Wait until ``predicate()`` holds (looked at whenever the relay counts something)."""
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    def start(self) -> FaultRelay:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self._port))
        listener.listen(512)
        self._listener, self._port = listener, listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="fault-relay", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, reset every connection, end every thread (bounded)."""
        self._stopping.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout)
        for hard in (False, True):  # an RST each; then also wake a pump blocked in a send
            with self._cond:
                links = list(self._links)
            for link in links:
                link.abort(hard)
            with self._cond:
                if self._cond.wait_for(lambda: not self._links, min(1.0, timeout) if not hard else timeout):
                    break
        if self._listener is not None:
            self._listener.close()

    def __enter__(self) -> FaultRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                raw = client.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
            except OSError:  # not redirected here: nowhere to take it
                self._count("unredirected")
                client.close()
                continue
            port, addr = struct.unpack_from("!2xH4s", raw)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conns += 1
            self._count("connections")
            link = _Link(self, self._conns, client, (socket.inet_ntoa(addr), port))
            threading.Thread(target=link.run, name=f"relay-{self._conns}-out", daemon=True).start()

    def _resend(self, target: tuple[str, int], wire: bytes) -> None:
        """Deliver a copy of a frame on a connection of its own; count how it was answered."""
        answer = "lost"
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, self.mark)
                sock.settimeout(10)
                sock.connect(target)
                sock.sendall(wire)
                frames = _Frames()
                while answer == "lost":
                    data = sock.recv(65536)
                    if not data:
                        break
                    answer = next((_answer_kind(body) or "lost" for _, body in frames.feed(data) if body), "lost")
        except OSError:
            pass
        self._count("duplicate_" + answer)

    def _track(self, link: _Link, alive: bool) -> None:
        with self._cond:
            if alive and not self._stopping.is_set():
                self._links.add(link)
            else:
                self._links.discard(link)
            self._cond.notify_all()
        if alive and self._stopping.is_set():
            link.abort()

    def _count(self, what: str) -> None:
        with self._cond:
            self._state.counts[what] += 1
            self._cond.notify_all()

    def _record(self, fault: Fault, frame: Frame) -> None:
        with self._cond:
            self._state.counts["frames"] += 1
            self._state.counts[fault.kind] += 1
            if len(frame.data) > self._state.log_bytes:
                frame = replace(frame, data=frame.data[: self._state.log_bytes])
            self._state.log.append(Record(fault, frame))
            self._cond.notify_all()
