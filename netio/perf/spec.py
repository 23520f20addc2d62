"""What ``netio bench`` measures: the test modes, one run's settings, and its results.

Modes follow perftest (``ib_{send,write,read,atomic}_bw``, ``ib_{send,write,read}_lat``)
with one difference that netio states rather than hides: ``write_lat`` is a ping-pong of
RDMA WRITE *with immediate* (each side learns of the peer's WRITE from a completion),
where perftest's polls the last byte of the buffer; ``send_lat``/``read_lat`` measure
what perftest's do. Latencies are reported as perftest reports them: half the round
trip for the ping-pong modes, the whole operation for ``read_lat``.
"""

from __future__ import annotations

import enum
import math
import statistics
from dataclasses import dataclass

from netio.errors import IoError

#: perftest's -a sweep: 2 B .. 8 MiB in powers of two.
SWEEP_SIZES_BYTES = tuple(1 << k for k in range(1, 24))
ATOMIC_BYTES = 8
MIB = 1 << 20


class Mode(enum.Enum):
    SEND_BW = "send_bw"
    WRITE_BW = "write_bw"
    READ_BW = "read_bw"
    ATOMIC_BW = "atomic_bw"
    SEND_LAT = "send_lat"
    WRITE_LAT = "write_lat"
    READ_LAT = "read_lat"

    @property
    def is_latency(self) -> bool:
        return self.value.endswith("_lat")

    @property
    def is_pingpong(self) -> bool:
        return self in (Mode.SEND_LAT, Mode.WRITE_LAT)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run of ``netio bench`` (the client's choice; the server follows it).

    ``sizes_bytes``: one size, or the sweep; ``iterations``: per size (bandwidth modes
    cap the bytes per size at ``max_bytes_per_size`` so that an 8 MiB step does not run
    for minutes on a slow backend); ``duration_s``: when set, each size runs for that
    long instead; ``queue_depth``: requests in flight per endpoint (-t);
    ``endpoints``: parallel endpoints (-q)."""

    mode: Mode
    sizes_bytes: tuple[int, ...]
    iterations: int = 1000
    duration_s: float | None = None
    queue_depth: int = 128
    endpoints: int = 1
    max_bytes_per_size: int = 256 * MIB

    def __post_init__(self) -> None:
        if not self.sizes_bytes:
            raise IoError("no message size to test")
        for size in self.sizes_bytes:
            if not 0 < size <= 1 << 31:
                raise IoError(f"message size {size} outside 1..2**31 bytes")
        if self.mode in (Mode.ATOMIC_BW,) and self.sizes_bytes != (ATOMIC_BYTES,):
            raise IoError("atomic_bw works on 8-byte operands only (-s 8)")
        if not 1 <= self.iterations <= 100_000_000:
            raise IoError(f"iterations {self.iterations} outside 1..1e8")
        if not 1 <= self.queue_depth <= 16384:
            raise IoError(f"queue depth {self.queue_depth} outside 1..16384")
        if not 1 <= self.endpoints <= 256:
            raise IoError(f"endpoints {self.endpoints} outside 1..256")
        if self.duration_s is not None and not (math.isfinite(self.duration_s)
                                                and 0 < self.duration_s <= 3600):
            raise IoError(f"duration {self.duration_s} s outside (0, 3600]")

    def iterations_for(self, size_bytes: int) -> int:
        """Iterations at one size: as asked, bounded by ``max_bytes_per_size`` for the
        bandwidth modes (never fewer than the queue depth, never fewer than 8)."""
        if self.mode.is_latency:
            return self.iterations
        cap = max(8, self.queue_depth, self.max_bytes_per_size // size_bytes)
        return min(self.iterations, cap)


@dataclass(frozen=True, slots=True)
class BandwidthResult:
    """One size of a bandwidth test (perftest's columns, plus CPU use)."""

    size_bytes: int
    iterations: int
    duration_s: float
    peak_mib_per_s: float
    average_mib_per_s: float
    message_rate_mpps: float
    client_cpu_fraction: float  # CPU seconds per wall second (1.0 = one core)
    server_cpu_fraction: float

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.average_mib_per_s * MIB


@dataclass(frozen=True, slots=True)
class LatencyResult:
    """One size of a latency test (perftest's columns, plus CPU use), microseconds."""

    size_bytes: int
    iterations: int
    t_min_us: float
    t_max_us: float
    t_typical_us: float  # the median, as perftest's "t_typical"
    t_avg_us: float
    t_stdev_us: float
    p99_us: float
    p999_us: float
    client_cpu_fraction: float
    server_cpu_fraction: float

    @classmethod
    def from_samples(cls, size_bytes: int, samples_us: list[float], client_cpu: float,
                     server_cpu: float) -> LatencyResult:
        ordered = sorted(samples_us)
        n = len(ordered)

        def pct(p: float) -> float:
            # perftest: the sample at index ceil(p * n) - 1 of the sorted run
            return ordered[max(0, min(n - 1, math.ceil(p * n) - 1))]

        return cls(size_bytes, n, ordered[0], ordered[-1], statistics.median(ordered),
                   statistics.fmean(ordered), statistics.pstdev(ordered) if n > 1 else 0.0,
                   pct(0.99), pct(0.999), client_cpu, server_cpu)


__all__ = [
    "ATOMIC_BYTES",
    "SWEEP_SIZES_BYTES",
    "BandwidthResult",
    "LatencyResult",
    "Mode",
    "RunSpec",
]
