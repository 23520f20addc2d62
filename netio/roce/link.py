"""A seeded, deterministic faulty link between two in-memory engines.

Each datagram put on the link is independently dropped, duplicated, corrupted (one bit
flipped, so the ICRC catches it), delayed, or held back so that later datagrams overtake
it (reordering), with the given probabilities. Everything comes from one
``random.Random(seed)``: the same seed and the same traffic give the same faults.
A blackout window drops everything sent inside it (faults that outlast the retries).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

from netio.roce.engine import OutgoingDatagram


@dataclass(frozen=True, slots=True)
class LinkFaults:
    """Fault probabilities (0..1) and delays of a ``FaultyLink``."""

    drop: float = 0.0
    duplicate: float = 0.0
    corrupt: float = 0.0
    reorder: float = 0.0
    delay: float = 0.0
    latency_ns: int = 1_000
    delay_ns: int = 20_000  # the most extra delay of a delayed datagram
    reorder_ns: int = 5_000  # how long a reordered datagram is held back (at most)
    blackout_ns: tuple[int, int] | None = None  # [start, end): drop everything sent then

    def __post_init__(self) -> None:
        for name in ("drop", "duplicate", "corrupt", "reorder", "delay"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} probability {value} is not in [0, 1]")
        if self.latency_ns < 0 or self.delay_ns < 0 or self.reorder_ns < 0:
            raise ValueError("link delays must not be negative")


@dataclass(slots=True)
class LinkCounters:
    sent: int = 0
    delivered: int = 0
    dropped: int = 0
    duplicated: int = 0
    corrupted: int = 0
    reordered: int = 0
    delayed: int = 0


class FaultyLink:
    """One direction of a link; ``send`` datagrams, ``pop_due`` the ones that arrived."""

    def __init__(self, seed: int, faults: LinkFaults | None = None, *,
                 drop_if: Callable[[OutgoingDatagram], bool] | None = None) -> None:
        self.faults = faults or LinkFaults()
        self.counters = LinkCounters()
        self.drop_if = drop_if
        self._rng = random.Random(seed)
        self._queue: list[tuple[int, int, OutgoingDatagram]] = []
        self._seq = itertools.count()

    def send(self, datagram: OutgoingDatagram, now_ns: int) -> None:
        f = self.faults
        rng = self._rng
        c = self.counters
        c.sent += 1
        if f.blackout_ns is not None and f.blackout_ns[0] <= now_ns < f.blackout_ns[1]:
            c.dropped += 1
            return
        if (self.drop_if is not None and self.drop_if(datagram)) or rng.random() < f.drop:
            c.dropped += 1
            return
        copies = 2 if rng.random() < f.duplicate else 1
        if copies == 2:
            c.duplicated += 1
        for _ in range(copies):
            data = datagram
            if rng.random() < f.corrupt and data.payload:
                c.corrupted += 1
                raw = bytearray(data.payload)
                bit = rng.randrange(len(raw) * 8)
                raw[bit // 8] ^= 1 << (bit % 8)
                data = OutgoingDatagram(data.dst_ip, data.src_udp_port, data.dscp, data.ecn,
                                        bytes(raw))
            at = now_ns + f.latency_ns
            if rng.random() < f.delay:
                c.delayed += 1
                at += rng.randint(1, max(1, f.delay_ns))
            if rng.random() < f.reorder:
                c.reordered += 1
                at += rng.randint(1, max(1, f.reorder_ns))
            heapq.heappush(self._queue, (at, next(self._seq), data))

    def next_delivery_ns(self) -> int | None:
        return self._queue[0][0] if self._queue else None

    def pop_due(self, now_ns: int) -> list[OutgoingDatagram]:
        out: list[OutgoingDatagram] = []
        q = self._queue
        while q and q[0][0] <= now_ns:
            out.append(heapq.heappop(q)[2])
        self.counters.delivered += len(out)
        return out

    def __len__(self) -> int:
        return len(self._queue)
