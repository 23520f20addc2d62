"""Run every analysis over one or more captures, chunk by chunk, into one result.

Each capture is mapped and scanned natively (``netio.pcap.scan``), its records
extracted into columns (``netio.analyze.extract``), and the columns fed to the
pause and flow analyzers, which carry only small state between chunks. Memory
is therefore O(flows + pause intervals), not O(packets). The result is the
JSON document described in ``netio.analyze.schema``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from netio import __version__, native
from netio.analyze.columns import Flag, Kind, PacketColumns
from netio.analyze.extract import CHUNK_RECORDS, CaptureChunks
from netio.analyze.fairness import fairness, incasts
from netio.analyze.flows import FlowAnalyzer, summary_s
from netio.analyze.options import AnalysisOptions
from netio.analyze.pfc import PauseAnalyzer, QueueState, paused_within
from netio.analyze.schema import SCHEMA_VERSION
from netio.analyze.spreading import ASSUMPTIONS, FlowSeen, PauseEvent, build_chains
from netio.analyze.storms import detect_storms
from netio.analyze.units import format_ipv4_int, format_mac_int
from netio.errors import CaptureError, CaptureWarning
from netio.pcap.scan import CaptureScanner
from netio.wire.bth import OPCODE_TABLE
from netio.wire.ext import NakCode, rnr_timer_s

#: Called after each chunk with (bytes done, bytes total) over all captures.
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class CaptureInput:
    name: str
    path: str


def capture_names(paths: Sequence[str]) -> list[CaptureInput]:
    """Name each capture by its file stem (made unique with its index if needed)."""
    stems = [Path(p).stem for p in paths]
    out = []
    for i, (p, s) in enumerate(zip(paths, stems, strict=True)):
        out.append(CaptureInput(s if stems.count(s) == 1 else f"{s}#{i}", p))
    return out


def _first_ts(path: str) -> int | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)  # reported by the full pass
        try:
            with CaptureScanner(path) as sc:
                for chunk in sc.chunks(1):
                    return int(chunk.ts_ns[0])
        except CaptureError:
            return None
    return None


def _filter(cols: PacketColumns, opts: AnalysisOptions, origin: int) -> PacketColumns:
    keep = np.ones(len(cols), np.bool_)
    if opts.start_ns is not None:
        keep &= cols.ts_ns >= origin + opts.start_ns
    if opts.end_ns is not None:
        keep &= cols.ts_ns < origin + opts.end_ns
    roce = cols.kind == Kind.ROCE
    if opts.priorities is not None:
        allowed = np.zeros(8, np.bool_)
        allowed[list(opts.priorities)] = True
        tagged = (cols.flags & Flag.VLAN) != 0
        keep &= ~roce | (tagged & allowed[cols.pcp & 7])
    if opts.flow is not None:
        fl = opts.flow
        fwd = np.ones(len(cols), np.bool_)
        rev = np.ones(len(cols), np.bool_)
        if fl.src_ip is not None:
            fwd &= cols.src_ip == fl.src_ip
            rev &= cols.dst_ip == fl.src_ip
        if fl.dst_ip is not None:
            fwd &= cols.dst_ip == fl.dst_ip
            rev &= cols.src_ip == fl.dst_ip
        if fl.dest_qp is not None:
            fwd &= cols.dest_qp == fl.dest_qp
        keep &= ~roce | fwd | rev
    return cols if keep.all() else cols.take(keep)


def analyze(paths: Sequence[str], opts: AnalysisOptions, *, use_native: bool | None = None,
            progress: Progress | None = None, chunk_records: int = CHUNK_RECORDS
            ) -> dict[str, Any]:
    """Analyse ``paths`` together; returns the JSON-ready result document."""
    if use_native is None:
        use_native = native.AVAILABLE
    inputs = capture_names(paths)
    firsts = [t for t in (_first_ts(c.path) for c in inputs) if t is not None]
    origin = min(firsts) if firsts else 0
    total_bytes = sum(_size(c.path) for c in inputs)
    done_before = 0
    captures: list[dict[str, Any]] = []
    queues: list[tuple[QueueState, dict[str, Any]]] = []
    flow_results: list[tuple[dict[str, Any], FlowAnalyzer]] = []
    warnings: list[str] = []
    for cap in inputs:
        link = opts.link_for(cap.name)
        pa = PauseAnalyzer(cap.name, link, xon_gap_ns=opts.xon_gap_ns,
                           xon_storm_ns=opts.xon_storm_ns, priorities=opts.priorities)
        fa = FlowAnalyzer(cap.name, origin, opts.interval_ns, opts.cnp_min_gap_ns,
                          use_native=use_native)
        chunks = CaptureChunks(cap.path, use_native, chunk_records, opts.verify_icrc)
        kinds = np.zeros(5, np.int64)
        first = last = None
        records = 0
        error = None
        try:
            for cols in chunks:
                records += len(cols)
                cols = _filter(cols, opts, origin)
                if len(cols):
                    first = int(cols.ts_ns[0]) if first is None else first
                    last = int(cols.ts_ns[-1])
                    kinds += np.bincount(cols.kind, minlength=5)[:5]
                    pa.feed(cols)
                    fa.feed(cols)
                if progress is not None:
                    progress(done_before + chunks.bytes_done, total_bytes)
        except CaptureError as exc:
            error = str(exc)
        done_before += chunks.file_bytes
        cap_warnings = list(chunks.warnings)
        if error is not None:
            cap_warnings.append(error)
        if kinds[Kind.ROCE] == 0 and records and error is None:
            cap_warnings.append(f"{cap.path}: no RoCEv2 packets (UDP port 4791) among "
                                f"{records} records")
        if records == 0 and error is None:
            cap_warnings.append(f"{cap.path}: the capture holds no packets")
        if kinds[Kind.MALFORMED]:
            cap_warnings.append(f"{cap.path}: {int(kinds[Kind.MALFORMED])} frames could not "
                                "be decoded (malformed or cut before their RoCE headers)")
        warnings.extend(cap_warnings)
        f0 = first if first is not None else origin
        l0 = last if last is not None else f0
        entry = {
            "name": cap.name, "path": cap.path, "records": records,
            "packets": int(kinds.sum()), "roce_packets": int(kinds[Kind.ROCE]),
            "pfc_frames": int(kinds[Kind.PFC]), "pause_frames": int(kinds[Kind.PAUSE]),
            "other_packets": int(kinds[Kind.OTHER]),
            "malformed_packets": int(kinds[Kind.MALFORMED]),
            "first_ts_s": (f0 - origin) / 1e9, "last_ts_s": (l0 - origin) / 1e9,
            "duration_s": (l0 - f0) / 1e9, "link_bps": link,
            "complete": error is None and not chunks.warnings,
            "readable": error is None or records > 0, "warnings": cap_warnings,
        }
        captures.append(entry)
        for q in pa.finish():
            queues.append((q, entry))
        flow_results.append((entry, fa))
    return _document(captures, queues, flow_results, warnings, origin, opts, use_native)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _pause_docs(queues: list[tuple[QueueState, dict[str, Any]]], origin: int,
                opts: AnalysisOptions) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                list[dict[str, Any]], list[PauseEvent]]:
    senders: list[dict[str, Any]] = []
    storms: list[dict[str, Any]] = []
    xon_storms: list[dict[str, Any]] = []
    events: list[PauseEvent] = []

    def rel(ns: int) -> float:
        return (ns - origin) / 1e9

    for q, cap in queues:
        first = origin + round(cap["first_ts_s"] * 1e9)
        last = origin + round(cap["last_ts_s"] * 1e9)
        dur = last - first
        ivs = q.intervals
        base = {"capture": q.capture, "src_mac": format_mac_int(q.src_mac), "vlan": q.vlan,
                "kind": q.kind, "priority": q.priority}
        frames = q.xoff_frames + q.xon_frames
        senders.append({
            **base, "xoff_frames": q.xoff_frames, "xon_frames": q.xon_frames,
            "intervals": [[rel(s), rel(e)] for s, e in ivs],
            "paused_s": sum(e - s for s, e in ivs) / 1e9,
            "longest_pause_s": max((e - s for s, e in ivs), default=0) / 1e9,
            "paused_fraction": paused_within(ivs, first, last) / dur if dur > 0 else 0.0,
            "frame_rate_per_s": frames / (dur / 1e9) if dur > 0 else 0.0,
        })
        for st in detect_storms(ivs, opts.storm_ns, opts.restore_ns):
            storms.append({**base, "start_s": rel(st.start_ns), "end_s": rel(st.end_ns),
                           "duration_s": st.duration_ns / 1e9,
                           "detected_s": rel(st.detected_ns), "restored_s": rel(st.restored_ns),
                           "intervals": st.intervals})
        for s, e, n in q.xon_storms:
            xon_storms.append({**base, "start_s": rel(s), "end_s": rel(e), "xon_frames": n,
                               "rate_per_s": n / ((e - s) / 1e9) if e > s else 0.0})
        events.extend(PauseEvent(s, q.capture, q.src_mac, q.priority) for s, _ in ivs)
    storms.sort(key=lambda s: -s["duration_s"])
    return senders, storms, xon_storms, events


def _ecn_doc(fa: FlowAnalyzer, d: int) -> dict[str, Any]:
    c = fa.c
    k = fa.pair.get(d)
    return {
        "ect_packets": int(c["ect"][d]), "ce_packets": int(c["ce"][d]),
        "cnps": int(c["cnps"][k]) if k is not None else 0,
        "cnp_reaction_s": summary_s(fa.cnp.delays_ns(d)),
        "cnp_rate_violations": fa.cnp.violations.get(k, 0) if k is not None else 0,
        "fecn_packets": int(c["fecn"][d]), "becn_packets": int(c["becn"][d]),
    }


def _opcodes(fa: FlowAnalyzer, fid: int) -> dict[str, int]:
    row = fa.opcodes[fid]
    out = {}
    for op in np.nonzero(row)[0].tolist():
        info = OPCODE_TABLE[op]
        out[info.opcode.name if info is not None else f"0x{op:02x}"] = int(row[op])
    return out


def _flow_docs(fa: FlowAnalyzer, series: dict[int, Any], opts: AnalysisOptions,
               origin: int) -> list[dict[str, Any]]:
    c = fa.c
    docs = []
    shown: set[int] = set()
    order = sorted(range(fa.n), key=lambda f: -int(c["bytes"][f]))
    for fid in order:
        if fid in shown:
            continue
        rid = fa.pair.get(fid)
        if int(c["requests"][fid]) == 0 and rid is not None and int(c["requests"][rid]) > 0:
            continue  # shown as the reverse of its forward flow
        shown.add(fid)
        src, dst, qp = fa.index.keys[fid]
        naks_row = fa.naks[rid] if rid is not None else np.zeros(32, np.int64)
        naks = {}
        for code in np.nonzero(naks_row)[0].tolist():
            naks[NakCode(code).name if code in NakCode._value2member_map_ else
                 f"CODE_{code}"] = int(naks_row[code])
        req = int(c["requests"][fid])
        retx = int(c["dups"][fid] + c["ooo"][fid])
        ack = fa.ack_lat.get(fid)
        rd = fa.read_lat.get(fid)
        dur = max(1, int(c["last_ts"][fid] - c["first_ts"][fid]))
        bins, vals = series.get(fid, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        doc: dict[str, Any] = {
            "capture": fa.capture, "src_ip": format_ipv4_int(src), "dst_ip": format_ipv4_int(dst),
            "dest_qp": qp, "priority": int(c["pcp"][fid]),
            "src_mac": format_mac_int(int(c["src_mac"][fid])),
            "dst_mac": format_mac_int(int(c["dst_mac"][fid])),
            "first_ts_s": (int(c["first_ts"][fid]) - origin) / 1e9,
            "last_ts_s": (int(c["last_ts"][fid]) - origin) / 1e9,
            "packets": int(c["packets"][fid]), "bytes": int(c["bytes"][fid]),
            "payload_bytes": int(c["payload"][fid]), "goodput_bytes": int(c["goodput"][fid]),
            "goodput_bps": int(c["goodput"][fid]) * 8 / (dur / 1e9),
            "opcodes": _opcodes(fa, fid), "messages": int(c["messages"][fid]),
            "request_packets": req,
            "psn_gaps": int(c["gaps"][fid]), "psn_gap_packets": int(c["gap_packets"][fid]),
            "duplicate_packets": int(c["dups"][fid]), "out_of_order_packets": int(c["ooo"][fid]),
            "retransmitted_packets": retx, "retransmission_ratio": retx / req if req else 0.0,
            "naks": naks, "rnr_naks": int(c["rnr"][rid]) if rid is not None else 0,
            "rnr_timer_s": sorted(rnr_timer_s(x) for x in fa.rnr_codes.get(rid, set()))
            if rid is not None else [],
            "ack_latency_s": summary_s(ack.values()) if ack else None,
            "read_latency_s": summary_s(rd.values()) if rd else None,
            "icrc_failures": int(c["icrc_bad"][fid]),
            "icrc_checked_packets": int(c["icrc_checked"][fid]),
            "ecn": _ecn_doc(fa, fid),
            "throughput": {"interval_s": opts.interval_ns / 1e9,
                           "start_s": [int(b) * opts.interval_ns / 1e9 for b in bins.tolist()],
                           "bps": [int(v) * 8 / (opts.interval_ns / 1e9)
                                   for v in vals.tolist()]},
            "reverse": None,
        }
        if rid is not None:
            shown.add(rid)
            rq = fa.index.keys[rid][2]
            doc["reverse"] = {
                "dest_qp": rq, "packets": int(c["packets"][rid]), "bytes": int(c["bytes"][rid]),
                "payload_bytes": int(c["payload"][rid]), "opcodes": _opcodes(fa, rid),
                "ecn": _ecn_doc(fa, rid), "icrc_failures": int(c["icrc_bad"][rid]),
                "request_packets": int(c["requests"][rid]),
            }
        docs.append(doc)
    return docs


def _document(captures: list[dict[str, Any]], queues: list[tuple[QueueState, dict[str, Any]]],
              flow_results: list[tuple[dict[str, Any], FlowAnalyzer]], warnings: list[str],
              origin: int, opts: AnalysisOptions, use_native: bool) -> dict[str, Any]:
    senders, storms, xon_storms, events = _pause_docs(queues, origin, opts)
    flows: list[dict[str, Any]] = []
    seen: list[FlowSeen] = []
    fairness_docs: list[dict[str, Any]] = []
    incast_docs: list[dict[str, Any]] = []
    series_doc: dict[str, Any] = {}
    for _cap, fa in flow_results:
        series = fa.goodput_series()
        flows.extend(_flow_docs(fa, series, opts, origin))
        by_dst: dict[str, list[int]] = {}
        by_egress: dict[str, list[int]] = {}
        senders_to: dict[int, list[tuple[int, int]]] = {}
        for fid, (src, dst, qp) in enumerate(fa.index.keys):
            data = int(fa.c["data_payload"][fid])
            seen.append(FlowSeen(fa.capture, src, dst, qp, int(fa.c["dst_mac"][fid]),
                                 int(fa.c["pcp"][fid]), data))
            if data == 0:
                continue
            by_dst.setdefault(format_ipv4_int(dst), []).append(fid)
            by_egress.setdefault(format_mac_int(int(fa.c["dst_mac"][fid])), []).append(fid)
            senders_to.setdefault(dst, []).append((fid, src))
        for kind, groups in (("destination", by_dst), ("egress", by_egress)):
            for fr in fairness(groups, series, kind, origin, opts.interval_ns):
                fairness_docs.append({
                    "capture": fa.capture, "group": fr.group, "key": fr.key, "flows": fr.flows,
                    "windows": fr.windows, "jain_min": fr.jain_min, "jain_mean": fr.jain_mean,
                    "worst_window_start_s": (fr.worst_window_start_ns - origin) / 1e9})
        for inc in incasts(senders_to, series, opts.incast_senders, origin, opts.interval_ns):
            incast_docs.append({
                "capture": fa.capture, "destination": format_ipv4_int(inc.destination),
                "start_s": (inc.start_ns - origin) / 1e9, "end_s": (inc.end_ns - origin) / 1e9,
                "max_senders": inc.max_senders})
        ce, cnp = fa.ce_cnp_series()
        series_doc[fa.capture] = {"interval_s": opts.interval_ns / 1e9,
                                  "ce_packets": ce.tolist(), "cnps": cnp.tolist()}
    chains = build_chains(events, seen, opts.causality_ns)

    def rel(ns: int) -> float:
        return (ns - origin) / 1e9

    spreading = []
    for ch in chains:
        r = ch.root
        spreading.append({
            "root": {"capture": r.capture, "src_mac": format_mac_int(r.src_mac),
                     "priority": r.priority, "start_s": rel(r.start_ns)},
            "congested_destination": None if ch.congested_destination is None
            else format_ipv4_int(ch.congested_destination),
            "converging_flows": [
                {"capture": f.capture, "src_ip": format_ipv4_int(f.src_ip),
                 "dst_ip": format_ipv4_int(f.dst_ip), "dest_qp": f.dest_qp,
                 "data_bytes": f.data_bytes} for f in ch.converging],
            "members": [{"capture": m.capture, "src_mac": format_mac_int(m.src_mac),
                         "priority": m.priority, "start_s": rel(m.start_ns),
                         "delay_s": (m.start_ns - r.start_ns) / 1e9} for m in ch.members],
            "victims": [{"capture": m.capture, "paused_by": format_mac_int(m.src_mac),
                         "priority": m.priority,
                         "destinations": sorted(format_ipv4_int(d) for d in dsts)}
                        for m, dsts in ch.victims],
        })
    assumptions = list(ASSUMPTIONS) if spreading else []
    assumptions += [
        f"Pause quanta are converted at the link speed of each capture (default "
        f"{opts.link_bps / 1e9:g} Gb/s unless set with --link-speed).",
        "Flows are reported per capture point; a flow seen at two points is two entries.",
        "PSN gaps are losses upstream of the capture point; packets lost after it are not "
        "visible.",
    ]
    if any(c["malformed_packets"] for c in captures):
        assumptions.append("Malformed frames are counted and otherwise ignored.")
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "tool": "netio-analyze", "netio_version": __version__,
        "time_origin_ns": origin, "native": use_native,
        "options": {
            "link_bps": opts.link_bps, "link_bps_by_capture": dict(opts.link_bps_by_capture),
            "storm_detection_s": opts.storm_ns / 1e9,
            "storm_restoration_s": opts.restore_ns / 1e9,
            "xon_storm_s": opts.xon_storm_ns / 1e9, "xon_storm_gap_s": opts.xon_gap_ns / 1e9,
            "causality_window_s": opts.causality_ns / 1e9, "interval_s": opts.interval_ns / 1e9,
            "incast_senders": opts.incast_senders,
            "cnp_min_gap_s": opts.cnp_min_gap_ns / 1e9,
            "priorities": sorted(opts.priorities) if opts.priorities is not None else None,
            "start_s": opts.start_ns / 1e9 if opts.start_ns is not None else None,
            "end_s": opts.end_ns / 1e9 if opts.end_ns is not None else None,
        },
        "captures": captures, "warnings": warnings, "pause_senders": senders,
        "storms": storms, "xon_storms": xon_storms, "spreading": spreading, "flows": flows,
        "fairness": fairness_docs, "incast": incast_docs, "ecn_series": series_doc,
        "assumptions": assumptions,
    }
    doc["findings"] = findings(doc)
    return doc


def findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The most important facts first: storms, spreading, losses, congestion, warnings."""
    out: list[dict[str, Any]] = []
    for s in doc["storms"]:
        prio = "PAUSE" if s["priority"] is None else f"priority {s['priority']}"
        out.append({"severity": "critical", "kind": "pfc_storm",
                    "message": f"PFC storm: {s['src_mac']} on {s['capture']} ({prio}) paused "
                               f"{s['duration_s'] * 1e3:.1f} ms from t={s['start_s']:.6f} s"})
    for ch in doc["spreading"]:
        r = ch["root"]
        victims = ", ".join(f"peer of {v['paused_by']} on {v['capture']}" for v in ch["victims"])
        out.append({"severity": "critical", "kind": "pause_spreading",
                    "message": f"Pause spread from {r['src_mac']} on {r['capture']} to "
                               f"{len(ch['members']) - 1} more sender(s)"
                               + (f"; congested destination {ch['congested_destination']}"
                                  if ch["congested_destination"] else "")
                               + (f"; victims: {victims}" if victims else "")})
    for s in doc["xon_storms"]:
        out.append({"severity": "warning", "kind": "xon_storm",
                    "message": f"XON storm: {s['src_mac']} on {s['capture']} priority "
                               f"{s['priority']}: {s['xon_frames']} XON frames"})
    for i in doc["incast"]:
        out.append({"severity": "warning", "kind": "incast",
                    "message": f"Incast: {i['max_senders']} senders to {i['destination']} on "
                               f"{i['capture']} at t={i['start_s']:.3f}..{i['end_s']:.3f} s"})
    for f in doc["flows"]:
        name = f"{f['src_ip']}->{f['dst_ip']} qp 0x{f['dest_qp']:06x} on {f['capture']}"
        if f["psn_gap_packets"] or f["retransmitted_packets"]:
            out.append({"severity": "warning", "kind": "loss",
                        "message": f"{name}: {f['psn_gap_packets']} packets lost upstream, "
                                   f"{f['retransmitted_packets']} retransmitted "
                                   f"({f['retransmission_ratio']:.2%})"})
        if f["rnr_naks"]:
            out.append({"severity": "warning", "kind": "rnr",
                        "message": f"{name}: {f['rnr_naks']} RNR NAKs"})
        if f["icrc_failures"]:
            out.append({"severity": "warning", "kind": "icrc",
                        "message": f"{name}: {f['icrc_failures']} ICRC failures"})
        for d in (f["ecn"], (f["reverse"] or {}).get("ecn")):
            if d and d["cnp_rate_violations"]:
                out.append({"severity": "warning", "kind": "cnp_rate",
                            "message": f"{name}: {d['cnp_rate_violations']} CNPs closer than "
                                       "DCQCN's 50 us per QP"})
        for d in (f["ecn"], (f["reverse"] or {}).get("ecn")):
            if d and d["ce_packets"]:
                out.append({"severity": "info", "kind": "ecn",
                            "message": f"{name}: {d['ce_packets']} CE-marked packets, "
                                       f"{d['cnps']} CNPs"})
    for w in doc["warnings"]:
        out.append({"severity": "warning", "kind": "input", "message": w})
    return out
