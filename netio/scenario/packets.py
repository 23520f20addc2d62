"""Packets and intent: the generator's per-port packet tables and what it meant by them.

Second stage of ``netio.scenario``'s pipeline: from a ``Scenario`` (``spec``)
to per-port packet tables (``Rows``) plus the intent behind them (per flow:
losses, retransmissions, marks, latencies; the pause frames sent), which the
``captures`` stage writes out and the ``truth`` stage states as the analysis
document. The model is ``netio.scenario.spec``'s docstring.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from netio.analyze.columns import Kind
from netio.analyze.options import DEFAULT_OPTIONS, AnalysisOptions
from netio.errors import ScenarioError
from netio.scenario.spec import CeWindow, FlowSpec, PauseSpec, Scenario
from netio.wire.bth import PSN_MODULUS, Opcode
from netio.wire.ext import AckType, NakCode, rnr_timer_ns
from netio.wire.pfc import BITS_PER_QUANTUM

I64 = npt.NDArray[np.int64]

#: Bytes of a tagged RoCEv2 frame around the payload: Ethernet 14 + VLAN 4 +
#: IPv4 20 + UDP 8 + BTH 12 + ICRC 4 (extension headers come on top).
ROCE_OVERHEAD_BYTES = 62

#: Columns of the generator's packet tables (one row per packet on one link).
_ROW_FIELDS: tuple[tuple[str, type[np.generic]], ...] = (
    ("ts_ns", np.int64), ("kind", np.uint8), ("flow", np.int32), ("dir", np.uint8),
    ("opcode", np.uint8), ("psn", np.uint32), ("ack_req", np.bool_), ("ecn", np.uint8),
    ("becn", np.bool_), ("syndrome", np.uint8), ("msn", np.uint32), ("payload", np.uint32),
    ("reth_len", np.uint32), ("bad_icrc", np.bool_), ("src_mac", np.uint64), ("dst_mac", np.uint64),
    ("pfc_cev", np.uint8), ("q0", np.uint16), ("prio_q", np.uint8), ("vlan", np.int32),
)


@dataclass(slots=True)
class Rows:
    """A growable table of generated packets (column arrays)."""

    cols: dict[str, npt.NDArray[Any]] = field(default_factory=dict)

    @classmethod
    def make(cls, n: int, **values: Any) -> Rows:
        cols: dict[str, npt.NDArray[Any]] = {}
        for name, dt in _ROW_FIELDS:
            v = values.get(name, 0)
            cols[name] = np.broadcast_to(np.asarray(v, dtype=dt), (n,)).copy()
        return cls(cols)

    @classmethod
    def concat(cls, parts: Sequence[Rows]) -> Rows:
        if not parts:
            return cls.make(0)
        return cls({name: np.concatenate([p.cols[name] for p in parts]) for name, _ in
                    _ROW_FIELDS})

    def __len__(self) -> int:
        return int(self.cols["ts_ns"].shape[0])

    def sorted(self) -> Rows:
        order = np.argsort(self.cols["ts_ns"], kind="stable")
        return Rows({k: v[order] for k, v in self.cols.items()})


def _drain(ts: I64, ser_ns: int, floor_ns: int | None = None) -> I64:
    """Queue recursion t'_i = max(t_i, t'_{i-1} + ser) done with one accumulate.

    (t'_i - i*ser is the running maximum of t_i - i*ser.)
    """
    if ts.size == 0:
        return ts
    steps = np.arange(ts.size, dtype=np.int64) * ser_ns
    u = ts - steps
    if floor_ns is not None:
        u[0] = max(int(u[0]), floor_ns)
    return np.maximum.accumulate(u) + steps


def _defer(ts: I64, paused: Sequence[tuple[int, int]], ser_ns: int) -> I64:
    """Packets due while paused leave at the end of the pause, then drain at line rate."""
    out = ts.copy()
    for a, b in paused:
        inside = (out >= a) & (out < b)
        out[inside] = b
    return _drain(out, ser_ns)


@dataclass(slots=True)
class FlowTruth:
    """What the generator knows about one flow (direction A→B)."""

    packets_fwd: int = 0
    packets_rev: int = 0
    bytes_fwd: int = 0
    payload_fwd: int = 0
    goodput_fwd: int = 0
    payload_rev: int = 0
    messages: int = 0
    psn_gaps: int = 0
    psn_gap_packets: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    retransmitted: int = 0
    requests: int = 0
    naks: dict[str, int] = field(default_factory=dict)
    rnr_naks: int = 0
    rnr_timer_s: list[float] = field(default_factory=list)
    ack_latency_ns: list[int] = field(default_factory=list)
    read_latency_ns: list[int] = field(default_factory=list)
    ce_packets: int = 0
    cnps: int = 0
    cnp_reaction_ns: list[int] = field(default_factory=list)
    cnp_violations: int = 0
    icrc_failures: int = 0
    opcodes: dict[str, int] = field(default_factory=dict)
    rev_opcodes: dict[str, int] = field(default_factory=dict)


_WRITE_OPS = (Opcode.RC_RDMA_WRITE_FIRST, Opcode.RC_RDMA_WRITE_MIDDLE, Opcode.RC_RDMA_WRITE_LAST,
              Opcode.RC_RDMA_WRITE_ONLY)
_SEND_OPS = (Opcode.RC_SEND_FIRST, Opcode.RC_SEND_MIDDLE, Opcode.RC_SEND_LAST,
             Opcode.RC_SEND_ONLY)
_READ_RESP = (Opcode.RC_RDMA_READ_RESPONSE_FIRST, Opcode.RC_RDMA_READ_RESPONSE_MIDDLE,
              Opcode.RC_RDMA_READ_RESPONSE_LAST, Opcode.RC_RDMA_READ_RESPONSE_ONLY)
_ACK_SYNDROME = (int(AckType.ACK) << 5) | 31  # ACK, credits invalid
_NAK_SEQ = (int(AckType.NAK) << 5) | int(NakCode.PSN_SEQUENCE_ERROR)
_ECT0 = 2
_CE = 3


def _positions(n_msgs: int, per_msg: int, ops: Sequence[int]) -> tuple[
        npt.NDArray[np.uint8], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Opcodes, first-of-message and last-of-message flags for n_msgs*per_msg packets."""
    pos = np.tile(np.arange(per_msg, dtype=np.int64), n_msgs)
    if per_msg == 1:
        opc = np.full(pos.size, ops[3], dtype=np.uint8)
    else:
        opc = np.full(pos.size, ops[1], dtype=np.uint8)
        opc[pos == 0] = ops[0]
        opc[pos == per_msg - 1] = ops[2]
    return opc, pos == 0, pos == per_msg - 1


def _payloads(n_msgs: int, per_msg: int, message_bytes: int, pmtu: int) -> npt.NDArray[np.uint32]:
    pay = np.full(n_msgs * per_msg, pmtu, dtype=np.uint32)
    pay[per_msg - 1::per_msg] = message_bytes - (per_msg - 1) * pmtu
    return pay


def _ce_mask(ts: I64, windows: Sequence[CeWindow], t0: int) -> npt.NDArray[np.bool_]:
    mask = np.zeros(ts.size, dtype=np.bool_)
    for w in windows:
        inside = np.nonzero((ts >= t0 + w.from_ns) & (ts < t0 + w.to_ns))[0]
        mask[inside[:: w.every]] = True
    return mask


def _cnps(ce_ts: I64, flow: FlowSpec, truth: FlowTruth, cnp_min_gap_ns: int) -> I64:
    """CNP times the notification point sends for CE arrivals ``ce_ts`` (sorted); CNPs
    closer than ``cnp_min_gap_ns`` (the analysis option) count as DCQCN violations."""
    out: list[int] = []
    last = -(1 << 62)
    first_unanswered: int | None = None
    for t in ce_ts.tolist():
        # A CE that arrives before the last CNP left is answered by it.
        if first_unanswered is None and (not out or t > out[-1]):
            first_unanswered = t
        if t >= last + flow.cnp_interval_ns:
            c = t + flow.cnp_delay_ns
            if out and c - out[-1] < cnp_min_gap_ns:
                truth.cnp_violations += 1
            out.append(c)
            truth.cnp_reaction_ns.append(c - first_unanswered)
            first_unanswered = None
            last = t
    truth.ce_packets += int(ce_ts.size)
    truth.cnps += len(out)
    return np.asarray(out, dtype=np.int64)


def _wire_bytes(payload: int, ext: int = 0) -> int:
    pad = (-payload) % 4
    return ROCE_OVERHEAD_BYTES + ext + payload + pad


def _flow_rows(flow: FlowSpec, fidx: int, t0: int, paused: Sequence[tuple[int, int]],
               link_bps: int, responses_paused: Sequence[tuple[int, int]] = (), *,
               cnp_min_gap_ns: int = DEFAULT_OPTIONS.cnp_min_gap_ns
               ) -> tuple[Rows, FlowTruth]:
    """All packets of one flow on its (first) link, with the truth about them.

    ``paused``: when the requests may not leave; ``responses_paused``: when READ
    responses may not."""
    truth = FlowTruth()
    per_msg = max(1, -(-flow.message_bytes // flow.pmtu))
    ser_ns = max(1, round(_wire_bytes(flow.pmtu) * 8e9 / link_bps))
    start = t0 + flow.start_ns
    if flow.op == "read":
        return _read_rows(flow, fidx, start, per_msg, ser_ns, paused, responses_paused,
                          cnp_min_gap_ns, truth)
    n = flow.messages * per_msg
    gap_ns = max(ser_ns, round(flow.pmtu * 8e9 / flow.rate_bps))
    ops = _WRITE_OPS if flow.op == "write" else _SEND_OPS
    opc, first, last = _positions(flow.messages, per_msg, ops)
    pay = _payloads(flow.messages, per_msg, flow.message_bytes, flow.pmtu)
    t = _defer(start + np.arange(n, dtype=np.int64) * gap_ns, paused, ser_ns)
    psn_rel = np.arange(n, dtype=np.int64)
    msg_of = psn_rel // per_msg
    # Accepted arrival time of each packet at the responder (= capture time).
    accepted = t.copy()
    captured_first = np.ones(n, dtype=np.bool_)
    retx_parts: list[tuple[int, int, I64]] = []  # (k, j, times)
    naks: list[tuple[int, int, int, int]] = []  # (ts, syndrome, psn_rel, msn)
    events = sorted([(k, "drop") for k in flow.drops] + [(k, "rnr") for k in flow.rnr])
    prev_end = -1
    for k, what in events:
        if k <= prev_end + 1 or k >= n - 1:
            raise ScenarioError(f"flow {flow.name}: event at packet {k} overlaps another or "
                                "is at the end of the flow")
        done_msgs = int(np.count_nonzero(last[:k]))
        if what == "drop":
            captured_first[k] = False
            nak_ts = int(t[k + 1]) + flow.ack_delay_ns
            naks.append((nak_ts, _NAK_SEQ, k, done_msgs))
            restart = nak_ts + 2 * flow.owd_ns
        else:
            code = flow.rnr_timer_code
            nak_ts = int(t[k]) + flow.ack_delay_ns
            naks.append((nak_ts, (int(AckType.RNR_NAK) << 5) | code, k, done_msgs))
            truth.rnr_naks += 1
            truth.rnr_timer_s.append(rnr_timer_ns(code) / 1e9)
            restart = nak_ts + 2 * flow.owd_ns + rnr_timer_ns(code)
        j = int(np.searchsorted(t, nak_ts + 2 * flow.owd_ns, side="right")) - 1
        j = max(j, k + 1 if what == "drop" else k)
        rt = restart + np.arange(j - k + 1, dtype=np.int64) * ser_ns
        retx_parts.append((k, j, rt))
        accepted[k:j + 1] = rt
        if what == "drop":
            truth.psn_gaps += 1
            truth.psn_gap_packets += 1
            truth.out_of_order += 1
            truth.duplicates += j - k
        else:
            truth.duplicates += j - k + 1
        truth.retransmitted += j - k + 1
        if j + 1 < n:
            t[j + 1:] = _drain(t[j + 1:], ser_ns, int(rt[-1]) + ser_ns)
            accepted[j + 1:] = t[j + 1:]
        prev_end = j
    # ECN on first transmissions that reach the capture.
    ce = _ce_mask(t, flow.ce, t0) & captured_first
    ecn = np.where(ce, _CE, _ECT0).astype(np.uint8)
    psn = ((flow.start_psn + psn_rel) % PSN_MODULUS).astype(np.uint32)
    reth = np.where(first & (flow.op == "write"), flow.message_bytes, 0).astype(np.uint32)
    parts = [Rows.make(int(captured_first.sum()), ts_ns=t[captured_first], kind=Kind.ROCE,
                       flow=fidx, dir=0, opcode=opc[captured_first], psn=psn[captured_first],
                       ack_req=last[captured_first], ecn=ecn[captured_first],
                       payload=pay[captured_first], reth_len=reth[captured_first])]
    for k, j, rt in retx_parts:
        sl = slice(k, j + 1)
        parts.append(Rows.make(j - k + 1, ts_ns=rt, kind=Kind.ROCE, flow=fidx, dir=0,
                               opcode=opc[sl], psn=psn[sl], ack_req=last[sl], ecn=_ECT0,
                               payload=pay[sl], reth_len=reth[sl]))
    # ACK per message, when its last packet was accepted.
    last_idx = np.nonzero(last)[0]
    ack_ts = accepted[last_idx] + flow.ack_delay_ns
    parts.append(Rows.make(last_idx.size, ts_ns=ack_ts, kind=Kind.ROCE, flow=fidx, dir=1,
                           opcode=Opcode.RC_ACKNOWLEDGE, psn=psn[last_idx], ecn=_ECT0,
                           syndrome=_ACK_SYNDROME,
                           msn=((msg_of[last_idx] + 1) % PSN_MODULUS).astype(np.uint32)))
    first_seen = np.where(captured_first, t, accepted)  # ts of first captured copy
    truth.ack_latency_ns.extend((ack_ts - first_seen[last_idx]).tolist())
    for nak_ts, syn, k, msn in naks:
        parts.append(Rows.make(1, ts_ns=nak_ts, kind=Kind.ROCE, flow=fidx, dir=1,
                               opcode=Opcode.RC_ACKNOWLEDGE, psn=psn[k], ecn=_ECT0, syndrome=syn,
                               msn=msn % PSN_MODULUS))
        if syn == _NAK_SEQ:
            truth.naks["PSN_SEQUENCE_ERROR"] = truth.naks.get("PSN_SEQUENCE_ERROR", 0) + 1
    cnp_ts = _cnps(t[ce], flow, truth, cnp_min_gap_ns)
    parts.append(Rows.make(cnp_ts.size, ts_ns=cnp_ts, kind=Kind.ROCE, flow=fidx, dir=1,
                           opcode=Opcode.CNP, psn=0, ecn=0, becn=True))
    rows = Rows.concat(parts).sorted()
    truth.messages = flow.messages
    truth.requests = n - len(flow.drops) + truth.retransmitted
    _mark_bad_icrc(rows, flow, truth)
    return rows, truth


def _remembered_reads(req_ts: I64, resp_ts: I64) -> list[int]:
    """READ latencies an analyzer can measure with the documented bound: it remembers at
    most ``MAX_PENDING`` (1024) READ REQUESTs awaiting their first response, forgetting
    the oldest when a newer one arrives with the list full. Requests and responses
    are taken in time order (a request before a response at the same time)."""
    events = sorted([(int(t), 0, k) for k, t in enumerate(req_ts.tolist())]
                    + [(int(t), 1, k) for k, t in enumerate(resp_ts.tolist())])
    waiting: deque[int] = deque()
    alive: set[int] = set()
    out = []
    for t, is_resp, k in events:
        if not is_resp:
            waiting.append(k)
            alive.add(k)
            if len(alive) > _MAX_PENDING_READS:
                while waiting[0] not in alive:
                    waiting.popleft()
                alive.discard(waiting.popleft())
        elif k in alive:
            alive.discard(k)
            out.append(t - int(req_ts[k]))
    return out


#: netio.analyze.flows.MAX_PENDING, as its docstring states it.
_MAX_PENDING_READS = 1024


def _read_rows(flow: FlowSpec, fidx: int, start: int, per_msg: int, ser_ns: int,
               paused: Sequence[tuple[int, int]], responses_paused: Sequence[tuple[int, int]],
               cnp_min_gap_ns: int, truth: FlowTruth) -> tuple[Rows, FlowTruth]:
    m = flow.messages
    msg_gap = max(ser_ns * per_msg, round(flow.message_bytes * 8e9 / flow.rate_bps))
    req_ts = _defer(start + np.arange(m, dtype=np.int64) * msg_gap, paused, ser_ns)
    req_psn_rel = np.arange(m, dtype=np.int64) * per_msg

    def psn_of(rel: I64) -> npt.NDArray[np.uint32]:
        return ((flow.start_psn + rel) % PSN_MODULUS).astype(np.uint32)
    parts = [Rows.make(m, ts_ns=req_ts, kind=Kind.ROCE, flow=fidx, dir=0,
                       opcode=Opcode.RC_RDMA_READ_REQUEST, psn=psn_of(req_psn_rel),
                       ack_req=True, ecn=_ECT0, reth_len=flow.message_bytes)]
    opc, first, last = _positions(m, per_msg, _READ_RESP)
    pay = _payloads(m, per_msg, flow.message_bytes, flow.pmtu)
    idx = np.arange(m * per_msg, dtype=np.int64)
    msg_of = idx // per_msg
    resp_ts = _defer(req_ts[msg_of] + flow.read_delay_ns + (idx % per_msg) * ser_ns,
                     responses_paused, ser_ns)
    has_aeth = first | last
    ce = _ce_mask(resp_ts, flow.ce, start - flow.start_ns)
    parts.append(Rows.make(idx.size, ts_ns=resp_ts, kind=Kind.ROCE, flow=fidx, dir=1,
                           opcode=opc, psn=psn_of(idx), ecn=np.where(ce, _CE, _ECT0),
                           syndrome=np.where(has_aeth, _ACK_SYNDROME, 0),
                           msn=np.where(has_aeth, (msg_of + 1) % PSN_MODULUS, 0),
                           payload=pay))
    truth.read_latency_ns.extend(_remembered_reads(req_ts, resp_ts[first]))
    # CNPs for CE-marked responses go from the requester (A, the NP) to B's QP.
    cnp_ts = _cnps(resp_ts[ce], flow, truth, cnp_min_gap_ns)
    parts.append(Rows.make(cnp_ts.size, ts_ns=cnp_ts, kind=Kind.ROCE, flow=fidx, dir=0,
                           opcode=Opcode.CNP, psn=0, ecn=0, becn=True))
    rows = Rows.concat(parts).sorted()
    truth.messages = m
    truth.requests = m
    _mark_bad_icrc(rows, flow, truth)
    return rows, truth


def _mark_bad_icrc(rows: Rows, flow: FlowSpec, truth: FlowTruth) -> None:
    fwd = np.nonzero(rows.cols["dir"] == 0)[0]
    for k in flow.bad_icrc:
        if k >= fwd.size:
            raise ScenarioError(f"flow {flow.name}: bad_icrc index {k} beyond its packets")
        rows.cols["bad_icrc"][fwd[k]] = True
    truth.icrc_failures = len(flow.bad_icrc)


# ------------------------------------------------------------------ pause frames


def pause_intervals(frames: Sequence[tuple[int, int]], link_bps: int) -> list[tuple[int, int]]:
    """Paused intervals (ns) of one queue from its (ts_ns, quanta) frames in time order.

    Plain sequential statement of IEEE 802.1Qbb §36.1.3.2 / 802.3 Annex 31B:
    each frame restarts the pause timer (quanta 0 ends the pause at once).
    """
    out: list[tuple[int, int]] = []
    start: int | None = None
    end = 0
    for ts, q in frames:
        d = (q * BITS_PER_QUANTUM * 1_000_000_000 + link_bps // 2) // link_bps
        if start is not None and ts >= end:  # the timer ran out before this frame
            out.append((start, end))
            start = None
        if start is not None:  # still paused: this frame restarts the timer
            end = ts + d
            if d == 0:
                out.append((start, end))
                start = None
        elif d > 0:
            start, end = ts, ts + d
    if start is not None:
        out.append((start, end))
    return out


def _pause_frames(p: PauseSpec, t0: int) -> list[tuple[int, int]]:
    a = t0 + p.start_ns
    ts = list(range(a, a + p.duration_ns, max(1, p.refresh_ns)))
    frames = [(t, p.quanta) for t in ts]
    if p.xon:
        frames.append((a + p.duration_ns, 0))
    return frames


def _pause_rows(p: PauseSpec, frames: Sequence[tuple[int, int]]) -> Rows:
    ts = np.array([f[0] for f in frames], dtype=np.int64)
    q = np.array([f[1] for f in frames], dtype=np.uint16)
    if p.priorities is None:
        return Rows.make(ts.size, ts_ns=ts, kind=Kind.PAUSE, src_mac=p.src_mac, q0=q, flow=-1,
                         vlan=-1 if p.vlan is None else p.vlan)
    cev = sum(1 << x for x in p.priorities)
    return Rows.make(ts.size, ts_ns=ts, kind=Kind.PFC, src_mac=p.src_mac, q0=q, pfc_cev=cev,
                     prio_q=cev, flow=-1, vlan=-1 if p.vlan is None else p.vlan)



@dataclass(frozen=True, slots=True)
class Packets:
    """Every port's packet table (time-sorted) and the intent behind them."""

    tables: dict[str, Rows]
    flows: list[FlowTruth]  # per scenario flow
    pause_frames: list[list[tuple[int, int]]]  # per scenario pause: (ts_ns, quanta)


def build_packets(scenario: Scenario, opts: AnalysisOptions = DEFAULT_OPTIONS) -> Packets:
    """The packets each port captures, and the generator's intent (``opts``: the
    thresholds the intent is stated for, e.g. the CNP-rate gap)."""
    t0 = scenario.epoch_ns
    link = {p.name: p.link_bps for p in scenario.ports}
    pause_frames = [_pause_frames(p, t0) for p in scenario.pauses]
    # Paused intervals per (port, pausing MAC, priority).
    paused_by: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
    for p, frames in zip(scenario.pauses, pause_frames, strict=True):
        ivs = pause_intervals(frames, link[p.port])
        for prio in (p.priorities if p.priorities is not None else range(8)):
            paused_by.setdefault((p.port, p.src_mac, prio), []).extend(ivs)
    port_rows: dict[str, list[Rows]] = {p.name: [] for p in scenario.ports}
    flow_truth: list[FlowTruth] = []
    for fidx, f in enumerate(scenario.flows):
        paused: list[tuple[int, int]] = []
        responses_paused: list[tuple[int, int]] = []
        for h in f.hops:
            paused.extend(paused_by.get((h.port, h.dst_mac, f.priority), []))
            responses_paused.extend(paused_by.get((h.port, h.src_mac, f.priority), []))
        paused.sort()
        responses_paused.sort()
        rows, truth = _flow_rows(f, fidx, t0, paused, link[f.hops[0].port], responses_paused,
                                 cnp_min_gap_ns=opts.cnp_min_gap_ns)
        flow_truth.append(truth)
        for h in f.hops:
            r = Rows({k: v.copy() for k, v in rows.cols.items()})
            r.cols["ts_ns"] += h.delay_ns
            d = r.cols["dir"] == 0
            r.cols["src_mac"] = np.where(d, h.src_mac, h.dst_mac).astype(np.uint64)
            r.cols["dst_mac"] = np.where(d, h.dst_mac, h.src_mac).astype(np.uint64)
            port_rows[h.port].append(r)
    for p, frames in zip(scenario.pauses, pause_frames, strict=True):
        port_rows[p.port].append(_pause_rows(p, frames))
    for s in scenario.xon_storms:
        a = t0 + s.start_ns
        ts = np.arange(a, a + s.duration_ns, s.interval_ns, dtype=np.int64)
        port_rows[s.port].append(Rows.make(ts.size, ts_ns=ts, kind=Kind.PFC, src_mac=s.src_mac,
                                           q0=0, pfc_cev=1 << s.priority, flow=-1, vlan=-1))
    tables = {name: Rows.concat(parts).sorted() for name, parts in port_rows.items()}
    return Packets(tables, flow_truth, pause_frames)
