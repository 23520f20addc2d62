"""The latency sketch keeps the relative error it states, merges, and folds as documented."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from netio.analyze.sketch import (
    MAX_BINS,
    RELATIVE_ERROR,
    LatencySketch,
    bucket_bounds,
    bucket_index,
    bucket_value,
    sketch_of,
)

#: 16 buckets per octave: a bucket [lo, top] has top <= lo * (1 + 1/16); its
#: representative r = 2*lo*top/(lo+top) is then within (top-lo)/(top+lo) <= 1/33
#: of each of its values.
BOUND = 1 / 33


def test_the_stated_bound() -> None:
    assert math.isclose(RELATIVE_ERROR, BOUND)


def test_every_bucket_keeps_its_values_within_the_bound() -> None:
    previous_top = -1
    for i in range(16 * 45):
        lo, top = bucket_bounds(i)
        assert lo == previous_top + 1  # buckets tile the integers, in order
        previous_top = top
        assert bucket_index(lo) == i and bucket_index(top) == i
        r = bucket_value(i)
        for v in (lo, top):
            assert abs(r - v) <= BOUND * v


def exact_quantile(values: list[int], q: float) -> int:
    """Order statistic of rank floor(q*(n-1)), 0-based (q in whole hundredths)."""
    return sorted(values)[round(q * 100) * (len(values) - 1) // 100]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1 << 10, 1 << 41), min_size=1, max_size=400))  # 31 octaves
def test_quantiles_within_the_relative_error(values: list[int]) -> None:
    sk = sketch_of(values)
    assert (sk.count, sk.min_ns, sk.max_ns) == (len(values), min(values), max(values))
    for q in (0.0, 0.5, 0.9, 0.99, 1.0):
        want = exact_quantile(values, q)
        assert abs(sk.quantile_ns(q) - want) <= BOUND * want, q


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 1 << 30), max_size=200),
       st.lists(st.integers(0, 1 << 30), max_size=200))
def test_merge_equals_the_sketch_of_both_streams(a: list[int], b: list[int]) -> None:
    if not a or not b:
        return
    merged = sketch_of(a).merge(sketch_of(b))
    assert merged.same(sketch_of(a + b))
    assert merged.same(sketch_of(b).merge(sketch_of(a)))


def test_wide_ranges_fold_the_lowest_buckets_only() -> None:
    # 1 ns .. 2^60 ns: 60 octaves, more than the 32 kept. The top quantiles stay
    # within the bound; the lowest fold into the lowest kept bucket.
    rng = np.random.default_rng(7)
    values = [int(2 ** x) for x in rng.uniform(0, 60, 5000)]
    sk = sketch_of(values)
    assert len(sk.bins) == MAX_BINS and int(sk.bins.sum()) == len(values)
    for q in (0.9, 0.99, 1.0):
        want = exact_quantile(values, q)
        assert abs(sk.quantile_ns(q) - want) <= BOUND * want
    assert sk.quantile_ns(0.0) == min(values)  # clamped to the exact minimum
    assert sk.quantile_ns(0.01) >= exact_quantile(values, 0.01)  # folded: over, never under
    folded = sketch_of(values[:2500]).merge(sketch_of(values[2500:]))
    assert len(folded.bins) == MAX_BINS and folded.count == len(values)


def test_a_sketch_is_small() -> None:
    sk = sketch_of([1000 + i for i in range(100_000)])
    assert sk.bins.nbytes <= 8 * 16 * 8  # 100k samples over < 8 octaves: < 1 KiB
    assert isinstance(sk, LatencySketch)
