"""RoCE flows: counters, PSN analysis, messages, NAKs, ACK/READ latency, ECN, goodput.

Two implementations of one set of per-packet rules: ``FlowReference`` (plain
sequential Python, the specification below and the oracle of the tests) and
``NativeFlows`` (``native/analyze_flows.c``, fused with frame extraction so a
capture is analysed in one C pass per chunk). Both yield ``FlowResults``;
``tests/test_analyze_flows.py`` proves them identical.

A flow is one direction (src IP, dst IP, BTH dest QP; IPv6 addresses in
full) seen at one capture point. Flows are numbered in order of first
appearance. Each RoCE packet, in capture order, updates its flow:

- Counters: packets, wire bytes, RoCE payload bytes, ECN (CE, ECT), BTH
  FECN/BECN, ICRC checked/bad, packets per opcode; the last packet's MACs and
  PCP; first and last timestamps.
- Requests (RC/UC opcodes that are not responses), IBTA §9.7.1: the 24-bit
  PSN is unwrapped against the previous request's PSN. Relative to the highest
  request PSN seen before, a packet one ahead is in order; further ahead is a
  gap (the missing PSNs were lost upstream of the capture point; after a READ
  REQUEST of L bytes the next request may be up to ceil(L/256) PSNs ahead, the
  path MTU being unknown); at or behind is a retransmission, *out of order*
  when it fills a remembered gap (first copy seen here), a *duplicate*
  otherwise. Messages (LAST/ONLY) and goodput count first copies only.
- READ RESPONSEs on the responder's key: the same unwrapping over the
  response PSNs; a MIDDLE/LAST more than one ahead is a gap (a FIRST/ONLY
  may start anywhere ahead: the requests in between used those PSNs); at or
  behind is out of order (fills a gap) or a duplicate (retransmitted).
- Pairing: a key that carries a response or a CNP is paired with the one
  unpaired flow between the same two hosts in the other direction; with
  several, a response pairs it with the one whose latest request PSN is
  closest (on the 24-bit circle) to the response's PSN. Pairs are final.
- AETH: NAKs per code and RNR NAKs (with their timer codes) count on the
  responder's key.
- ACK latency: first copies of AckReq requests (not READ) wait, ordered by
  PSN; an ACK (syndrome ACK, opcode ACKNOWLEDGE) of the paired key, its PSN
  unwrapped next to the forward flow's highest, acknowledges every waiting
  request with PSN at or below it captured no later than the ACK.
- READ latency: a first-copy READ REQUEST waits under its PSN; a READ
  RESPONSE FIRST/ONLY of the paired key with that PSN ends the newest wait.
- ECN/CNP (Annex A17.9): a CE mark opens an unanswered mark on its flow
  unless one is open; a CNP (on the key of the throttled flow's reverse
  direction) answers the paired flow's open mark (reaction delay) and counts
  a DCQCN violation when it follows the previous CNP on its key by less than
  ``cnp_min_gap_ns``.
- Data bytes per interval (for throughput, fairness, incast): payload of
  first-copy requests and of responses that are not ACKs or duplicates;
  interval = (ts - origin) // interval_ns, from 0.

Bounds (memory O(flows)): ``MAX_MISSING`` open gaps per flow (the lowest
forgotten first), ``MAX_PENDING`` waiting requests per flow (the lowest PSN /
oldest forgotten first); latencies go into a ``LatencySketch`` per flow and
kind (``netio.analyze.sketch``: at most ``MAX_SKETCH_BYTES`` each, quantiles
within ``RELATIVE_ERROR``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntFlag
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from netio import native
from netio.analyze.columns import Flag, FlowKey, Kind, PacketColumns, flow_keys, key_of_words
from netio.analyze.options import FlowFilter
from netio.analyze.sketch import LatencySketch, SketchBuilder
from netio.wire.bth import OPCODE_TABLE, ExtHeader, Operation, Position, Transport

I64 = npt.NDArray[np.int64]
PSN_MOD = 1 << 24
PSN_MASK = PSN_MOD - 1
PSN_HALF = 1 << 23
#: Open gaps remembered per flow.
MAX_MISSING = 4096
#: Requests awaiting an ACK (or a READ response) remembered per flow.
MAX_PENDING = 1024
#: Slots of the per-flow opcode counts (every valid opcode has one).
OPCODE_SLOTS = 64
#: Length limit of the per-interval CE/CNP series (a bogus timestamp years
#: after the first packet must not allocate years of intervals).
MAX_SERIES_INTERVALS = 1 << 22

#: Per-flow counters, in the order of ``enum netio_flow_counter``.
COUNTERS: tuple[str, ...] = (
    "packets", "bytes", "payload", "ce", "ect", "fecn", "becn", "icrc_checked", "icrc_bad",
    "requests", "gaps", "gap_packets", "dups", "ooo", "messages", "goodput", "rnr", "cnps",
    "data_payload", "naks", "rr_packets", "rr_gaps", "rr_gap_packets", "rr_dups", "rr_ooo",
    "cnp_violations", "cnp_unmatched", "src_mac", "dst_mac", "pcp", "first_ts", "last_ts",
    "pair", "rnr_codes")
_C = {name: i for i, name in enumerate(COUNTERS)}

#: Which samples: ACK latency, READ latency, CNP reaction delay.
SAMPLE_KINDS: tuple[str, ...] = ("ack", "read", "cnp")


class OpFlag(IntFlag):
    """What an opcode means to the flow analyses (``enum netio_opflag``)."""

    REQUEST = 1
    RESPONSE = 2
    ACKNOWLEDGE = 4
    READ_REQUEST = 8
    READ_RESPONSE = 16
    READ_RESPONSE_FIRST = 32  # FIRST or ONLY
    RESPONSE_MIDDLE_LAST = 64
    ENDS_MESSAGE = 128
    AETH = 256
    CNP = 512


def _opcode_tables() -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.uint8], list[int]]:
    flags = np.zeros(256, np.uint16)
    slot = np.zeros(256, np.uint8)
    slot_op: list[int] = []
    for op, info in enumerate(OPCODE_TABLE):
        if info is None:
            continue
        f = 0  # plain ints: IntFlag arithmetic would dominate the import time
        rc_uc = info.transport in (Transport.RC, Transport.UC)
        if rc_uc and not info.is_response:
            f |= OpFlag.REQUEST.value
        if info.is_response:
            f |= OpFlag.RESPONSE.value
        if info.operation is Operation.ACKNOWLEDGE:
            f |= OpFlag.ACKNOWLEDGE.value
        if info.operation is Operation.RDMA_READ_REQUEST:
            f |= OpFlag.READ_REQUEST.value
        if info.operation is Operation.RDMA_READ_RESPONSE:
            f |= OpFlag.READ_RESPONSE.value
            if info.position in (Position.FIRST, Position.ONLY):
                f |= OpFlag.READ_RESPONSE_FIRST.value
            else:
                f |= OpFlag.RESPONSE_MIDDLE_LAST.value
        if info.ends_message:
            f |= OpFlag.ENDS_MESSAGE.value
        if ExtHeader.AETH in info.headers:
            f |= OpFlag.AETH.value
        if info.transport is Transport.CNP:
            f |= OpFlag.CNP.value
        flags[op] = f
        slot[op] = len(slot_op)
        slot_op.append(op)
    if len(slot_op) > OPCODE_SLOTS:
        raise RuntimeError("more valid opcodes than opcode slots")
    return flags, slot, slot_op


#: Per opcode byte: ``OpFlag`` bits, slot of its count, and the opcode of each slot.
OPFLAGS, OPCODE_SLOT, SLOT_OPCODE = _opcode_tables()


def signed_psn_delta(a: int, b: int) -> int:
    """a - b in 24-bit PSN space, in [-2^23, 2^23)."""
    return ((a - b + PSN_HALF) & PSN_MASK) - PSN_HALF


def _circular(a: int, b: int) -> int:
    """Distance between two PSNs on the 24-bit circle."""
    d = (a - b) & PSN_MASK
    return min(d, PSN_MOD - d)


def summary_s(sketch: LatencySketch | None) -> dict[str, float | int] | None:
    """{count, min, p50, p90, p99, max} in seconds; None without samples."""
    return None if sketch is None or sketch.count == 0 else sketch.summary_s()


# ------------------------------------------------------------------- results


@dataclass(slots=True)
class FlowResults:
    """Everything the flow analyses found in one capture (flow ids index the arrays)."""

    keys: Sequence[FlowKey]  # a list, or the native table's words (``FlowKeys``)
    counters: I64  # (flows, len(COUNTERS))
    #: Non-zero packet counts per opcode slot (see SLOT_OPCODE), as (flow, slot,
    #: count) rows ordered by flow and slot: sparse, as a flow uses few opcodes.
    opcodes: I64
    naks: I64  # likewise (flow, NAK code, count): NAKs by code
    sketches: SketchTable  # (flow, kind) -> sketch, for the kinds with samples
    series: SeriesTable  # flow -> (intervals, data bytes), intervals ascending
    ce_series: I64  # CE marks per interval
    cnp_series: I64  # CNPs per interval
    beyond_series: int = 0  # CE marks and CNPs later than MAX_SERIES_INTERVALS intervals
    c: dict[str, I64] = field(init=False)

    def __post_init__(self) -> None:
        self.c = {name: self.counters[:, i] for i, name in enumerate(COUNTERS)}

    @property
    def n(self) -> int:
        return len(self.keys)

    def pair(self, fid: int) -> int | None:
        p = int(self.counters[fid, _C["pair"]])
        return None if p < 0 else p

    def opcode_counts(self, fid: int) -> dict[int, int]:
        """Packets per opcode (by opcode byte) of flow ``fid``."""
        return {SLOT_OPCODE[s]: n for s, n in _sparse_row(self.opcodes, fid).items()}

    def nak_counts(self, fid: int) -> dict[int, int]:
        """NAKs per NAK code of flow ``fid``."""
        return _sparse_row(self.naks, fid)

    def sketch(self, fid: int, kind: str) -> LatencySketch | None:
        return self.sketches.get((fid, kind))

    def differences(self, other: FlowResults) -> list[str]:
        """What differs from ``other`` (empty when identical)."""
        out = []
        if list(self.keys) != list(other.keys):
            out.append("keys")
        for name in ("counters", "opcodes", "naks", "ce_series", "cnp_series"):
            if not np.array_equal(getattr(self, name), getattr(other, name)):
                out.append(name)
        if self.beyond_series != other.beyond_series:
            out.append("beyond_series")
        if self.counters.shape == other.counters.shape:
            out += [f"counter {name}" for i, name in enumerate(COUNTERS)
                    if not np.array_equal(self.counters[:, i], other.counters[:, i])]
        if self.sketches.keys() != other.sketches.keys():
            out.append("sketch keys")
        else:
            out += [f"sketch {k}" for k, v in self.sketches.items()
                    if not v.same(other.sketches[k])]
        if self.series.keys() != other.series.keys():
            out.append("series keys")
        else:
            out += [f"series {k}" for k, (b, v) in self.series.items()
                    if not (np.array_equal(b, other.series[k][0])
                            and np.array_equal(v, other.series[k][1]))]
        return out


class SketchTable(Mapping[tuple[int, str], LatencySketch]):
    """The latency sketches of every flow as columns (no object per sketch until one
    is asked for): ``rows`` (flow * 3 + kind index in SAMPLE_KINDS, ascending, one per
    sketch with samples), ``heads`` (lowest bucket, bucket count, samples, min, max
    per row) and the rows' ``bins`` one after the other from ``starts``."""

    def __init__(self, rows: I64, heads: I64, bins: I64) -> None:
        self.rows, self.heads, self.bins = rows, heads, bins
        self._cum: I64 | None = None
        self.starts = np.concatenate(([0], np.cumsum(heads[:, 1])[:-1])).astype(np.int64) \
            if len(rows) else np.zeros(0, np.int64)

    @classmethod
    def of(cls, sketches: Mapping[tuple[int, str], LatencySketch]) -> SketchTable:
        """The table of ``sketches`` (those without samples left out)."""
        items = sorted((fid * len(SAMPLE_KINDS) + SAMPLE_KINDS.index(kind), s)
                       for (fid, kind), s in sketches.items() if s.count)
        rows = np.array([r for r, _ in items], np.int64)
        heads = np.array([(s.lo_index, len(s.bins), s.count, s.min_ns, s.max_ns)
                          for _, s in items], np.int64).reshape(-1, 5)
        bins = np.concatenate([s.bins for _, s in items]).astype(np.int64) if items \
            else np.zeros(0, np.int64)
        return cls(rows, heads, bins)

    def cumulative(self) -> I64:
        """The running sum of ``bins`` (made once)."""
        if self._cum is None:
            self._cum = np.cumsum(self.bins)
        return self._cum

    def _index(self, key: object) -> int:
        if not (isinstance(key, tuple) and len(key) == 2 and key[1] in SAMPLE_KINDS):
            return -1
        row = key[0] * len(SAMPLE_KINDS) + SAMPLE_KINDS.index(key[1])
        i = int(np.searchsorted(self.rows, row))
        return i if i < len(self.rows) and self.rows[i] == row else -1

    def __getitem__(self, key: tuple[int, str]) -> LatencySketch:
        i = self._index(key)
        if i < 0:
            raise KeyError(key)
        lo, length, count, mn, mx = self.heads[i].tolist()
        start = int(self.starts[i])
        return LatencySketch(lo, self.bins[start:start + length], count, mn, mx)

    def __contains__(self, key: object) -> bool:
        return self._index(key) >= 0

    def __iter__(self) -> Iterator[tuple[int, str]]:
        k = len(SAMPLE_KINDS)
        return ((r // k, SAMPLE_KINDS[r % k]) for r in self.rows.tolist())

    def __len__(self) -> int:
        return len(self.rows)


def _sparse_row(triples: I64, fid: int) -> dict[int, int]:
    a, b = np.searchsorted(triples[:, 0], [fid, fid + 1]).tolist()
    return dict(zip(triples[a:b, 1].tolist(), triples[a:b, 2].tolist(), strict=True))


def sparse_counts(dense: I64) -> I64:
    """(rows, slots) counts -> (row, slot, count) triples of the non-zero ones, in
    row then slot order."""
    rows, slots = np.nonzero(dense)
    return np.stack((rows, slots, dense[rows, slots])).T.astype(np.int64).reshape(-1, 3)


class FlowKeys(Sequence[FlowKey]):
    """The native table's flow keys as its five words per flow (40 bytes a flow, see
    ``native/netio_native.h``); a ``FlowKey`` is made when one is asked for."""

    def __init__(self, words: npt.NDArray[np.uint64]) -> None:
        self.words = words

    def __len__(self) -> int:
        return len(self.words)

    @overload
    def __getitem__(self, i: int) -> FlowKey: ...
    @overload
    def __getitem__(self, i: slice) -> list[FlowKey]: ...

    def __getitem__(self, i: int | slice) -> FlowKey | list[FlowKey]:
        if isinstance(i, slice):
            return [key_of_words(*w) for w in self.words[i].tolist()]
        return key_of_words(*self.words[i].tolist())

    def take(self, ids: I64) -> list[FlowKey]:
        """The keys of flows ``ids``."""
        return [key_of_words(*w) for w in self.words[ids].tolist()]

    def columns(self, ids: I64) -> tuple[list[int], list[int], list[int], list[bool]]:
        """Source and destination addresses, dest QP and IPv6 flag of flows ``ids``
        (as their ``FlowKey`` fields), converted column by column."""
        w = self.words[ids]
        v6 = ((w[:, 0] >> np.uint64(32)) & np.uint64(1)).astype(np.bool_)
        qp: list[int] = (w[:, 0] & np.uint64(0xFFFFFFFF)).tolist()
        src: list[int] = w[:, 1].tolist()
        dst: list[int] = w[:, 3].tolist()
        if v6.any():
            src_lo, dst_lo = w[:, 2].tolist(), w[:, 4].tolist()
            for i in np.nonzero(v6)[0].tolist():
                src[i] = src[i] << 64 | src_lo[i]
                dst[i] = dst[i] << 64 | dst_lo[i]
        return src, dst, qp, v6.tolist()

    def __iter__(self) -> Iterator[FlowKey]:
        for lo in range(0, len(self.words), 4096):  # a few lists at a time, not n
            yield from self[lo:lo + 4096]

    def dest_qps(self) -> I64:
        """Every flow's BTH dest QP."""
        qps: I64 = (self.words[:, 0] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        return qps


class SeriesTable(Mapping[int, tuple[I64, I64]]):
    """Data bytes per (flow, interval), held as three sorted columns (flow, interval,
    bytes) with each flow's row range (``span``): ``table[flow]`` is (intervals,
    bytes), both ascending in interval, as views; no per-flow objects are made."""

    def __init__(self, fids: I64, bins: I64, vals: I64) -> None:
        self.fids, self.bins, self.vals = fids, bins, vals
        cuts = np.nonzero(np.diff(fids))[0] + 1
        starts = np.concatenate(([0], cuts)) if fids.size else np.zeros(0, np.int64)
        #: The flows that have entries, ascending, and where each one's entries start.
        self.flows: I64 = fids[starts]
        self.starts: I64 = starts.astype(np.int64)

    def span(self, fid: int) -> tuple[int, int]:
        """The row range of ``fid``'s entries ((0, 0) without any)."""
        i = int(np.searchsorted(self.flows, fid))
        if i == len(self.flows) or self.flows[i] != fid:
            return 0, 0
        end = int(self.starts[i + 1]) if i + 1 < len(self.starts) else len(self.fids)
        return int(self.starts[i]), end

    def __getitem__(self, fid: int) -> tuple[I64, I64]:
        a, b = self.span(fid)
        if a == b:
            raise KeyError(fid)
        return self.bins[a:b], self.vals[a:b]

    def __contains__(self, fid: object) -> bool:
        return isinstance(fid, int) and self.span(fid) != (0, 0)

    def __iter__(self) -> Iterator[int]:
        return iter(self.flows.tolist())

    def __len__(self) -> int:
        return len(self.flows)


def _series_from(triples: I64) -> SeriesTable:
    """(flow, interval, bytes) triples, in any order, summed per (flow, interval)."""
    if triples.size == 0:
        empty = np.zeros(0, np.int64)
        return SeriesTable(empty, empty, empty)
    order = np.lexsort((triples[:, 1], triples[:, 0]))
    t = triples[order]
    new = np.ones(len(t), np.bool_)
    new[1:] = (t[1:, 0] != t[:-1, 0]) | (t[1:, 1] != t[:-1, 1])
    starts = np.nonzero(new)[0]
    return SeriesTable(t[starts, 0], t[starts, 1], np.add.reduceat(t[:, 2], starts))


def _dense(pairs: I64) -> tuple[I64, int]:
    """(interval, count) pairs → counts per interval from 0 (up to MAX_SERIES_INTERVALS),
    and the count that fell beyond."""
    if pairs.size == 0:
        return np.zeros(0, np.int64), 0
    inside = pairs[:, 0] < MAX_SERIES_INTERVALS
    dense = np.bincount(pairs[inside, 0], weights=pairs[inside, 1]).astype(np.int64)
    return dense, int(pairs[~inside, 1].sum())


# ----------------------------------------------------------------- reference


class _Flow:
    __slots__ = ("c", "cnp_seen", "cur_bin", "cur_bytes", "have", "last_cnp_ts", "last_raw",
                 "last_span", "last_u", "lat", "max_u", "missing", "naks", "opc",
                 "pair_fail_flows", "pend_ack_psn", "pend_ack_ts", "pend_read", "rr_have",
                 "rr_last_raw", "rr_last_u", "rr_max_u", "rr_missing", "unanswered_ts")

    def __init__(self) -> None:
        self.c = [0] * len(COUNTERS)
        self.c[_C["pair"]] = -1
        self.opc = [0] * OPCODE_SLOTS
        self.naks = [0] * 32
        self.have = False
        self.last_raw = self.last_u = self.max_u = 0
        self.last_span = 1
        self.rr_have = False
        self.rr_last_raw = self.rr_last_u = self.rr_max_u = 0
        self.missing: list[list[int]] = []
        self.rr_missing: list[list[int]] = []
        self.pend_ack_psn: list[int] = []
        self.pend_ack_ts: list[int] = []
        self.pend_read: list[tuple[int, int]] = []
        self.lat = (SketchBuilder(), SketchBuilder(), SketchBuilder())
        self.unanswered_ts: int | None = None
        self.cnp_seen = False
        self.last_cnp_ts = 0
        self.pair_fail_flows = -1


def _gap_add(miss: list[list[int]], lo: int, hi: int) -> None:
    miss.append([lo, hi])
    if len(miss) > MAX_MISSING:
        del miss[0]


def _gap_fill(miss: list[list[int]], p: int) -> bool:
    k = bisect_right(miss, p, key=lambda g: g[0]) - 1
    if k < 0 or p > miss[k][1]:
        return False
    lo, hi = miss[k]
    miss[k:k + 1] = [r for r in ([lo, p - 1], [p + 1, hi]) if r[0] <= r[1]]
    return True


class FlowReference:
    """The per-packet flow rules in plain Python (see the module docstring)."""

    def __init__(self, origin_ns: int, interval_ns: int, cnp_min_gap_ns: int) -> None:
        self.origin_ns = origin_ns
        self.interval_ns = max(1, interval_ns)
        self.cnp_min_gap_ns = cnp_min_gap_ns
        self.keys: list[FlowKey] = []
        self.ids: dict[FlowKey, int] = {}
        self.flows: list[_Flow] = []
        self.by_hosts: dict[tuple[bool, int, int], list[int]] = {}
        self.series: dict[tuple[int, int], int] = {}
        self.ce: dict[int, int] = {}
        self.cnp: dict[int, int] = {}

    def _bin(self, ts: int) -> int:
        return max(0, ts - self.origin_ns) // self.interval_ns

    def feed(self, cols: PacketColumns) -> None:
        """The RoCE rows of ``cols`` (already filtered), in order."""
        rows = np.nonzero(cols.kind == Kind.ROCE)[0]
        if rows.size == 0:
            return
        keys = flow_keys(cols, rows)
        fields = zip(keys, cols.ts_ns[rows].tolist(), cols.frame_bytes[rows].tolist(),
                     cols.payload_bytes[rows].tolist(), cols.opcode[rows].tolist(),
                     cols.psn[rows].tolist(), cols.flags[rows].tolist(), cols.ecn[rows].tolist(),
                     cols.syndrome[rows].tolist(), cols.reth_len[rows].tolist(),
                     cols.src_mac[rows].tolist(), cols.dst_mac[rows].tolist(),
                     cols.pcp[rows].tolist(), strict=True)
        for key, ts, frame, pay, op, psn, flags, ecn, syn, reth, smac, dmac, pcp in fields:
            self._packet(key, ts, frame, pay, op, psn, flags, ecn, syn, reth, smac, dmac, pcp)

    def _flow(self, key: FlowKey) -> int:
        fid = self.ids.get(key)
        if fid is None:
            fid = self.ids[key] = len(self.keys)
            self.keys.append(key)
            self.flows.append(_Flow())
            self.by_hosts.setdefault((key.ipv6, key.src_ip, key.dst_ip), []).append(fid)
        return fid

    def _packet(self, key: FlowKey, ts: int, frame: int, pay: int, op: int, psn: int,
                flags: int, ecn: int, syn: int, reth: int, smac: int, dmac: int,
                pcp: int) -> None:
        fid = self._flow(key)
        f = self.flows[fid]
        c = f.c
        of = int(OPFLAGS[op])
        if c[_C["packets"]] == 0:
            c[_C["first_ts"]] = ts
        c[_C["packets"]] += 1
        c[_C["bytes"]] += frame
        c[_C["payload"]] += pay
        if ecn == 3:
            c[_C["ce"]] += 1
        elif ecn:
            c[_C["ect"]] += 1
        if flags & Flag.FECN:
            c[_C["fecn"]] += 1
        if flags & Flag.BECN:
            c[_C["becn"]] += 1
        if flags & Flag.ICRC_CHECKED:
            c[_C["icrc_checked"]] += 1
            if not flags & Flag.ICRC_OK:
                c[_C["icrc_bad"]] += 1
        f.opc[int(OPCODE_SLOT[op])] += 1
        c[_C["src_mac"]] = smac
        c[_C["dst_mac"]] = dmac
        c[_C["pcp"]] = pcp
        c[_C["last_ts"]] = ts
        data = 0
        if of & OpFlag.REQUEST and not self._request(f, ts, op, of, psn, flags, pay, reth):
            data = pay
        if of & (OpFlag.RESPONSE | OpFlag.CNP) and c[_C["pair"]] < 0:
            self._try_pair(fid, psn, bool(of & OpFlag.RESPONSE))
        if of & OpFlag.READ_RESPONSE:
            if not self._read_response(f, ts, of, psn):
                data = pay
        elif of & OpFlag.RESPONSE and not of & OpFlag.ACKNOWLEDGE:
            data = pay
        if of & OpFlag.AETH:
            kind = (syn >> 5) & 3
            if kind == 3:
                f.naks[syn & 31] += 1
                c[_C["naks"]] += 1
            elif kind == 1:
                c[_C["rnr"]] += 1
                c[_C["rnr_codes"]] |= 1 << (syn & 31)
            elif kind == 0 and of & OpFlag.ACKNOWLEDGE:
                self._ack(f, ts, psn)
        if ecn == 3:
            if f.unanswered_ts is None:
                f.unanswered_ts = ts
            b = self._bin(ts)
            self.ce[b] = self.ce.get(b, 0) + 1
        if of & OpFlag.CNP:
            c[_C["cnps"]] += 1
            if f.cnp_seen and ts - f.last_cnp_ts < self.cnp_min_gap_ns:
                c[_C["cnp_violations"]] += 1
            f.cnp_seen = True
            f.last_cnp_ts = ts
            d = c[_C["pair"]]
            if d < 0:
                c[_C["cnp_unmatched"]] += 1
            else:
                df = self.flows[d]
                if df.unanswered_ts is not None and df.unanswered_ts <= ts:
                    df.lat[2].add(ts - df.unanswered_ts)
                    df.unanswered_ts = None
            b = self._bin(ts)
            self.cnp[b] = self.cnp.get(b, 0) + 1
        if data > 0:
            c[_C["data_payload"]] += data
            k = (fid, self._bin(ts))
            self.series[k] = self.series.get(k, 0) + data

    def _request(self, f: _Flow, ts: int, op: int, of: int, p: int, flags: int, pay: int,
                 reth: int) -> bool:
        c = f.c
        span = max(1, -(-reth // 256)) if of & OpFlag.READ_REQUEST else 1
        if not f.have:
            psn_u, prev_max, tol = p, p - 1, 1
        else:
            psn_u = f.last_u + signed_psn_delta(p, f.last_raw)
            prev_max, tol = f.max_u, f.last_span
        ahead = psn_u - prev_max
        dup = False
        if ahead > tol:
            c[_C["gaps"]] += 1
            c[_C["gap_packets"]] += ahead - tol
            _gap_add(f.missing, prev_max + tol, psn_u - 1)
        elif ahead <= 0:
            if _gap_fill(f.missing, psn_u):
                c[_C["ooo"]] += 1
            else:
                c[_C["dups"]] += 1
                dup = True
        c[_C["requests"]] += 1
        if not dup:
            if of & OpFlag.ENDS_MESSAGE:
                c[_C["messages"]] += 1
            c[_C["goodput"]] += pay
        f.max_u = psn_u if not f.have else max(f.max_u, psn_u)
        f.last_raw, f.last_u, f.last_span, f.have = p, psn_u, span, True
        if dup:
            return True
        if of & OpFlag.READ_REQUEST:
            f.pend_read.append((p, ts))
            if len(f.pend_read) > MAX_PENDING:
                del f.pend_read[0]
        elif flags & Flag.ACK_REQ:
            i = bisect_right(f.pend_ack_psn, psn_u)
            f.pend_ack_psn.insert(i, psn_u)
            f.pend_ack_ts.insert(i, ts)
            if len(f.pend_ack_psn) > MAX_PENDING:
                del f.pend_ack_psn[0], f.pend_ack_ts[0]
        return False

    def _read_response(self, f: _Flow, ts: int, of: int, p: int) -> bool:
        c = f.c
        if not f.rr_have:
            psn_u, prev_max = p, p - 1
        else:
            psn_u = f.rr_last_u + signed_psn_delta(p, f.rr_last_raw)
            prev_max = f.rr_max_u
        ahead = psn_u - prev_max
        dup = False
        if ahead > 1:
            if of & OpFlag.RESPONSE_MIDDLE_LAST:
                c[_C["rr_gaps"]] += 1
                c[_C["rr_gap_packets"]] += ahead - 1
                _gap_add(f.rr_missing, prev_max + 1, psn_u - 1)
        elif ahead <= 0:
            if _gap_fill(f.rr_missing, psn_u):
                c[_C["rr_ooo"]] += 1
            else:
                c[_C["rr_dups"]] += 1
                dup = True
        c[_C["rr_packets"]] += 1
        f.rr_max_u = psn_u if not f.rr_have else max(f.rr_max_u, psn_u)
        f.rr_last_raw, f.rr_last_u, f.rr_have = p, psn_u, True
        fwd = c[_C["pair"]]
        if of & OpFlag.READ_RESPONSE_FIRST and fwd >= 0:
            ff = self.flows[fwd]
            for i in range(len(ff.pend_read) - 1, -1, -1):
                if ff.pend_read[i][0] == p:
                    t_req = ff.pend_read.pop(i)[1]
                    if t_req <= ts:
                        ff.lat[1].add(ts - t_req)
                    break
        return dup

    def _ack(self, rf: _Flow, ts: int, psn: int) -> None:
        fwd = rf.c[_C["pair"]]
        if fwd < 0:
            return
        f = self.flows[fwd]
        if not f.have or not f.pend_ack_psn:
            return
        a_u = f.max_u + signed_psn_delta(psn, f.max_u & PSN_MASK)
        j = bisect_right(f.pend_ack_psn, a_u)
        kept_psn, kept_ts = [], []
        for pu, pt in zip(f.pend_ack_psn[:j], f.pend_ack_ts[:j], strict=True):
            if pt <= ts:
                f.lat[0].add(ts - pt)
            else:
                kept_psn.append(pu)
                kept_ts.append(pt)
        f.pend_ack_psn[:j] = kept_psn
        f.pend_ack_ts[:j] = kept_ts

    def _try_pair(self, fid: int, psn: int, response: bool) -> None:
        f = self.flows[fid]
        n = len(self.flows)
        if f.pair_fail_flows == n:
            return
        k = self.keys[fid]
        cands = [x for x in self.by_hosts.get((k.ipv6, k.dst_ip, k.src_ip), ())
                 if x != fid and self.flows[x].c[_C["pair"]] < 0]
        if not cands:
            f.pair_fail_flows = n
            return
        if len(cands) == 1:
            other = cands[0]
        elif response:
            have = [x for x in cands if self.flows[x].have]
            if not have:
                return
            other = min(have, key=lambda x: _circular(self.flows[x].last_raw, psn))
        else:
            return
        f.c[_C["pair"]] = other
        self.flows[other].c[_C["pair"]] = fid

    def results(self) -> FlowResults:
        n = len(self.flows)
        counters = np.array([f.c for f in self.flows], np.int64).reshape(n, len(COUNTERS))
        opcodes = sparse_counts(
            np.array([f.opc for f in self.flows], np.int64).reshape(n, OPCODE_SLOTS))
        naks = sparse_counts(np.array([f.naks for f in self.flows], np.int64).reshape(n, 32))
        sketches: dict[tuple[int, str], LatencySketch] = {}
        for fid, f in enumerate(self.flows):
            for kind, s in zip(SAMPLE_KINDS, f.lat, strict=True):
                if s.count:
                    sketches[(fid, kind)] = s.finish()
        triples = np.array([(k[0], k[1], v) for k, v in self.series.items()],
                           np.int64).reshape(-1, 3)
        ce, ce_beyond = _dense(np.array(list(self.ce.items()), np.int64).reshape(-1, 2))
        cnp, cnp_beyond = _dense(np.array(list(self.cnp.items()), np.int64).reshape(-1, 2))
        return FlowResults(list(self.keys), counters, opcodes, naks, SketchTable.of(sketches),
                           _series_from(triples), ce, cnp, ce_beyond + cnp_beyond)


# -------------------------------------------------------------------- native


def analyzer_config(origin_ns: int, interval_ns: int, cnp_min_gap_ns: int, *,
                    start_ns: int | None = None, end_ns: int | None = None,
                    priorities: frozenset[int] | None = None,
                    flow: FlowFilter | None = None, verify_icrc: bool = True) -> Any:
    """A ``netio_analyzer_config`` (absolute start/end times)."""
    ffi, lib = native.ffi, native.lib
    cfg = ffi.new("netio_analyzer_config *")
    cfg.origin_ns = origin_ns
    cfg.interval_ns = max(1, interval_ns)
    cfg.cnp_min_gap_ns = cnp_min_gap_ns
    cfg.start_ns = -(1 << 63) if start_ns is None else start_ns
    cfg.end_ns = (1 << 63) - 1 if end_ns is None else end_ns
    cfg.roce_pcp_mask = 0x1FF if priorities is None else sum(1 << p for p in priorities)
    bits = 0
    if flow is not None:
        if flow.ipv6:
            bits |= lib.NETIO_FLOW_FILTER_IPV6
        if flow.src_ip is not None:
            bits |= lib.NETIO_FLOW_FILTER_SRC
            if flow.ipv6:
                ffi.memmove(cfg.flow_src_ip6, flow.src_ip.to_bytes(16, "big"), 16)
            else:
                cfg.flow_src_ip = flow.src_ip
        if flow.dst_ip is not None:
            bits |= lib.NETIO_FLOW_FILTER_DST
            if flow.ipv6:
                ffi.memmove(cfg.flow_dst_ip6, flow.dst_ip.to_bytes(16, "big"), 16)
            else:
                cfg.flow_dst_ip = flow.dst_ip
        if flow.dest_qp is not None:
            bits |= lib.NETIO_FLOW_FILTER_QP
            cfg.flow_dest_qp = flow.dest_qp
    cfg.flow_filter = bits
    cfg.verify_icrc = 1 if verify_icrc else 0
    ffi.memmove(cfg.opflags, OPFLAGS.tobytes(), OPFLAGS.nbytes)
    ffi.memmove(cfg.opslot, OPCODE_SLOT.tobytes(), OPCODE_SLOT.nbytes)
    return cfg


def _native_sketches(a: Any) -> SketchTable:
    """Every flow's sketches that have samples, in three C calls (how many, their
    headers, then all their buckets)."""
    ffi, lib = native.ffi, native.lib
    heads = np.zeros((lib.netio_analyzer_sketch_count(a), 6), np.int64)
    total = lib.netio_analyzer_sketches(a, ffi.from_buffer("int64_t[]", heads)) \
        if len(heads) else 0
    bins = np.zeros(total, np.int64)
    if total:
        lib.netio_analyzer_sketch_bins(a, ffi.from_buffer("int64_t[]", bins))
    return SketchTable(heads[:, 0].copy(), heads[:, 1:].copy(), bins)


class NativeFlows:
    """The C analyzer (``netio_analyzer``) of one capture: filters, kinds, flows."""

    def __init__(self, config: Any) -> None:
        if not native.AVAILABLE:
            raise RuntimeError("netio._native is not built (run tools/rebuild)")
        lib = native.lib
        ptr = lib.netio_analyzer_new(config)
        if ptr == native.ffi.NULL:
            raise MemoryError("netio_analyzer_new failed")
        self._a = native.ffi.gc(ptr, lib.netio_analyzer_free)

    @property
    def handle(self) -> Any:
        return self._a

    def feed_columns(self, cols: PacketColumns) -> None:
        """The RoCE rows of already extracted (and filtered) columns."""
        from netio.analyze.extract import c_columns

        if len(cols) == 0:
            return
        ccols, _keep = c_columns(cols)
        if native.lib.netio_analyzer_feed_columns(self._a, ccols, len(cols)) < 0:
            raise MemoryError("flow analysis ran out of memory")

    def summary(self) -> I64:
        """Kept rows per Kind (0..4), rows kept, first and last kept timestamp."""
        out = np.zeros(native.lib.NETIO_ANALYZER_SUMMARY, np.int64)
        native.lib.netio_analyzer_summary(self._a, native.ffi.from_buffer("int64_t[]", out))
        return out

    def _sparse(self, which: int) -> I64:
        lib = native.lib
        out = np.zeros((lib.netio_analyzer_sparse_len(self._a, which), 3), np.int64)
        if out.size:
            lib.netio_analyzer_sparse(self._a, which, native.ffi.from_buffer("int64_t[]", out))
        return out

    def results(self, release: bool = False) -> FlowResults:
        """Everything found; with ``release``, the C state is freed as soon as it is
        copied out (before the columns are sorted and indexed), so that it and the
        Python results do not both peak at once. The analyzer is then spent."""
        ffi, lib = native.ffi, native.lib
        a = self._a
        n = lib.netio_analyzer_flows(a)
        null = ffi.NULL
        words = np.zeros((n, 5), np.uint64)
        if n:
            lib.netio_analyzer_export(a, ffi.from_buffer("uint64_t[]", words), null)
        opcodes, naks = (self._sparse(which) for which in (0, 1))
        keys = FlowKeys(words)
        sketches = _native_sketches(a)
        data = self._data_series()
        series: list[I64] = [np.zeros((0, 3), np.int64)]  # (which 0 is ``data``)
        for which in (1, 2):
            m = lib.netio_analyzer_series_len(a, which)
            t = np.zeros((m, 3), np.int64)
            if m:
                lib.netio_analyzer_series(a, which, ffi.from_buffer("int64_t[]", t))
            series.append(t)
        if release:
            lib.netio_analyzer_shed(a)
        counters = np.zeros((n, len(COUNTERS)), np.int64)
        if n:
            lib.netio_analyzer_export(a, null, ffi.from_buffer("int64_t[]", counters))
        if release:
            ffi.release(self._a)
        ce, ce_beyond = _dense(series[1][:, 1:])
        cnp, cnp_beyond = _dense(series[2][:, 1:])
        return FlowResults(keys, counters, opcodes, naks, sketches, data, ce, cnp,
                           ce_beyond + cnp_beyond)

    def _data_series(self) -> SeriesTable:
        """The data series, sorted by flow and interval and summed in C (a counting
        sort by flow: no sort of millions of entries here)."""
        ffi, lib = native.ffi, native.lib
        m = lib.netio_analyzer_series_len(self._a, 0)
        cols = [np.zeros(m, np.int64) for _ in range(3)]
        got = lib.netio_analyzer_flow_series(self._a, *(ffi.from_buffer("int64_t[]", c)
                                                         for c in cols)) if m else 0
        if got > m:
            raise MemoryError("flow analysis ran out of memory")
        fids, bins, vals = (c[:got] for c in cols)
        return SeriesTable(fids, bins, vals)


__all__ = ["COUNTERS", "MAX_MISSING", "MAX_PENDING", "FlowReference",
           "FlowResults", "NativeFlows", "OpFlag", "analyzer_config", "summary_s"]
