"""The wire, as an attacker on the same host sees it: listening ports, raw frames, and the
loopback's packets (captured with an AF_PACKET socket, which needs root)."""

from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

ETH_P_ALL = 0x0003


def frame(payload: bytes) -> bytes:
    """Thespian's TCP framing: ``<length>>`` then the serialized envelope."""
    return b"%d>" % len(payload) + payload


ACK_DATAERR = b"%d>" % len(pickle.dumps("ACK+DATAERR")) + pickle.dumps("ACK+DATAERR")  # Thespian's refusal
ACK = b"%d>" % len(pickle.dumps("ACK")) + pickle.dumps("ACK")  # Thespian's acknowledgement


def send_raw(port: int, data: bytes, wait: float = 10.0) -> bytes:
    """Send ``data`` on a new connection and say no more; return what comes back before the
    peer closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            return b""  # the peer closed the connection before it had all of it
        s.settimeout(wait)
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
        return b"".join(chunks)


def listening_sockets(pids: set[int]) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket owned by ``pids``."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                    host_hex, port_hex = cols[1].split(":")
                    if len(host_hex) == 8:
                        host = ".".join(str(int(host_hex[i : i + 2], 16)) for i in (6, 4, 2, 0))
                    else:
                        host = host_hex
                    found.append((host, int(port_hex, 16)))
    return found


class Capture:
    """TCP payloads seen on the loopback interface while it runs: ``(destination port, payload)``."""

    def __init__(self) -> None:
        self.payloads: list[tuple[int, bytes]] = []
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self._sock.bind(("lo", 0))
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                packet, (_, _, kind, *_) = self._sock.recvfrom(262144)
            except (TimeoutError, OSError):
                continue
            if kind == socket.PACKET_OUTGOING:
                continue  # on lo every packet is seen twice
            parsed = _tcp_payload(packet)
            if parsed is not None and parsed[1]:
                self.payloads.append(parsed)

    def __enter__(self) -> Capture:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


def _tcp_payload(packet: bytes) -> tuple[int, bytes] | None:
    ip = packet[14:]
    if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != socket.IPPROTO_TCP:
        return None
    total = struct.unpack("!H", ip[2:4])[0]
    tcp = ip[(ip[0] & 0x0F) * 4 : total]
    if len(tcp) < 20:
        return None
    port = struct.unpack("!H", tcp[2:4])[0]
    return port, bytes(tcp[(tcp[12] >> 4) * 4 :])


@contextmanager
def capture() -> Iterator[Capture]:
    with Capture() as c:
        yield c


def can_capture() -> bool:
    return os.geteuid() == 0 and hasattr(socket, "AF_PACKET")


def accept_queue(port: int) -> int:
    """Connections waiting in the backlog of the listening socket on ``port`` (nobody accepted them)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and int(cols[1].split(":")[1], 16) == port:
                    return int(cols[4].split(":")[1], 16)
    return 0
