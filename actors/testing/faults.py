"""What a ``FaultRelay`` does to each frame: the faults, the rules, a seeded policy.

A ``FaultPolicy`` tries its ``Rule``s in order (a predicate on the ``Frame``, a ``Fault``,
how many times, for the frame or for the rest of its connection in that direction), then
draws faults at the given ``rates`` from ``random.Random(seed)``: the same seed draws the
same faults for the same sequence of frames. ``relay`` says what each fault does on the wire.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "CUT",
    "DUPLICATE",
    "KINDS",
    "PASS",
    "RESET",
    "STALL",
    "Fault",
    "FaultPolicy",
    "Frame",
    "Record",
    "Rule",
    "delay",
]

KINDS = ("cut", "duplicate", "delay", "stall", "reset")  # the faults a policy draws, in the order it draws them


@dataclass(frozen=True)
class Fault:
    """What the relay does with one frame: ``kind`` is one of pass, cut, duplicate, delay,
    stall, reset; ``ms`` is a delay's length."""

    kind: str
    ms: int = 0


PASS, CUT, DUPLICATE, STALL, RESET = Fault("pass"), Fault("cut"), Fault("duplicate"), Fault("stall"), Fault("reset")


def delay(ms: int) -> Fault:
    """Hold a frame (and what follows it on its connection, that direction) ``ms`` milliseconds."""
    return Fault("delay", ms)


@dataclass(frozen=True)
class Frame:
    """One frame seen by the relay: its connection (numbered from 1), whether it goes from
    the side that connected to the destination (``outbound``), its number among the
    non-ACK frames of that direction, the connection's destination, and its body."""

    conn: int
    outbound: bool
    index: int
    target: tuple[str, int]
    data: bytes

    def carries(self, name: str) -> bool:
        """True if the body's pickle holds the string ``name`` (a class name, say), as pickle
        protocol 4 and later writes a short string; never true of an encrypted frame."""
        raw = name.encode()
        return len(raw) < 256 and b"\x8c" + bytes([len(raw)]) + raw in self.data


@dataclass
class Rule:
    """Apply ``fault`` to frames for which ``when`` holds, ``times`` times (None: always);
    with ``connection``, to every later frame of that connection and direction as well."""

    when: Callable[[Frame], bool]
    fault: Fault
    times: int | None = 1
    connection: bool = False
    used: int = 0


@dataclass(frozen=True)
class Record:
    """One decision of the relay: the fault and the frame it was applied to."""

    fault: Fault
    frame: Frame


class FaultPolicy:
    """Rules first, then seeded random faults at ``rates`` (kind -> probability per frame,
    for frames ``eligible`` accepts), delays drawn in ``delay_ms``. Thread-safe."""

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        *,
        seed: int = 0,
        rates: Mapping[str, float] | None = None,
        delay_ms: tuple[int, int] = (10, 1000),
        eligible: Callable[[Frame], bool] = lambda frame: True,
    ) -> None:
        unknown = set(rates or {}) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
        self.rules = list(rules)
        self.rates = dict(rates or {})
        self.delay_ms = delay_ms
        self.eligible = eligible
        self._random = random.Random(seed)
        self._sticky: dict[tuple[int, bool], Fault] = {}
        self._lock = threading.Lock()

    def add(self, rule: Rule) -> Rule:
        """Add a rule after the others (while the relay runs, too)."""
        with self._lock:
            self.rules.append(rule)
        return rule

    def decide(self, frame: Frame) -> Fault:
        with self._lock:
            sticky = self._sticky.get((frame.conn, frame.outbound))
            if sticky is not None:
                return sticky
            for rule in self.rules:
                if (rule.times is None or rule.used < rule.times) and rule.when(frame):
                    rule.used += 1
                    if rule.connection:
                        self._sticky[(frame.conn, frame.outbound)] = rule.fault
                    return rule.fault
            if not self.rates or not self.eligible(frame):
                return PASS
            draw, total = self._random.random(), 0.0
            for kind in KINDS:
                total += self.rates.get(kind, 0.0)
                if draw < total:
                    return delay(self._random.randint(*self.delay_ms)) if kind == "delay" else Fault(kind)
            return PASS
