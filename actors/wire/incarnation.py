"""Who this process is on the wire, and whom it knows: its incarnation, and theirs.

An *incarnation* is a random 16-byte id a process draws when it starts and again in every
child it forks: two processes never share one, and a process that restarts on the same
address and port (a leader restarted with its deployment key, a second runtime on the same
admin port) is a new incarnation. Every frame names its sender's incarnation and the one it
is meant for (``frames``), and a process takes only frames meant for its own, so a frame
recorded from one incarnation is refused by every other, before it is unpickled.

A sender learns the incarnation of the endpoint it sends to in three ways:

- **with the address**: an actor address pickled by a process that knows the incarnation
  of the endpoint it names carries it, and unpickling it teaches the receiver (a process's
  own address, in every frame it sends, always carries its own). Addresses travel in
  messages (the sender of every frame, a ``createActor`` answer, a pool's lent processes,
  the cluster's table of hosts), so a process knows the incarnation of nearly every address
  it can send to;
- **by inheritance**: a forked child keeps what its parent knew;
- **by a notice**: a frame for an endpoint whose incarnation the sender does not know (an
  address made from a ``host:port`` string: the leader a node joins, the runtime the
  command line steers) or knows wrongly (it restarted; its port was another's) is refused
  with a *notice*, signed with the deployment's key, naming the incarnation that listens
  there; the sender seals the message again for it, with a new counter, and sends it at
  once (``transport``).

What a notice or an address teaches is only ever a hint about where to send: it cannot
make a process take a frame that was not sealed for it, and a stale one costs one notice.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Literal

__all__ = ["CURRENT", "FRESHNESS", "UNKNOWN", "Incarnation", "Receipt"]

UNKNOWN = bytes(16)  # the incarnation a frame is sealed for when its sender knows none
FRESHNESS = 300.0  # seconds a frame stays acceptable; also how long a silent sender's window is kept
WINDOW = 4096  # frames a sender may deliver out of order
_KEEP = 10_000  # entries of each table before the oldest are forgotten

Receipt = Literal["new", "again", "outside"]  # first time; already accepted; too old to tell


class _Window:
    """One sender's frames accepted: the highest counter, and a bit for each of the
    ``WINDOW`` below it (as IPsec does)."""

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


class Incarnation:
    """One process's side of the wire: its id (``me``), the counter its frames are numbered
    with, the endpoints it listens on, the frames it has accepted, and the incarnations it
    knows of the endpoints it sends to. ``CURRENT`` is this process's; tests make others."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.peers: dict[tuple[str, int], bytes] = {}  # endpoint -> the incarnation that listens there
        self._reset()

    def _reset(self) -> None:
        self.me = os.urandom(16)
        self._counter = 0
        self.endpoints: set[tuple[str, int]] = set()
        self._windows: dict[bytes, _Window] = {}

    def forked(self) -> None:
        """In a child just forked: a new incarnation that listens nowhere yet and has
        accepted nothing; it keeps what its parent knew of the others."""
        self._lock = threading.Lock()
        self._reset()

    def next_counter(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    # -- where this process listens ---------------------------------------------------------

    def listen(self, host: str, port: int) -> None:
        """This process listens on ``host:port``: frames for it are taken here."""
        self.endpoints.add((host, port))
        self.peers[(host, port)] = self.me

    def unlisten(self, host: str, port: int) -> None:
        """This process no longer listens on ``host:port`` (another process may, later)."""
        self.endpoints.discard((host, port))
        if self.peers.get((host, port)) == self.me:
            del self.peers[(host, port)]

    def receipt(self, sender: bytes, counter: int) -> Receipt:
        """Record that frame ``counter`` of ``sender`` has passed every other check."""
        now = time.monotonic()
        with self._lock:
            window = self._windows.get(sender)
            if window is None:
                if len(self._windows) > _KEEP:  # forget senders silent for longer than a frame stays fresh
                    for k in [k for k, w in self._windows.items() if now - w.last > FRESHNESS]:
                        del self._windows[k]
                window = self._windows[sender] = _Window()
            window.last = now
            return window.accept(counter)

    # -- whom this process knows ------------------------------------------------------------

    def of(self, host: str, port: int) -> bytes:
        """The incarnation listening on ``host:port`` as far as this process knows (``UNKNOWN``)."""
        return self.peers.get((host, port), UNKNOWN)

    def learn(self, host: str, port: int, incarnation: bytes, sure: bool = True) -> None:
        """``incarnation`` listens on ``host:port``: said by itself (``sure``: its own
        address), or a hint from a third party, which only fills a gap; neither changes
        what this process knows of its own endpoints."""
        key = (host, port)
        if len(incarnation) != 16 or incarnation == UNKNOWN or key in self.endpoints:
            return
        if not sure and key in self.peers:
            return
        self._set(key, incarnation)

    def told(self, host: str, port: int, incarnation: bytes) -> None:
        """The process listening on ``host:port`` answered, in a notice, that it is
        ``incarnation``: so it is, whatever this process thought, even that it listened
        there itself (a port its closed transport left, that another process took)."""
        if len(incarnation) != 16 or incarnation == UNKNOWN or incarnation == self.me:
            return
        self.endpoints.discard((host, port))
        self._set((host, port), incarnation)

    def _set(self, key: tuple[str, int], incarnation: bytes) -> None:
        if len(self.peers) > _KEEP:
            self.peers.clear()  # what is forgotten is learned again, at one notice each
        self.peers[key] = incarnation


CURRENT = Incarnation()
os.register_at_fork(after_in_child=CURRENT.forked)
