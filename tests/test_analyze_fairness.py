"""Fairness: the bulk (columnar) computation gives what the per-group definition gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from netio.analyze.fairness import fairness, fairness_bulk, jain
from netio.analyze.flows import _series_from


def test_jain_index_definition() -> None:
    # Jain, Chiu, Hawe (1984): (sum x)^2 / (n sum x^2); 1 for equal shares, 1/n for one.
    assert jain(np.array([5.0, 5.0, 5.0])) == 1.0
    assert jain(np.array([9.0, 0.0, 0.0])) == 1 / 3
    assert abs(jain(np.array([1.0, 3.0])) - 16 / 20) < 1e-15


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 12), st.integers(1, 10_000)),
                max_size=120),
       st.lists(st.integers(-1, 3), min_size=21, max_size=21))
def test_bulk_equals_the_definition(triples: list[tuple[int, int, int]],
                                    group_of: list[int]) -> None:
    series = _series_from(np.array(triples, np.int64).reshape(-1, 3))
    groups: dict[str, list[int]] = {}
    for fid, g in enumerate(group_of):
        if g >= 0:
            groups.setdefault(f"10.0.0.{g}", []).append(fid)
    want = fairness(groups, series, "destination", 1000, 10)
    got = fairness_bulk(groups, series.fids, series.bins, series.vals, "destination", 1000, 10)
    assert [(r.key, r.flows, r.windows, r.worst_window_start_ns) for r in got] == \
        [(r.key, r.flows, r.windows, r.worst_window_start_ns) for r in want]
    for a, b in zip(got, want, strict=True):
        assert abs(a.jain_min - b.jain_min) <= 1e-12 and abs(a.jain_mean - b.jain_mean) <= 1e-12
