"""The soak's lossy network and owner memory: each block's Runtime behind a seeded ``FaultRelay``.

``network(seed, rates)`` is ``actors.testing.netns.relayed`` with a ``NotingPolicy``: a fresh
network namespace, entered by the calling thread for the block, whose every TCP connection
(between the Runtime's processes, and to the scripted provider) goes through a relay that
draws faults per frame at ``rates``; the policy notes each fault it draws with the message
it hit, so that a scenario's violations can be read beside the faults injected meanwhile.
``owner_rss_kib`` is this process's resident memory after a full collection.
"""

from __future__ import annotations

import contextlib
import gc
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from actors.testing.faults import KINDS, Fault, FaultPolicy, Frame
from actors.testing.netns import available, relayed
from actors.testing.relay import FaultRelay

__all__ = ["DEFAULT_RATES", "NotingPolicy", "available", "network", "owner_rss_kib", "parse_rates", "relay_line"]

#: Per frame (any frame but an ACK, either direction, every connection). STALL is left out:
#: a connection held until the relay stops is a partition, which Thespian reports as a failed
#: send only after ``deliver_within`` (30 s), past the soak's 10 s hang threshold.
DEFAULT_RATES: dict[str, float] = {"cut": 0.005, "duplicate": 0.005, "delay": 0.01, "reset": 0.002}
DELAY_MS = (10, 1000)
_NAME = re.compile(rb"\x8c([\x01-\x40])")  # a short unicode string in a pickle (protocol 4+)
_ENVELOPE = {"ActorAddress", "TCPv4ActorAddress", "AddressFamily", "SocketKind"}  # Thespian's, in every frame


def message_name(data: bytes) -> str:
    """The class of the message a frame carries (the first class name in its pickle that is
    not Thespian's envelope), or ``?``."""
    for m in _NAME.finditer(data):
        raw = data[m.end() : m.end() + m.group(1)[0]]
        if re.fullmatch(rb"[A-Z][A-Za-z0-9_]+", raw) and raw.decode() not in _ENVELOPE:
            return raw.decode()
    return "?"


def parse_rates(text: str) -> dict[str, float]:
    """``cut=0.005,delay=0.01`` -> rates; an unknown kind or a bad number is a clear error."""
    rates: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, _, value = part.partition("=")
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(KINDS)}")
        rates[kind] = float(value)
        if not 0.0 <= rates[kind] <= 1.0:
            raise ValueError(f"the rate of {kind} must be between 0 and 1, not {value}")
    if sum(rates.values()) > 1.0:
        raise ValueError(f"the rates add up to more than 1: {rates}")
    return rates


class NotingPolicy(FaultPolicy):
    """A seeded ``FaultPolicy`` that notes every fault it draws (not the passes): when, which
    message, which way; ``drain()`` hands them over and forgets them."""

    def __init__(self, seed: int, rates: dict[str, float]) -> None:
        super().__init__(seed=seed, rates=rates, delay_ms=DELAY_MS)
        self.by_message: Counter[str] = Counter()  # "cut EventBatch" -> n, over the block
        self._noted: list[str] = []
        self._noted_lock = threading.Lock()

    def decide(self, frame: Frame) -> Fault:
        fault = super().decide(frame)
        if fault.kind != "pass":
            name = message_name(frame.data)
            what = f"{fault.kind}{f' {fault.ms} ms' if fault.kind == 'delay' else ''}"
            way = "->" if frame.outbound else "<-"
            with self._noted_lock:
                self.by_message[f"{fault.kind} {name}"] += 1
                where = f"conn {frame.conn} {way} :{frame.target[1]}"
                self._noted.append(f"{time.strftime('%H:%M:%S')} {what} {name} ({where})")
        return fault

    def drain(self) -> list[str]:
        with self._noted_lock:
            noted, self._noted = self._noted, []
        return noted


@contextlib.contextmanager
def network(seed: int, rates: dict[str, float]) -> Iterator[tuple[FaultRelay, NotingPolicy]]:
    """The block's lossy network (see the module docstring); the relay keeps no log of its
    own (the policy notes the faults), so that it does not weigh on the owner's memory."""
    policy = NotingPolicy(seed, rates)
    with relayed(policy, keep=0, log_bytes=0) as relay:
        yield relay, policy


def owner_rss_kib() -> int:
    """This process's resident memory (VmRSS, KiB) after ``gc.collect()``."""
    gc.collect()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def relay_line(counts: Counter[str] | dict[str, Any]) -> str:
    """What the relay did, in one line."""
    c = Counter(counts)
    return (
        f"{c['connections']} connections, {c['frames']} frames; cut {c['cut']} (ACK dropped {c['ack_dropped']}), "
        f"duplicate {c['duplicate']} (copy answered ACK {c['duplicate_ack']}, NAK {c['duplicate_nak']}, "
        f"lost {c['duplicate_lost']}), delay {c['delay']}, stall {c['stall']}, reset {c['reset']}, "
        f"refused by the destination {c['refused']}"
    )
