"""Fairness (Jain's index) and incast detection over fixed time windows.

Per window, the flows sharing a destination (IP) or an egress (capture point
and next-hop MAC) that carried data get throughputs x_i; Jain's index is
(Σx)² / (n·Σx²): 1 when all are equal, 1/n when one takes everything. Windows
with fewer than two active flows are skipped. An incast is a run of windows in
which at least ``incast_senders`` distinct source IPs send data to one
destination.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def jain(x: npt.NDArray[np.float64]) -> float:
    s = float(x.sum())
    q = float((x * x).sum())
    return s * s / (x.size * q) if q > 0 else 1.0


@dataclass(frozen=True, slots=True)
class FairnessResult:
    group: str  # "destination" or "egress"
    key: str
    flows: int
    windows: int
    jain_min: float
    jain_mean: float
    worst_window_start_ns: int


@dataclass(frozen=True, slots=True)
class Incast:
    destination: str
    start_ns: int
    end_ns: int
    max_senders: int


def fairness(groups: Mapping[str, list[int]], series: Mapping[int, tuple[I64, I64]],
             group_kind: str, origin_ns: int, interval_ns: int) -> list[FairnessResult]:
    out = []
    for key, fids in groups.items():
        present = [f for f in fids if f in series]
        if len(present) < 2:
            continue
        bins = np.unique(np.concatenate([series[f][0] for f in present]))
        mat = np.zeros((len(present), bins.size))
        for r, f in enumerate(present):
            b, v = series[f]
            mat[r, np.searchsorted(bins, b)] = v
        vals = []
        starts = []
        for col in range(bins.size):
            x = mat[:, col]
            x = x[x > 0]
            if x.size >= 2:
                vals.append(jain(x))
                starts.append(int(bins[col]))
        if not vals:
            continue
        worst = int(np.argmin(vals))
        out.append(FairnessResult(group_kind, key, len(present), len(vals), float(min(vals)),
                                  float(np.mean(vals)),
                                  origin_ns + starts[worst] * interval_ns))
    return out


def fairness_bulk(groups: Mapping[str, list[int]], fids: I64, bins: I64, vals: I64,
                  group_kind: str, origin_ns: int, interval_ns: int) -> list[FairnessResult]:
    """``fairness`` over every group at once, from the data series as sorted columns
    (flow, interval, bytes > 0): per (group, interval) the count n, sum S and sum of
    squares Q of the flows' bytes give Jain's index S^2 / (n Q) where n >= 2. Same
    results as ``fairness`` (to the last bits of the floating-point sums)."""
    if not groups or fids.size == 0:
        return []
    names = list(groups)
    n_flows = int(max(fids.max(), max(max(g) for g in groups.values()))) + 1
    gid = np.full(n_flows, -1, np.int64)
    for g, members in enumerate(groups.values()):
        gid[members] = g
    eg = gid[fids]
    keep = eg >= 0
    eg, eb, ev = eg[keep], bins[keep], vals[keep].astype(np.float64)
    if eg.size == 0:
        return []
    present = np.bincount(gid[np.unique(fids[keep])], minlength=len(names))
    order = np.lexsort((eb, eg))
    eg, eb, ev = eg[order], eb[order], ev[order]
    new = np.ones(eg.size, np.bool_)
    new[1:] = (eg[1:] != eg[:-1]) | (eb[1:] != eb[:-1])
    at = np.nonzero(new)[0]
    wg, wb = eg[at], eb[at]
    n = np.diff(np.append(at, eg.size))
    ssum = np.add.reduceat(ev, at)
    qsum = np.add.reduceat(ev * ev, at)
    ok = (n >= 2) & (present[wg] >= 2)
    wg, wb, jain_w = wg[ok], wb[ok], ssum[ok] ** 2 / (n[ok] * qsum[ok])
    out = []
    cuts = np.nonzero(np.diff(wg))[0] + 1
    for g_arr, b_arr, j_arr in zip(np.split(wg, cuts), np.split(wb, cuts),
                                   np.split(jain_w, cuts), strict=True):
        if g_arr.size == 0:
            continue
        g = int(g_arr[0])
        worst = int(np.argmin(j_arr))
        out.append((g, FairnessResult(group_kind, names[g], int(present[g]), int(j_arr.size),
                                      float(j_arr[worst]), float(np.mean(j_arr)),
                                      origin_ns + int(b_arr[worst]) * interval_ns)))
    return [r for _, r in sorted(out, key=lambda gr: gr[0])]


def incasts(by_dst: Mapping[str, list[tuple[int, Hashable]]], fids: I64, bins: I64,
            threshold: int, origin_ns: int, interval_ns: int) -> list[Incast]:
    """``by_dst``: destination IP -> [(flow id, source IP)]; ``fids``/``bins``: the
    intervals in which each flow carried data (ascending flow ids). An incast is a run
    of consecutive intervals in each of which at least ``threshold`` distinct sources
    send to the destination; the runs in destination then time order. Counted for
    every (destination, interval) at once: the (destination, interval, source) triples
    of the members' intervals, sorted, without repeats."""
    m_fid: list[int] = []
    m_dst: list[int] = []
    m_src: list[int] = []
    src_ids: dict[Hashable, int] = {}
    for d, members in enumerate(by_dst.values()):
        for fid, src in members:
            m_fid.append(fid)
            m_dst.append(d)
            m_src.append(src_ids.setdefault(src, len(src_ids)))
    if not m_fid or fids.size == 0:
        return []
    want = np.array(m_fid, np.int64)
    first = np.searchsorted(fids, want, side="left")
    lens = np.searchsorted(fids, want, side="right") - first
    offs = np.cumsum(lens) - lens
    rows = np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(offs - first, lens)
    e_dst = np.repeat(np.array(m_dst, np.int64), lens)
    e_src = np.repeat(np.array(m_src, np.int64), lens)
    e_bin = bins[rows]
    if e_bin.size == 0:
        return []
    order = np.lexsort((e_src, e_bin, e_dst))
    e_dst, e_bin, e_src = e_dst[order], e_bin[order], e_src[order]
    distinct = np.ones(e_dst.size, np.bool_)
    distinct[1:] = (e_dst[1:] != e_dst[:-1]) | (e_bin[1:] != e_bin[:-1]) | \
        (e_src[1:] != e_src[:-1])
    e_dst, e_bin = e_dst[distinct], e_bin[distinct]
    window = np.ones(e_dst.size, np.bool_)
    window[1:] = (e_dst[1:] != e_dst[:-1]) | (e_bin[1:] != e_bin[:-1])
    at = np.nonzero(window)[0]
    w_dst, w_bin = e_dst[at], e_bin[at]
    senders = np.diff(np.append(at, e_dst.size))
    hot = senders >= threshold
    w_dst, w_bin, senders = w_dst[hot], w_bin[hot], senders[hot]
    if w_dst.size == 0:
        return []
    starts = np.ones(w_dst.size, np.bool_)
    starts[1:] = (w_dst[1:] != w_dst[:-1]) | (w_bin[1:] != w_bin[:-1] + 1)
    run_at = np.nonzero(starts)[0]
    run_end = np.append(run_at[1:], w_dst.size) - 1
    peak = np.maximum.reduceat(senders, run_at)
    names = list(by_dst)
    return [Incast(names[d], origin_ns + b0 * interval_ns, origin_ns + (b1 + 1) * interval_ns,
                   p)
            for d, b0, b1, p in zip(w_dst[run_at].tolist(), w_bin[run_at].tolist(),
                                    w_bin[run_end].tolist(), peak.tolist(), strict=True)]
