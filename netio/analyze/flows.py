"""RoCE flows: counters, PSN analysis, messages, NAKs, ACK/READ latency, ECN, goodput.

A flow is one direction (src IP, dst IP, BTH dest QP) seen at one capture
point; it is paired with its reverse direction (the peer QP's packets back),
found from the responses: a reverse key is paired with the one flow between
the same two hosts in the other direction, or, when there are several, with
the one whose latest request PSN is closest (on the 24-bit circle) to the
latest response PSN.

PSNs (24-bit, IBTA §9.7.1) are unwrapped per flow into 64-bit sequence
numbers. For request packets (IBTA: sent by the requester), relative to the
highest PSN seen before:

- one ahead: in order; further ahead: a gap, the missing PSNs were lost
  upstream of the capture point (after a READ REQUEST of L bytes the next
  request may be up to ceil(L/256) PSNs ahead: the path MTU is unknown);
- at or behind: a retransmission; it is *out of order* when it fills a gap
  (first copy seen here), a *duplicate* when its PSN was already seen.

ACK latency: from the first copy of a request that asks for an ACK (AckReq,
not READ) to the first ACK/ATOMIC ACKNOWLEDGE of the paired direction whose
PSN covers it (NAKs do not count). READ latency: from a READ REQUEST to the
first READ RESPONSE (FIRST/ONLY) with its PSN. Percentiles use up to
``MAX_SAMPLES`` samples per flow (every k-th beyond).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from netio.analyze.columns import Flag, PacketColumns
from netio.analyze.ecn import CnpMatcher
from netio.analyze.extract import FlowIndex, opcode_tables

I64 = npt.NDArray[np.int64]
PSN_MOD = 1 << 24
PSN_MASK = PSN_MOD - 1
PSN_HALF = 1 << 23
#: Latency samples kept per flow for percentiles.
MAX_SAMPLES = 1 << 16
#: Open gaps remembered per flow (oldest forgotten first).
MAX_MISSING = 4096
#: Requests awaiting an ACK remembered per flow.
MAX_PENDING = 1 << 20

_T = opcode_tables()


def signed_psn_delta(a: I64, b: I64) -> I64:
    """a - b in 24-bit PSN space, in [-2^23, 2^23)."""
    return ((a - b + PSN_HALF) & PSN_MASK) - PSN_HALF


@dataclass(slots=True)
class _Samples:
    parts: list[I64] = field(default_factory=list)
    count: int = 0
    stride: int = 1

    def add(self, values: I64) -> None:
        if values.size == 0:
            return
        self.parts.append(values[:: self.stride] if self.stride > 1 else values)
        self.count += int(values.size)
        if sum(p.size for p in self.parts) > MAX_SAMPLES:
            merged = np.concatenate(self.parts)[::2]
            self.parts = [merged]
            self.stride *= 2

    def values(self) -> I64:
        return np.concatenate(self.parts) if self.parts else np.empty(0, dtype=np.int64)


def _circular(a: int, b: int) -> int:
    """Distance between two PSNs on the 24-bit circle."""
    d = (a - b) & PSN_MASK
    return min(d, PSN_MOD - d)


def summary_s(samples_ns: I64) -> dict[str, float | int] | None:
    if samples_ns.size == 0:
        return None
    a = samples_ns.astype(np.float64) / 1e9
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"count": int(samples_ns.size), "min": float(a.min()), "p50": float(p50),
            "p90": float(p90), "p99": float(p99), "max": float(a.max())}


class FlowAnalyzer:
    """Per-capture flow analysis over column chunks."""

    _COUNTERS = ("packets", "bytes", "payload", "ce", "ect", "fecn", "becn", "icrc_checked",
                 "icrc_bad", "requests", "gaps", "gap_packets", "dups", "ooo", "messages",
                 "goodput", "rnr", "cnps", "data_payload")
    _STATE = ("last_raw", "last_u", "max_u", "last_span", "dst_mac", "src_mac", "pcp",
              "first_ts", "last_ts")

    def __init__(self, capture: str, origin_ns: int, interval_ns: int, cnp_min_gap_ns: int,
                 *, use_native: bool | None = None) -> None:
        self.capture = capture
        self.origin_ns = origin_ns
        self.interval_ns = interval_ns
        self.index = FlowIndex(use_native=use_native)
        self.n = 0
        self.c: dict[str, I64] = {k: np.zeros(0, np.int64) for k in
                                  (*self._COUNTERS, *self._STATE)}
        self.have = np.zeros(0, np.bool_)
        self.opcodes = np.zeros((0, 256), np.int64)
        self.naks = np.zeros((0, 32), np.int64)
        self.rnr_codes: dict[int, set[int]] = {}
        self.missing: dict[int, list[list[int]]] = {}
        self.pending_ack: dict[int, tuple[I64, I64]] = {}
        self.pending_read: dict[int, dict[int, int]] = {}
        self.ack_lat: dict[int, _Samples] = {}
        self.read_lat: dict[int, _Samples] = {}
        self.pair: dict[int, int] = {}
        self.by_hosts: dict[tuple[int, int], list[int]] = {}
        self.cnp = CnpMatcher(cnp_min_gap_ns)
        self.series: list[tuple[I64, I64]] = []  # (fid << 32 | bin, bytes)
        self.ce_series: list[I64] = []
        self.cnp_series: list[I64] = []

    # ------------------------------------------------------------------ state
    def _grow(self, n: int) -> None:
        if n <= self.n:
            return
        extra = n - self.n
        for k in self._COUNTERS:
            self.c[k] = np.concatenate((self.c[k], np.zeros(extra, np.int64)))
        for k in self._STATE:
            self.c[k] = np.concatenate((self.c[k], np.zeros(extra, np.int64)))
        self.have = np.concatenate((self.have, np.zeros(extra, np.bool_)))
        self.opcodes = np.concatenate((self.opcodes, np.zeros((extra, 256), np.int64)))
        self.naks = np.concatenate((self.naks, np.zeros((extra, 32), np.int64)))
        for fid in range(self.n, n):
            src, dst, _ = self.index.keys[fid]
            self.by_hosts.setdefault((src, dst), []).append(fid)
        self.n = n

    def _add(self, name: str, f: npt.NDArray[Any], weights: npt.NDArray[Any] | None = None
             ) -> None:
        if f.size:
            b = np.bincount(f, weights=weights, minlength=self.n)
            self.c[name] += b.astype(np.int64) if weights is not None else b

    # ------------------------------------------------------------------- feed
    def feed(self, cols: PacketColumns) -> None:
        fid_all = self.index.ids(cols)
        self._grow(len(self.index))
        rows = np.nonzero(fid_all >= 0)[0]
        if rows.size == 0:
            return
        if rows.size == len(cols):  # all RoCE: views instead of gathers
            rows_sel: npt.NDArray[np.intp] | slice = slice(None)
        else:
            rows_sel = rows
        f = fid_all[rows_sel]
        op = cols.opcode[rows_sel]
        ts = cols.ts_ns[rows_sel]
        flags = cols.flags[rows_sel]
        ecn = cols.ecn[rows_sel]
        pay = cols.payload_bytes[rows_sel].astype(np.int64)
        c = self.c
        self._add("packets", f)
        self._add("bytes", f, cols.frame_bytes[rows_sel])
        self._add("payload", f, pay)
        for name, mask in (("ce", ecn == 3), ("ect", (ecn == 1) | (ecn == 2)),
                           ("fecn", (flags & Flag.FECN) != 0),
                           ("becn", (flags & Flag.BECN) != 0)):
            if mask.any():
                self._add(name, f[mask])
        checked = (flags & Flag.ICRC_CHECKED) != 0
        if checked.any():
            self._add("icrc_checked", f[checked])
            self._add("icrc_bad", f[checked & ((flags & Flag.ICRC_OK) == 0)])
        self.opcodes += np.bincount(f.astype(np.int64) * 256 + op,
                                    minlength=self.n * 256).reshape(self.n, 256)
        # Last (and first) row of each flow in this chunk, found with one scatter each.
        pos = np.arange(f.size)
        last = np.full(self.n, -1, np.int64)
        last[f] = pos
        present = np.nonzero(last >= 0)[0]
        li = rows[last[present]]
        c["dst_mac"][present] = cols.dst_mac[li].astype(np.int64)
        c["src_mac"][present] = cols.src_mac[li].astype(np.int64)
        c["pcp"][present] = cols.pcp[li]
        c["last_ts"][present] = cols.ts_ns[li]
        fresh = present[c["first_ts"][present] == 0]
        if fresh.size:
            first = np.full(self.n, -1, np.int64)
            first[f[::-1]] = pos[::-1]
            c["first_ts"][fresh] = cols.ts_ns[rows[first[fresh]]]
        is_req = _T["request"][op]
        data_w = np.zeros(rows.size, np.int64)
        if np.any(is_req):
            dup = self._requests(cols, rows[is_req], f[is_req])
            data_w[np.nonzero(is_req)[0]] = np.where(dup, 0, pay[is_req])
        resp = _T["read_response_first"][op] | (_T["response"][op] & ~_T["ack"][op])
        data_w[resp] = pay[resp]
        self._add("data_payload", f, data_w)
        self._pairing(f, op, cols.psn[rows].astype(np.int64))
        self._responses(cols, rows, f, op, ts)
        # ECN / CNP.
        ce_rows = np.nonzero(ecn == 3)[0]
        cnp_rows = np.nonzero(_T["cnp"][op])[0]
        self._add("cnps", f[cnp_rows])
        ce: dict[int, I64] = {}
        cn: dict[int, I64] = {}
        for src, out in ((ce_rows, ce), (cnp_rows, cn)):
            if src.size:
                fs = f[src]
                order = np.argsort(fs, kind="stable")
                fs = fs[order]
                tss = ts[src][order]
                cuts = np.nonzero(np.diff(fs))[0] + 1
                for part_f, part_t in zip(np.split(fs, cuts), np.split(tss, cuts), strict=True):
                    out[int(part_f[0])] = part_t
        if ce or cn:
            self.cnp.feed(ce, cn, self.pair)
        # Time series (bins from the analysis origin).
        bins = (ts - self.origin_ns) // self.interval_ns
        keep = data_w > 0
        if np.any(keep):
            key = (f[keep].astype(np.int64) << 32) | bins[keep]
            u, inv = np.unique(key, return_inverse=True)
            self.series.append((u, np.bincount(inv, weights=data_w[keep]).astype(np.int64)))
        if ce_rows.size:
            self.ce_series.append(np.bincount(bins[ce_rows]))
        if cnp_rows.size:
            self.cnp_series.append(np.bincount(bins[cnp_rows]))

    def _requests(self, cols: PacketColumns, idx0: npt.NDArray[np.intp],
                  f0: npt.NDArray[np.int32]) -> npt.NDArray[np.bool_]:
        """PSN analysis of request packets; returns the duplicate mask (in idx0 order)."""
        c = self.c
        sort_key = f0.astype(np.uint16) if self.n < 65536 else f0
        order = np.argsort(sort_key, kind="stable")
        idx = idx0[order]
        fs = f0[order].astype(np.int64)
        m = idx.size
        psn = cols.psn[idx].astype(np.int64)
        ts = cols.ts_ns[idx]
        op = cols.opcode[idx]
        seg_start = np.ones(m, np.bool_)
        seg_start[1:] = fs[1:] != fs[:-1]
        segs = np.nonzero(seg_start)[0]
        seg_id = np.cumsum(seg_start) - 1
        seg_f = fs[segs]
        have = self.have[seg_f]
        prev_raw = np.empty(m, np.int64)
        prev_raw[1:] = psn[:-1]
        prev_raw[segs] = np.where(have, c["last_raw"][seg_f], psn[segs])
        delta = signed_psn_delta(psn, prev_raw)
        base = np.where(have, c["last_u"][seg_f], psn[segs])
        cs = np.cumsum(delta)
        cs_before = cs[segs] - delta[segs]
        psn_u = base[seg_id] + cs - cs_before[seg_id]
        carry_max = np.where(have, c["max_u"][seg_f], psn[segs] - 1)
        big = np.int64(1 << 42)
        v = (psn_u - base[seg_id]) + seg_id * big
        incl = np.maximum.accumulate(v) - seg_id * big + base[seg_id]
        prev_max = np.empty(m, np.int64)
        prev_max[1:] = incl[:-1]
        prev_max[segs] = carry_max
        prev_max = np.maximum(prev_max, carry_max[seg_id])
        is_read = _T["read_request"][op]
        span = np.where(is_read, np.maximum(1, -(-cols.reth_len[idx].astype(np.int64) // 256)),
                        1)
        tol = np.empty(m, np.int64)
        tol[1:] = span[:-1]
        tol[segs] = np.where(have, c["last_span"][seg_f], 1)
        ahead = psn_u - prev_max
        gap = ahead > tol
        behind = ahead <= 0
        dup = np.zeros(m, np.bool_)
        ooo = np.zeros(m, np.bool_)
        for i in np.nonzero(gap | behind)[0].tolist():
            fid = int(fs[i])
            miss = self.missing.setdefault(fid, [])
            if gap[i]:
                miss.append([int(prev_max[i] + tol[i]), int(psn_u[i] - 1)])
                if len(miss) > MAX_MISSING:
                    del miss[0]
                continue
            p = int(psn_u[i])
            for k, (lo, hi) in enumerate(miss):
                if lo <= p <= hi:
                    ooo[i] = True
                    repl = [r for r in ([lo, p - 1], [p + 1, hi]) if r[0] <= r[1]]
                    miss[k:k + 1] = repl
                    break
            else:
                dup[i] = True
        self._add("requests", fs)
        self._add("gaps", fs[gap])
        self._add("gap_packets", fs[gap], (ahead - tol)[gap])
        self._add("dups", fs[dup])
        self._add("ooo", fs[ooo])
        ends = _T["ends_message"][op]
        self._add("messages", fs[ends & ~dup])
        pay = cols.payload_bytes[idx].astype(np.int64)
        self._add("goodput", fs, np.where(dup, 0, pay))
        seg_end = np.concatenate((segs[1:] - 1, [m - 1]))
        c["last_raw"][seg_f] = psn[seg_end]
        c["last_u"][seg_f] = psn_u[seg_end]
        c["max_u"][seg_f] = np.maximum(carry_max, incl[seg_end])
        c["last_span"][seg_f] = span[seg_end]
        self.have[seg_f] = True
        # Requests awaiting an ACK / a READ response (first copies only).
        first_copy = ~dup
        ackreq = ((cols.flags[idx] & Flag.ACK_REQ) != 0) & first_copy & ~is_read
        if np.any(ackreq):
            sel = np.nonzero(ackreq)[0]
            cuts = np.nonzero(np.diff(fs[sel]))[0] + 1
            for part in np.split(sel, cuts):
                fid = int(fs[part[0]])
                pu, pt = self.pending_ack.get(fid, (np.empty(0, np.int64), np.empty(0, np.int64)))
                pu = np.concatenate((pu, psn_u[part]))[-MAX_PENDING:]
                pt = np.concatenate((pt, ts[part]))[-MAX_PENDING:]
                self.pending_ack[fid] = (pu, pt)
        reads = np.nonzero(is_read & first_copy)[0]
        for i in reads.tolist():
            self.pending_read.setdefault(int(fs[i]), {})[int(psn[i])] = int(ts[i])
        out = np.empty(m, np.bool_)
        out[order] = dup
        return out

    def _pairing(self, f: npt.NDArray[np.int32], op: npt.NDArray[np.uint8], psn: I64) -> None:
        """Pair keys that carry responses or CNPs with their reverse direction."""
        cand_rows = np.nonzero(_T["response"][op] | _T["cnp"][op])[0]
        if cand_rows.size == 0:
            return
        fs = f[cand_rows]
        for fid in np.unique(fs).tolist():
            if fid in self.pair:
                continue
            src, dst, _ = self.index.keys[fid]
            cands = [k for k in self.by_hosts.get((dst, src), []) if k not in self.pair
                     and k != fid]
            if not cands:
                continue
            if len(cands) > 1:
                resp = cand_rows[(fs == fid) & _T["response"][op[cand_rows]]]
                have = [k for k in cands if self.have[k]]
                if resp.size == 0 or not have:
                    continue
                p = int(psn[resp[-1]])
                cands = [min(have, key=lambda k: _circular(int(self.c["last_raw"][k]), p))]
            other = cands[0]
            self.pair[fid] = other
            self.pair[other] = fid

    def _responses(self, cols: PacketColumns, rows: npt.NDArray[np.intp],
                   f: npt.NDArray[np.int32], op: npt.NDArray[np.uint8], ts: I64) -> None:
        aeth = np.nonzero(_T["has_aeth"][op])[0]
        if aeth.size == 0:
            return
        syn = cols.syndrome[rows[aeth]]
        typ = (syn >> 5) & 3
        nak = typ == 3
        if np.any(nak):
            self.naks += np.bincount(f[aeth][nak].astype(np.int64) * 32 + (syn[nak] & 31),
                                     minlength=self.n * 32).reshape(self.n, 32)
        rnr = np.nonzero(typ == 1)[0]
        if rnr.size:
            self._add("rnr", f[aeth][rnr])
            for fid, code in zip(f[aeth][rnr].tolist(), (syn[rnr] & 31).tolist(), strict=True):
                self.rnr_codes.setdefault(fid, set()).add(code)
        # ACK latency.
        acks = aeth[(typ == 0) & (_T["ack"][op[aeth]])]
        if acks.size and self.pending_ack:
            fa = f[acks]
            for rid in np.unique(fa).tolist():
                fwd = self.pair.get(rid)
                if fwd is None or fwd not in self.pending_ack:
                    continue
                sel = acks[fa == rid]
                a_ts = ts[sel]
                mu = int(self.c["max_u"][fwd])
                a_u = mu + signed_psn_delta(cols.psn[rows[sel]].astype(np.int64),
                                            np.full(sel.size, mu & PSN_MASK, np.int64))
                cm = np.maximum.accumulate(a_u)
                pu, pt = self.pending_ack[fwd]
                j = np.maximum(np.searchsorted(a_ts, pt, side="left"),
                               np.searchsorted(cm, pu, side="left"))
                hit = j < a_ts.size
                if np.any(hit):
                    self.ack_lat.setdefault(fwd, _Samples()).add(a_ts[j[hit]] - pt[hit])
                self.pending_ack[fwd] = (pu[~hit], pt[~hit])
        # READ latency.
        first = aeth[_T["read_response_first"][op[aeth]]]
        for i in first.tolist():
            fwd = self.pair.get(int(f[i]))
            if fwd is None:
                continue
            pend = self.pending_read.get(fwd)
            if not pend:
                continue
            t_req = pend.pop(int(cols.psn[rows[i]]), None)
            if t_req is not None and t_req <= ts[i]:
                self.read_lat.setdefault(fwd, _Samples()).add(np.array([ts[i] - t_req]))

    # ----------------------------------------------------------------- finish
    def goodput_series(self) -> dict[int, tuple[I64, I64]]:
        """flow id → (bin indices, bytes per bin)."""
        if not self.series:
            return {}
        keys = np.concatenate([k for k, _ in self.series])
        vals = np.concatenate([v for _, v in self.series])
        u, inv = np.unique(keys, return_inverse=True)
        sums = np.bincount(inv, weights=vals).astype(np.int64)
        fids = u >> 32
        bins = u & 0xFFFFFFFF
        out: dict[int, tuple[I64, I64]] = {}
        cuts = np.nonzero(np.diff(fids))[0] + 1
        for fp, bp, sp in zip(np.split(fids, cuts), np.split(bins, cuts), np.split(sums, cuts),
                              strict=True):
            if fp.size:
                out[int(fp[0])] = (bp, sp)
        return out

    @staticmethod
    def _sum_series(parts: list[I64]) -> I64:
        if not parts:
            return np.zeros(0, np.int64)
        n = max(p.size for p in parts)
        out = np.zeros(n, np.int64)
        for p in parts:
            out[: p.size] += p
        return out

    def ce_cnp_series(self) -> tuple[I64, I64]:
        return self._sum_series(self.ce_series), self._sum_series(self.cnp_series)
