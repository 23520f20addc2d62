"""The ``flows`` of a result document, made from the per-flow columns a chunk at a time.

A capture's ``FlowResults`` are columns (numpy arrays, one value per flow id).
Its flow documents (one per QP, the schema's ``flows``) are made from them
``CHUNK_FLOWS`` documents at a time, most bytes first, in two renderings of the
same values:

- ``FlowDocuments`` iterates dicts (for the findings, the text report and the
  tests), made from one chunk's columns converted to lists in bulk;
- ``FlowDocuments.json_lines`` gives each document's JSON text directly, with
  the numbers formatted as ``json.dumps`` formats them (``%d`` for ints,
  ``repr`` for floats), so ``report.write_json`` writes 100,000 flows without
  making 100,000 dict trees and encoding them again.
  ``tests/test_analyze_flowdocs.py`` proves the text equal to ``json.dumps`` of
  the dict for every flow of captures that use every field.

Latency summaries come from every sketch of the chunk at once
(``sketch_summaries``: the rank of each quantile searched in one cumulative
sum of all the chunk's buckets), to the same values as
``LatencySketch.summary_s``. Memory: the columns plus one chunk of documents.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from netio.analyze.columns import FlowKey
from netio.analyze.connections import Connection
from netio.analyze.flows import SAMPLE_KINDS, SLOT_OPCODE, FlowKeys, FlowResults, SketchTable
from netio.analyze.options import AnalysisOptions
from netio.analyze.sketch import SUB_BITS
from netio.analyze.units import format_ip_int, format_mac_int
from netio.wire.bth import OPCODE_TABLE
from netio.wire.ext import NakCode, rnr_timer_s

I64 = npt.NDArray[np.int64]
#: Documents made per step (their columns are converted to lists together).
CHUNK_FLOWS = 2048


def _opcode_name(op: int) -> str:
    info = OPCODE_TABLE[op]
    return info.opcode.name if info is not None else f"0x{op:02x}"


SLOT_NAMES: tuple[str, ...] = tuple(_opcode_name(op) for op in SLOT_OPCODE)
NAK_NAMES: tuple[str, ...] = tuple(
    NakCode(code).name if code in NakCode._value2member_map_ else f"CODE_{code}"
    for code in range(32))
_RNR_TIMERS_S: tuple[float, ...] = tuple(rnr_timer_s(x) for x in range(32))


def ip_text(value: int, v6: bool) -> str:
    return format_ip_int(value, v6)


def connection_name(c: Connection) -> str:
    """``ACTIVE qp 0xQ <-> PASSIVE qp 0xQ`` (service 0x...)."""
    passive = "?" if c.passive is None else \
        f"{ip_text(*c.passive)} qp 0x{c.passive_qpn or 0:x}"
    return (f"{ip_text(*c.active)} qp 0x{c.active_qpn:x} <-> {passive} "
            f"(service 0x{c.service_id:016x})")


def _name_by_connection(docs: list[dict[str, Any]], conns: list[Connection]) -> None:
    """Set each flow document's ``connection`` to the connection whose QP it is sent to."""
    index: dict[tuple[str, int], Connection] = {}
    for c in conns:
        index[(ip_text(*c.active), c.active_qpn)] = c
        if c.passive is not None and c.passive_qpn is not None:
            index[(ip_text(*c.passive), c.passive_qpn)] = c
    for d in docs:
        owner = index.get((d["dst_ip"], d["dest_qp"]))
        if owner is None and d["reverse"] is not None:  # named by its reverse direction
            owner = index.get((d["src_ip"], d["reverse"]["dest_qp"]))
        if owner is not None:
            d["connection"] = connection_name(owner)


def primary_flows(fr: FlowResults) -> npt.NDArray[np.intp]:
    """The flows that head a document, most bytes first: every unpaired flow, and of
    each pair the one that sent requests (when only one did), else the one with more
    bytes (the earlier in capture order on a tie). The other of a pair is its reverse."""
    c = fr.c
    n = fr.n
    order = np.argsort(-c["bytes"], kind="stable")
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    pair = c["pair"]
    paired = pair >= 0
    p = np.where(paired, pair, 0)
    mine, theirs = c["requests"] > 0, c["requests"][p] > 0
    primary = ~paired | (~(~mine & theirs) & ((mine & ~theirs) | (pos < pos[p])))
    out: npt.NDArray[np.intp] = order[primary[order]]
    return out


#: Counters of a flow's own direction and of its reverse direction (as a document
#: reports them) any of which may make the flow a finding (``findings._flow_problems``).
_PROBLEM_FORWARD = ("gap_packets", "dups", "ooo", "icrc_bad", "ce", "cnp_violations")
_PROBLEM_REVERSE = ("rr_gap_packets", "rr_dups", "rr_ooo", "rnr", "naks", "ce",
                    "cnp_violations")


def problem_flows(fr: FlowResults) -> npt.NDArray[np.bool_]:
    """Per flow id, as the head of a document: whether a counter that
    ``findings._flow_problems`` reads is non-zero. (A bad ICRC on the reverse
    direction is not a finding, so 100,000 flows whose ACKs fail the ICRC check do
    not make 100,000 documents for the findings.)"""
    c = fr.c
    fwd = np.zeros(fr.n, np.bool_)
    for name in _PROBLEM_FORWARD:
        fwd |= c[name] != 0
    rev = np.zeros(fr.n, np.bool_)
    for name in _PROBLEM_REVERSE:
        rev |= c[name] != 0
    pair = c["pair"]
    either: npt.NDArray[np.bool_] = fwd | np.where(pair >= 0, rev[np.maximum(pair, 0)],
                                                    False)
    return either


# ------------------------------------------------------------- sketches


def _bucket_values(index: I64) -> npt.NDArray[np.float64]:
    """``sketch.bucket_value`` of each bucket index, computed as it computes it."""
    sub = 1 << SUB_BITS
    g, j = np.divmod(index, sub)
    shift = np.maximum(g - 1, 0)
    lo = np.where(index < sub, index, (sub + j) << shift)
    top = np.where(index < sub, index, lo + (np.int64(1) << shift) - 1)
    lo_f, top_f = lo.astype(np.float64), top.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mid = 2.0 * lo_f * top_f / (lo + top).astype(np.float64)
    out: npt.NDArray[np.float64] = np.where(lo == top, lo_f, mid)
    return out


def sketch_summaries(table: SketchTable, fids: I64, kind: str) -> list[dict[str, Any] | None]:
    """``flows.summary_s`` of the ``kind`` sketch of each of ``fids`` (-1: none), all at
    once: the same {count, min, p50, p90, p99, max} in seconds, None without samples."""
    out: list[dict[str, Any] | None] = [None] * len(fids)
    if not len(table.rows) or not len(fids):
        return out
    want = fids * len(SAMPLE_KINDS) + SAMPLE_KINDS.index(kind)
    pos = np.minimum(np.searchsorted(table.rows, want), len(table.rows) - 1)
    has = (fids >= 0) & (table.rows[pos] == want)
    if not has.any():
        return out
    at = np.nonzero(has)[0]
    rows = pos[at]
    lo_index, count, mn, mx = (table.heads[rows, k] for k in (0, 2, 3, 4))
    starts = table.starts[rows]
    cum = table.cumulative()
    base = np.where(starts > 0, cum[np.maximum(starts - 1, 0)], 0)
    quantiles = []
    for q in (0.50, 0.90, 0.99):
        rank = round(q * 1_000_000) * (count - 1) // 1_000_000  # as quantile_ns
        b = np.searchsorted(cum, base + rank, side="right") - starts
        v = np.minimum(np.maximum(_bucket_values(lo_index + b), mn.astype(np.float64)),
                       mx.astype(np.float64))
        v = np.where(rank == 0, mn.astype(np.float64),
                     np.where(rank == count - 1, mx.astype(np.float64), v))
        quantiles.append((v / 1e9).tolist())
    for i, c, a, p50, p90, p99, z in zip(at.tolist(), count.tolist(), (mn / 1e9).tolist(),
                                         *quantiles, (mx / 1e9).tolist(), strict=True):
        out[i] = {"count": c, "min": a, "p50": p50, "p90": p90, "p99": p99, "max": z}
    return out


# ---------------------------------------------------------------- chunks


def _gather(sorted_ids: I64, ids: I64) -> tuple[I64, list[int], list[int]]:
    """The rows of each of ``ids`` in an ascending id column, one after the other:
    (row numbers, where each id's rows start among them, how many)."""
    a = np.searchsorted(sorted_ids, ids, side="left")
    lens = np.searchsorted(sorted_ids, ids, side="right") - a
    offs = np.cumsum(lens) - lens
    rows = np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(offs - a, lens)
    return rows, offs.tolist(), lens.tolist()


def _key_columns(fr: FlowResults, ids: I64
                 ) -> tuple[list[int], list[int], list[int], list[bool]]:
    """(src IPs, dst IPs, dest QPs, IPv6 flags) of flows ``ids``."""
    if isinstance(fr.keys, FlowKeys):
        return fr.keys.columns(ids)
    keys: list[FlowKey] = [fr.keys[i] for i in ids.tolist()]
    return ([k.src_ip for k in keys], [k.dst_ip for k in keys], [k.dest_qp for k in keys],
            [k.ipv6 for k in keys])


_F_NAMES = ("pcp", "packets", "bytes", "payload", "data_payload", "messages", "requests",
            "gaps", "gap_packets", "dups", "ooo", "icrc_bad", "icrc_checked", "ect", "ce",
            "fecn", "becn", "cnps", "cnp_violations")
_R_NAMES = ("packets", "bytes", "payload", "data_payload", "requests", "icrc_bad", "ect",
            "ce", "fecn", "becn", "cnps", "cnp_violations", "rr_packets", "rr_gaps",
            "rr_gap_packets", "rr_dups", "rr_ooo", "rnr", "rnr_codes")


class _Chunk:
    """One chunk of documents' values as lists: of the heads (``fv``, flow ids ``fids``)
    and of their reverse directions (``rv``, zero where ``rid`` is -1: none)."""

    def __init__(self, fr: FlowResults, fids: I64, origin: int, interval_ns: int) -> None:
        c = fr.c
        pair = c["pair"][fids]
        has = pair >= 0
        rids = np.where(has, pair, -1)
        r0 = np.where(has, pair, 0)
        self.n = len(fids)
        self.rid: list[int] = rids.tolist()
        self.fv: dict[str, list[int]] = {n: c[n][fids].tolist() for n in _F_NAMES}
        self.rv: dict[str, list[int]] = {n: np.where(has, c[n][r0], 0).tolist()
                                         for n in _R_NAMES}
        first, last = c["first_ts"][fids], c["last_ts"][fids]
        self.first_s: list[float] = ((first - origin) / 1e9).tolist()
        self.last_s: list[float] = ((last - origin) / 1e9).tolist()
        # Goodput (one definition, README and schema): the data the QP moved either
        # way, over the time from the first to the last packet of either direction.
        goodput = c["data_payload"][fids] + np.where(has, c["data_payload"][r0], 0)
        both_first = np.where(has, np.minimum(first, c["first_ts"][r0]), first)
        both_last = np.where(has, np.maximum(last, c["last_ts"][r0]), last)
        dur = np.maximum(1, both_last - both_first)
        self.goodput: list[int] = goodput.tolist()
        self.goodput_bps: list[float] = (goodput * 8 / (dur / 1e9)).tolist()
        req = c["requests"][fids]
        retx = c["dups"][fids] + c["ooo"][fids]
        self.retx: list[int] = retx.tolist()
        self.ratio: list[float] = np.where(req > 0, retx / np.maximum(req, 1), 0.0).tolist()
        src, dst, qps, v6 = _key_columns(fr, fids)
        ips: dict[tuple[int, bool], str] = {}

        def ip(value: int, v6: bool) -> str:
            t = ips.get((value, v6))
            if t is None:
                t = ips[(value, v6)] = format_ip_int(value, v6)
            return t

        self.src_ip = [ip(a, b) for a, b in zip(src, v6, strict=True)]
        self.dst_ip = [ip(a, b) for a, b in zip(dst, v6, strict=True)]
        self.dest_qp = qps
        self.rev_qp = _key_columns(fr, r0)[2]
        macs: dict[int, str] = {}

        def mac(value: int) -> str:
            t = macs.get(value)
            if t is None:
                t = macs[value] = format_mac_int(value)
            return t

        self.src_mac = [mac(m) for m in c["src_mac"][fids].tolist()]
        self.dst_mac = [mac(m) for m in c["dst_mac"][fids].tolist()]
        self.opcodes = self._named(fr.opcodes, fids, SLOT_NAMES)
        self.rev_opcodes = self._named(fr.opcodes, rids, SLOT_NAMES)
        self.naks = self._named(fr.naks, rids, NAK_NAMES)
        self.lat_ack = sketch_summaries(fr.sketches, fids, "ack")
        self.lat_read = sketch_summaries(fr.sketches, fids, "read")
        self.lat_cnp = sketch_summaries(fr.sketches, fids, "cnp")
        self.rlat_cnp = sketch_summaries(fr.sketches, rids, "cnp")
        self.interval_s = interval_ns / 1e9
        self.tput = self._series(fr, fids, interval_ns)
        self.rtput = self._series(fr, rids, interval_ns)

    @staticmethod
    def _named(triples: I64, ids: I64, names: tuple[str, ...]) -> list[list[tuple[str, int]]]:
        """Each id's non-zero (name, count) pairs, in slot order ([] for id -1)."""
        rows, offs, lens = _gather(triples[:, 0], ids)
        got = list(zip([names[x] for x in triples[rows, 1].tolist()],
                       triples[rows, 2].tolist(), strict=True))
        return [got[o:o + k] for o, k in zip(offs, lens, strict=True)]

    def _series(self, fr: FlowResults, ids: I64, interval_ns: int
                ) -> list[tuple[list[float], list[float]]]:
        """Each id's throughput series: (interval starts in s, bits/s)."""
        t = fr.series
        rows, offs, lens = _gather(t.fids, ids)
        start_s: list[float] = (t.bins[rows] * interval_ns / 1e9).tolist()
        bps: list[float] = (t.vals[rows] * 8 / self.interval_s).tolist()
        return [(start_s[o:o + k], bps[o:o + k]) for o, k in zip(offs, lens, strict=True)]


def _chunks(fr: FlowResults, order: npt.NDArray[np.intp], origin: int,
            opts: AnalysisOptions) -> Iterator[_Chunk]:
    for lo in range(0, len(order), CHUNK_FLOWS):
        yield _Chunk(fr, order[lo:lo + CHUNK_FLOWS].astype(np.int64), origin, opts.interval_ns)


def _ecn(f: dict[str, list[int]], r: dict[str, list[int]], j: int, paired: bool,
         reaction: dict[str, Any] | None) -> dict[str, Any]:
    """The ``ecn`` of the direction whose values are ``f`` (``r``: the other one's)."""
    return {
        "ect_packets": f["ect"][j], "ce_packets": f["ce"][j],
        "cnps": r["cnps"][j] if paired else 0, "cnp_reaction_s": reaction,
        "cnp_rate_violations": r["cnp_violations"][j] if paired else 0,
        "fecn_packets": f["fecn"][j], "becn_packets": f["becn"][j],
    }


def _docs(capture: str, ch: _Chunk) -> Iterator[dict[str, Any]]:
    """The chunk's documents as dicts (the schema's ``flows`` entries)."""
    fv, rv = ch.fv, ch.rv
    for j in range(ch.n):
        paired = ch.rid[j] >= 0
        rr = rv["rr_packets"][j] if paired else 0
        dups, ooo = rv["rr_dups"][j], rv["rr_ooo"][j]
        codes = rv["rnr_codes"][j] if paired else 0
        start_s, bps = ch.tput[j]
        doc: dict[str, Any] = {
            "capture": capture, "src_ip": ch.src_ip[j], "dst_ip": ch.dst_ip[j],
            "dest_qp": ch.dest_qp[j], "priority": fv["pcp"][j],
            "src_mac": ch.src_mac[j], "dst_mac": ch.dst_mac[j],
            "first_ts_s": ch.first_s[j], "last_ts_s": ch.last_s[j],
            "packets": fv["packets"][j], "bytes": fv["bytes"][j],
            "payload_bytes": fv["payload"][j], "goodput_bytes": ch.goodput[j],
            "data_bytes": fv["data_payload"][j], "goodput_bps": ch.goodput_bps[j],
            "opcodes": dict(ch.opcodes[j]), "messages": fv["messages"][j],
            "request_packets": fv["requests"][j],
            "psn_gaps": fv["gaps"][j], "psn_gap_packets": fv["gap_packets"][j],
            "duplicate_packets": fv["dups"][j], "out_of_order_packets": fv["ooo"][j],
            "retransmitted_packets": ch.retx[j], "retransmission_ratio": ch.ratio[j],
            "read_responses": None if not rr else {
                "packets": rr, "psn_gaps": rv["rr_gaps"][j],
                "psn_gap_packets": rv["rr_gap_packets"][j], "duplicate_packets": dups,
                "out_of_order_packets": ooo, "retransmitted_packets": dups + ooo},
            "naks": dict(ch.naks[j]),
            "rnr_naks": rv["rnr"][j] if paired else 0,
            "rnr_timer_s": [_RNR_TIMERS_S[x] for x in range(32) if codes >> x & 1],
            "ack_latency_s": ch.lat_ack[j], "read_latency_s": ch.lat_read[j],
            "icrc_failures": fv["icrc_bad"][j],
            "icrc_checked_packets": fv["icrc_checked"][j],
            "ecn": _ecn(fv, rv, j, paired, ch.lat_cnp[j]),
            "throughput": {"interval_s": ch.interval_s, "start_s": start_s, "bps": bps},
            "connection": None,
            "reverse": None,
        }
        if paired:
            r_start, r_bps = ch.rtput[j]
            doc["reverse"] = {
                "dest_qp": ch.rev_qp[j], "packets": rv["packets"][j],
                "bytes": rv["bytes"][j], "payload_bytes": rv["payload"][j],
                "data_bytes": rv["data_payload"][j],
                "opcodes": dict(ch.rev_opcodes[j]), "ecn": _ecn(rv, fv, j, True, ch.rlat_cnp[j]),
                "icrc_failures": rv["icrc_bad"][j],
                "request_packets": rv["requests"][j],
                "throughput": {"interval_s": ch.interval_s, "start_s": r_start, "bps": r_bps},
            }
        yield doc


# ------------------------------------------------------------ JSON text

_enc = json.JSONEncoder().encode


def _obj_text(pairs: list[tuple[str, int]]) -> str:
    if not pairs:
        return "{}"
    return "{" + ", ".join(f'"{k}": {v}' for k, v in pairs) + "}"


def _floats_text(xs: list[float]) -> str:
    if not xs:
        return "[]"
    return "[" + ", ".join(map(repr, xs)) + "]"


def _summary_text(s: dict[str, Any] | None) -> str:
    if s is None:
        return "null"
    return (f'{{"count": {s["count"]}, "min": {s["min"]!r}, "p50": {s["p50"]!r}, '
            f'"p90": {s["p90"]!r}, "p99": {s["p99"]!r}, "max": {s["max"]!r}}}')


_RR_TEXT = ('{"packets": %d, "psn_gaps": %d, "psn_gap_packets": %d, "duplicate_packets": %d, '
            '"out_of_order_packets": %d, "retransmitted_packets": %d}')
_ECN_TEXT = ('{"ect_packets": %d, "ce_packets": %d, "cnps": %d, "cnp_reaction_s": %s, '
             '"cnp_rate_violations": %d, "fecn_packets": %d, "becn_packets": %d}')
_HEAD_TEXT = (
    '{"capture": %s, "src_ip": "%s", "dst_ip": "%s", "dest_qp": %d, "priority": %d, '
    '"src_mac": "%s", "dst_mac": "%s", "first_ts_s": %r, "last_ts_s": %r, "packets": %d, '
    '"bytes": %d, "payload_bytes": %d, "goodput_bytes": %d, "data_bytes": %d, '
    '"goodput_bps": %r, "opcodes": %s, "messages": %d, "request_packets": %d, '
    '"psn_gaps": %d, "psn_gap_packets": %d, "duplicate_packets": %d, '
    '"out_of_order_packets": %d, "retransmitted_packets": %d, "retransmission_ratio": %r, '
    '"read_responses": %s, "naks": %s, "rnr_naks": %d, "rnr_timer_s": %s, '
    '"ack_latency_s": %s, "read_latency_s": %s, "icrc_failures": %d, '
    '"icrc_checked_packets": %d, "ecn": %s, '
    '"throughput": {"interval_s": %s, "start_s": %s, "bps": %s}, "connection": null, '
    '"reverse": %s}')
_REVERSE_TEXT = (
    '{"dest_qp": %d, "packets": %d, "bytes": %d, "payload_bytes": %d, "data_bytes": %d, '
    '"opcodes": %s, "ecn": %s, "icrc_failures": %d, "request_packets": %d, '
    '"throughput": {"interval_s": %s, "start_s": %s, "bps": %s}}')


def _texts(capture: str, ch: _Chunk) -> list[str]:
    """The chunk's documents as JSON text, as ``json.dumps`` writes the dicts of
    ``_docs`` (default separators). Made piece by piece over the whole chunk (one
    comprehension per nested part, then one format per document), not field by field."""
    fv, rv = ch.fv, ch.rv
    paired = [r >= 0 for r in ch.rid]
    rr_text = [_RR_TEXT % (n, g, gp, d, o, d + o) if n else "null"
               for n, g, gp, d, o in zip(rv["rr_packets"], rv["rr_gaps"], rv["rr_gap_packets"],
                                         rv["rr_dups"], rv["rr_ooo"], strict=True)]
    timers = [_floats_text([_RNR_TIMERS_S[x] for x in range(32) if codes >> x & 1])
              if codes else "[]" for codes in rv["rnr_codes"]]
    ecn = [_ECN_TEXT % t for t in zip(fv["ect"], fv["ce"], rv["cnps"],
                                      map(_summary_text, ch.lat_cnp), rv["cnp_violations"],
                                      fv["fecn"], fv["becn"], strict=True)]
    interval_s = repr(ch.interval_s)
    reverse = [
        _REVERSE_TEXT % (qp, pk, by, pl, dp, _obj_text(op),
                         _ECN_TEXT % (ect, ce, cnps, _summary_text(lat), viol, fe, be),
                         bad, req, interval_s, _floats_text(st), _floats_text(bps))
        if p else "null"
        for p, qp, pk, by, pl, dp, op, ect, ce, cnps, lat, viol, fe, be, bad, req, (st, bps)
        in zip(paired, ch.rev_qp, rv["packets"], rv["bytes"], rv["payload"],
               rv["data_payload"], ch.rev_opcodes, rv["ect"], rv["ce"], fv["cnps"],
               ch.rlat_cnp, fv["cnp_violations"], rv["fecn"], rv["becn"], rv["icrc_bad"],
               rv["requests"], ch.rtput, strict=True)]
    cap = [_enc(capture)] * ch.n
    return [_HEAD_TEXT % t for t in zip(
        cap, ch.src_ip, ch.dst_ip, ch.dest_qp, fv["pcp"], ch.src_mac, ch.dst_mac, ch.first_s,
        ch.last_s, fv["packets"], fv["bytes"], fv["payload"], ch.goodput, fv["data_payload"],
        ch.goodput_bps, map(_obj_text, ch.opcodes), fv["messages"], fv["requests"],
        fv["gaps"], fv["gap_packets"], fv["dups"], fv["ooo"], ch.retx, ch.ratio, rr_text,
        map(_obj_text, ch.naks), rv["rnr"], timers, map(_summary_text, ch.lat_ack),
        map(_summary_text, ch.lat_read), fv["icrc_bad"], fv["icrc_checked"], ecn,
        [interval_s] * ch.n, map(_floats_text, (t[0] for t in ch.tput)),
        map(_floats_text, (t[1] for t in ch.tput)), reverse, strict=True)]


# ------------------------------------------------------------- documents


def flow_docs(capture: str, fr: FlowResults, opts: AnalysisOptions, origin: int,
              conns: list[Connection], only_problems: bool = False
              ) -> Iterator[dict[str, Any]]:
    """The flow documents of one capture, most bytes first, one at a time (with
    ``only_problems``, those of ``problem_flows``)."""
    if fr.n == 0:
        return
    order = primary_flows(fr)
    if only_problems:
        order = order[problem_flows(fr)[order]]
    for ch in _chunks(fr, order, origin, opts):
        for doc in _docs(capture, ch):
            if conns:
                _name_by_connection([doc], conns)
            yield doc


def flow_texts(capture: str, fr: FlowResults, opts: AnalysisOptions, origin: int,
               conns: list[Connection]) -> Iterator[str]:
    """The JSON text of each of ``flow_docs`` (the documents themselves, encoded, when
    some flows are named by a CM connection)."""
    if conns:
        yield from map(_enc, flow_docs(capture, fr, opts, origin, conns))
        return
    if fr.n == 0:
        return
    for ch in _chunks(fr, primary_flows(fr), origin, opts):
        yield from _texts(capture, ch)


class FlowDocuments(Sequence[dict[str, Any]]):
    """The ``flows`` of a document, made a chunk at a time from the per-flow columns
    each time they are iterated (``analyze(..., stream_flows=True)``): memory stays at
    the columns (a few hundred bytes per flow) instead of a dict tree per flow.
    Iterating twice gives equal documents; ``list()`` makes the plain list;
    ``json_lines`` gives their JSON text."""

    def __init__(self) -> None:
        self._parts: list[tuple[int, Callable[[bool], Iterator[dict[str, Any]]],
                                Callable[[], Iterator[str]]]] = []
        self._n = 0

    def add(self, n: int, make: Callable[[bool], Iterator[dict[str, Any]]],
            texts: Callable[[], Iterator[str]]) -> None:
        """``make(only_problems)``: the documents of one capture (with True: at least
        those of the flows whose counters show a loss, retransmission, NAK, bad ICRC,
        CE mark or DCQCN violation); ``texts()``: the JSON text of each document."""
        self._parts.append((n, make, texts))
        self._n += n

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for _, make, _ in self._parts:
            yield from make(False)

    def json_lines(self) -> Iterator[str]:
        """Each document's JSON text (as ``json.dumps`` writes it), in order."""
        for _, _, texts in self._parts:
            yield from texts()

    def first_of_each(self, n: int) -> Iterator[dict[str, Any]]:
        """The first ``n`` documents of each capture (its flows with the most bytes),
        made without the others (the text report's --top)."""
        for _, make, _ in self._parts:
            yield from itertools.islice(make(False), n)

    def with_problems(self) -> Iterator[dict[str, Any]]:
        """The documents of the flows that may have a problem (for the findings), in
        document order: a subset of the flows, never missing one with a problem."""
        for _, make, _ in self._parts:
            yield from make(True)

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return list(self)[i]


__all__ = ["CHUNK_FLOWS", "FlowDocuments", "connection_name", "flow_docs", "flow_texts",
           "primary_flows", "problem_flows", "sketch_summaries"]
