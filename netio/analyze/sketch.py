"""Latency quantiles in bounded memory: a mergeable log-linear (DDSketch-style) sketch.

A value v (ns, >= 0) falls in bucket ``bucket_index(v)``: values below
``2**SUB_BITS`` have a bucket each; above, the octave [2^e, 2^(e+1)) is cut into
``2**SUB_BITS`` equal buckets (its top SUB_BITS mantissa bits). A bucket
holds the integers lo .. top with top/lo <= 1 + 2^-SUB_BITS, and stands for
``2*lo*top/(lo+top)``, within ``RELATIVE_ERROR`` = 1/(2^(SUB_BITS+1)+1) of
every value in it (relative to that value), as DDSketch's relative-error
guarantee (Masson, Rim, Lee, "DDSketch", VLDB 2019) states it for a
log-bucketed store.

A sketch keeps the counts of at most ``MAX_BINS`` consecutive buckets (the
highest ones: when values span more, the lowest buckets fold into the lowest
kept one, "collapsing lowest"), plus the exact count, minimum and maximum.
So a quantile is within ``RELATIVE_ERROR`` of the exact order statistic
whenever it lies in the kept range, i.e. within a factor 2^(MAX_BINS /
2^SUB_BITS) = 2^32 of the maximum; the minimum and maximum are exact.

The q-quantile of n values is the order statistic of rank floor(q*(n-1))
(0-based; "lower" in numpy's terms), reported as its bucket's representative,
clamped to [min, max] (ranks 0 and n-1 are the exact minimum and maximum).
Two sketches merge by adding buckets; the merge of sketches of two streams
equals the sketch of their concatenation while no bucket folds.

``native/analyze_flows.c`` keeps the same buckets (``sketch_add``); the
Python ``SketchBuilder`` is its reference, and the tests prove them equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: Mantissa bits per octave: 16 buckets per power of two.
SUB_BITS = 4
_SUB = 1 << SUB_BITS
#: Relative error of every reported quantile within the kept range (1/33, 3.0 %).
RELATIVE_ERROR = 1 / (2 * _SUB + 1)
#: Buckets kept per sketch (32 octaves: 1 ns .. 4.3 s at full accuracy).
MAX_BINS = 512
#: Bytes of one sketch at most: MAX_BINS 8-byte counts and a 40-byte header
#: (``sketch_t`` in C; its bucket array grows as needed, so most are far smaller).
MAX_SKETCH_BYTES = MAX_BINS * 8 + 40


def bucket_index(value_ns: int) -> int:
    """The bucket of a value >= 0 (negative values count as 0)."""
    v = max(0, value_ns)
    if v < _SUB:
        return v
    e = v.bit_length() - 1
    return (e - SUB_BITS + 1) * _SUB + ((v >> (e - SUB_BITS)) - _SUB)


def bucket_bounds(index: int) -> tuple[int, int]:
    """The smallest and largest integer of a bucket."""
    if index < _SUB:
        return index, index
    g, j = divmod(index, _SUB)
    shift = g - 1
    lo = (_SUB + j) << shift
    return lo, lo + (1 << shift) - 1


def bucket_value(index: int) -> float:
    """The representative of a bucket: within RELATIVE_ERROR of each of its integers."""
    lo, top = bucket_bounds(index)
    return lo if lo == top else 2.0 * lo * top / (lo + top)


@dataclass(frozen=True, slots=True)
class LatencySketch:
    """A finished sketch: counts of buckets ``lo_index`` .. ``lo_index + len(bins) - 1``."""

    lo_index: int
    bins: npt.NDArray[np.int64]
    count: int
    min_ns: int
    max_ns: int

    def quantile_ns(self, q: float) -> float:
        """The q-quantile (0 <= q <= 1) as described in the module docstring."""
        if self.count == 0:
            raise ValueError("quantile of an empty sketch")
        rank = round(q * 1_000_000) * (self.count - 1) // 1_000_000  # exact for 0.99
        if rank == 0:
            return float(self.min_ns)
        if rank == self.count - 1:
            return float(self.max_ns)
        b = int(np.searchsorted(np.cumsum(self.bins), rank, side="right"))
        v = bucket_value(self.lo_index + b)
        return float(min(max(v, self.min_ns), self.max_ns))

    def summary_s(self) -> dict[str, float | int]:
        """{count, min, p50, p90, p99, max} in seconds."""
        return {"count": self.count, "min": self.min_ns / 1e9,
                "p50": self.quantile_ns(0.50) / 1e9, "p90": self.quantile_ns(0.90) / 1e9,
                "p99": self.quantile_ns(0.99) / 1e9, "max": self.max_ns / 1e9}

    def same(self, other: LatencySketch) -> bool:
        return (self.lo_index, self.count, self.min_ns, self.max_ns) == (
            other.lo_index, other.count, other.min_ns, other.max_ns) and \
            np.array_equal(self.bins, other.bins)

    def merge(self, other: LatencySketch) -> LatencySketch:
        """The sketch of both streams (folding the lowest buckets beyond MAX_BINS)."""
        if self.count == 0:
            return other
        if other.count == 0:
            return self
        lo = min(self.lo_index, other.lo_index)
        hi = max(self.lo_index + len(self.bins), other.lo_index + len(other.bins)) - 1
        bins = np.zeros(hi - lo + 1, np.int64)
        for s in (self, other):
            bins[s.lo_index - lo:s.lo_index - lo + len(s.bins)] += s.bins
        if len(bins) > MAX_BINS:
            cut = len(bins) - MAX_BINS
            bins[cut] += bins[:cut].sum()
            bins = bins[cut:]
            lo += cut
        return LatencySketch(lo, bins, self.count + other.count,
                             min(self.min_ns, other.min_ns), max(self.max_ns, other.max_ns))


class SketchBuilder:
    """Adds values one at a time (the reference of ``sketch_add`` in C)."""

    __slots__ = ("bins", "count", "lo", "max_ns", "min_ns")

    def __init__(self) -> None:
        self.bins: list[int] = []
        self.lo = 0
        self.count = 0
        self.min_ns = 0
        self.max_ns = 0

    def add(self, value_ns: int) -> None:
        i = bucket_index(value_ns)
        if self.count == 0:
            self.min_ns = self.max_ns = value_ns
        else:
            self.min_ns = min(self.min_ns, value_ns)
            self.max_ns = max(self.max_ns, value_ns)
        self.count += 1
        if not self.bins:
            self.lo = i
            self.bins = [1]
            return
        hi = self.lo + len(self.bins) - 1
        if i > hi:
            self.bins.extend([0] * (i - hi))
            if len(self.bins) > MAX_BINS:
                cut = len(self.bins) - MAX_BINS
                folded = sum(self.bins[:cut + 1])
                self.bins = [folded, *self.bins[cut + 1:]]
                self.lo += cut
        elif i < self.lo:
            new_lo = max(i, hi - MAX_BINS + 1)
            self.bins[:0] = [0] * (self.lo - new_lo)
            self.lo = new_lo
            i = max(i, new_lo)
        self.bins[i - self.lo] += 1

    def finish(self) -> LatencySketch:
        return LatencySketch(self.lo, np.array(self.bins, np.int64), self.count,
                             self.min_ns, self.max_ns)


def sketch_of(values_ns: list[int]) -> LatencySketch:
    b = SketchBuilder()
    for v in values_ns:
        b.add(v)
    return b.finish()


__all__ = ["MAX_BINS", "MAX_SKETCH_BYTES", "RELATIVE_ERROR", "SUB_BITS", "LatencySketch",
           "SketchBuilder", "bucket_bounds", "bucket_index", "bucket_value", "sketch_of"]
