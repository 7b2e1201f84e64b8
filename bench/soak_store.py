"""The soak's faulty store: a PostgreSQL server that crashes, pauses, and is cut off from one process.

``store_faults(seed)`` is a throwaway PostgreSQL reached through ``DbRelay`` (a TCP relay on
127.0.0.1 in front of it) and a ``Chaos`` thread that, every 2-6 s (seeded), does one of:

- **restart**: ``pg_ctl stop -m immediate``, then start again on the same port 0.3-4 s later;
- **pause**: SIGSTOP every process of the server for 0.3-4 s (it answers TCP, nothing else);
- **cut one process**: the relay stops forwarding (both ways, without a reset, as a cut
  cable does) the connections of one process of the Runtime, a host or the directory,
  chosen at random among those connected, for 0.3-4 s; its new connections hang the same.

Each block's Runtime gets a fresh database on the server, through the relay. The faults
are drawn with a seeded generator, but when each lands depends on timing.
"""

from __future__ import annotations

import contextlib
import os
import random
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator

from actors.testing.postgres import ThrowawayPostgres

__all__ = ["Chaos", "DbRelay", "store_faults"]

PAUSE_S = (0.3, 4.0)  # how long each fault lasts
EVERY_S = (2.0, 6.0)  # between two faults


def _socket_owner(port: int) -> int | None:
    """The pid of the process with a TCP socket bound to local port ``port`` on 127.0.0.1."""
    inode = None
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) == port:
                inode = fields[9]
                break
    if inode is None:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                        return int(pid)
    return None


class DbRelay:
    """Forwards 127.0.0.1:``port`` to the server; ``cut(pid, seconds)`` holds one process's traffic."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._peer: dict[socket.socket, socket.socket] = {}
        self._owner: dict[socket.socket, int | None] = {}  # client-side socket -> its process
        self._held_pid: int | None = None
        self._held_until = 0.0
        self._paused: list[tuple[socket.socket, str]] = []  # unregistered while their process is cut off
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="soak-db-relay", daemon=True)
        self._thread.start()

    def owners(self) -> list[int]:
        """The processes connected through the relay now."""
        with self._lock:
            return sorted({p for p in self._owner.values() if p is not None})

    def cut(self, pid: int, seconds: float) -> None:
        with self._lock:
            self._held_pid, self._held_until = pid, time.monotonic() + seconds

    def _hold(self) -> None:
        """Pause the connections of the process cut off (not read: the kernel's buffers fill,
        as behind a cut cable); resume them once its time is up."""
        with self._lock:
            held = self._held_pid if time.monotonic() < self._held_until else None
            owner = dict(self._owner)
        if held is None:
            for sock, role in self._paused:
                if sock in self._peer:
                    self._sel.register(sock, selectors.EVENT_READ, role)
            self._paused.clear()
            return
        for client, pid in owner.items():
            server = self._peer.get(client)
            if pid != held or server is None:
                continue
            for sock, role in ((client, "client"), (server, "server")):
                with contextlib.suppress(KeyError, ValueError):
                    self._sel.unregister(sock)
                    self._paused.append((sock, role))

    def _run(self) -> None:
        while not self._closed:
            self._hold()
            for key, _ in self._sel.select(timeout=0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    self._accept()
                    continue
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                other = self._peer.get(sock)
                if not data or other is None:
                    self._drop(sock)
                    continue
                try:
                    other.sendall(data)
                except OSError:
                    self._drop(sock)

    def _accept(self) -> None:
        client, (_, port) = self._listener.accept()
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        self._peer[client], self._peer[server] = server, client
        with self._lock:
            self._owner[client] = _socket_owner(port)
        self._sel.register(client, selectors.EVENT_READ, "client")
        self._sel.register(server, selectors.EVENT_READ, "server")

    def _drop(self, sock: socket.socket) -> None:
        other = self._peer.pop(sock, None)
        for s in (sock, other):
            if s is None:
                continue
            self._peer.pop(s, None)
            with self._lock:
                self._owner.pop(s, None)
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(s)
            s.close()

    def close(self) -> None:
        self._closed = True
        self._thread.join(2)
        for s in list(self._peer):
            self._drop(s)
        self._listener.close()


class Chaos:
    """Draws a store fault every few seconds while ``running``; ``counts`` says which."""

    def __init__(self, pg: ThrowawayPostgres, relay: DbRelay, seed: int) -> None:
        self.pg, self.relay, self.rng = pg, relay, random.Random(seed)
        self.counts: Counter[str] = Counter()
        self.running = threading.Event()
        self._stop = threading.Event()
        self._faulting = threading.Lock()  # held while a fault is in progress
        self._thread = threading.Thread(target=self._run, name="soak-store-chaos", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._stop.wait(self.rng.uniform(*EVERY_S)):
                continue
            with self._faulting:
                if self.running.is_set():  # looked at here, so that calm() sees no fault begin
                    self._fault()

    def _fault(self) -> None:
        kind = self.rng.choice(["restart", "pause", "cut"])
        seconds = self.rng.uniform(*PAUSE_S)
        if kind == "restart":
            self.pg.crash()
            self._stop.wait(seconds)
            self.pg.start()
        elif kind == "pause":
            stopped = self.pg.pause()
            self._stop.wait(seconds)
            self.pg.resume(stopped)
        else:
            owners = self.relay.owners()
            if not owners:
                return
            self.relay.cut(self.rng.choice(owners), seconds)
            self._stop.wait(seconds)
        self.counts[kind] += 1

    def calm(self) -> None:
        """Once no fault is in progress (``running`` cleared, one drawn before may still be):
        a new block's database is created on a server that is up."""
        with self._faulting:
            pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


@contextlib.contextmanager
def store_faults(seed: int) -> Iterator[tuple[ThrowawayPostgres, DbRelay, Chaos]]:
    with ThrowawayPostgres(password="soak-" + str(seed)) as pg:
        relay = DbRelay(pg.port)
        chaos = Chaos(pg, relay, seed)
        try:
            yield pg, relay, chaos
        finally:
            chaos.close()
            relay.close()


def through(pg: ThrowawayPostgres, relay: DbRelay, database: str) -> str:
    """A new database's URL, through the relay."""
    url = pg.create_database(database)
    return url.replace(f":{pg.port}/", f":{relay.port}/")
