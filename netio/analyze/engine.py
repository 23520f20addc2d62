"""Run every analysis over one or more captures, batch by batch, into one result.

Native path: each capture is read through a reused window and scanned natively
(``netio.pcap.scan.WindowScanner``) in batches; one C pass per batch
(``native/analyze_flows.c``) classifies
the frames, applies the filters and runs every per-packet RoCE analysis, and
hands the PFC/PAUSE frames back as columns for the pause analysis. Reference
path (``use_native=False``): the mapped capture (``netio.pcap.scan``),
``decode_frame`` per frame into columns (``netio.analyze.extract``), numpy
filters, ``FlowReference``. Both carry only per-flow and per-queue state
between batches (the reference releases the analysed pages of its mapping),
so memory is O(flows + pause intervals), not O(packets). The result is the
JSON document described in ``netio.analyze.schema``.
"""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from netio import __version__, native
from netio.analyze.columns import Flag, Kind, PacketColumns
from netio.analyze.connections import CmEvent, Connection, cm_events, connections
from netio.analyze.distribute import Mapper
from netio.analyze.extract import CHUNK_RECORDS, CaptureChunks, c_columns, count_unsupported
from netio.analyze.fairness import fairness_bulk, incasts
from netio.analyze.findings import findings
from netio.analyze.flowdocs import (
    FlowDocuments,
    connection_name,
    flow_docs,
    flow_texts,
    primary_flows,
)
from netio.analyze.flows import (
    MAX_SERIES_INTERVALS,
    FlowKeys,
    FlowReference,
    FlowResults,
    NativeFlows,
    analyzer_config,
)
from netio.analyze.options import AnalysisOptions
from netio.analyze.pfc import PauseAnalyzer, QueueState, paused_within
from netio.analyze.schema import SCHEMA_VERSION
from netio.analyze.spreading import ASSUMPTIONS, FlowSeen, PauseEvent, build_chains
from netio.analyze.storms import detect_storms
from netio.analyze.units import format_ip_int, format_mac_int
from netio.errors import CaptureError, CaptureWarning
from netio.pcap.compressed import strip_compression_suffix
from netio.pcap.format import unsupported_linktype
from netio.pcap.scan import CaptureScanner, ScanColumns, WindowScanner
from netio.wire.mad import GSI_QP

#: Called after each chunk with (bytes done, bytes total) over all captures.
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class CaptureInput:
    name: str
    path: str


def capture_names(paths: Sequence[str]) -> list[CaptureInput]:
    """Name each capture by its file stem (made unique with its index if needed); a
    compressed capture's too (``sw1-p1.pcap.gz`` is ``sw1-p1``)."""
    stems = [Path(strip_compression_suffix(Path(p).name)).stem for p in paths]
    out = []
    for i, (p, s) in enumerate(zip(paths, stems, strict=True)):
        out.append(CaptureInput(s if stems.count(s) == 1 else f"{s}#{i}", p))
    return out


def first_timestamp(path: str) -> int | None:
    """The first record's timestamp (ns), None when there is none to read. Reads one
    window (a compressed capture is not decompressed whole)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)  # reported by the full pass
        try:
            if native.AVAILABLE:
                ws = WindowScanner(path, window_bytes=1 << 16)
                try:
                    out = ScanColumns.empty(1)
                    return int(out.ts_ns[0]) if ws.next_batch(out) else None
                finally:
                    ws.close()
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
        if fl.src_ip is not None or fl.dst_ip is not None:  # addresses of one IP version
            fwd &= ((cols.flags & Flag.IPV6) != 0) == fl.ipv6
        rev = fwd.copy()

        def is_ip(src: bool, addr: int) -> npt.NDArray[np.bool_]:
            if fl.ipv6:
                want = np.frombuffer(addr.to_bytes(16, "big"), np.uint8)
                same: npt.NDArray[np.bool_] = (cols.src_ip6 if src else cols.dst_ip6) == want
                every: npt.NDArray[np.bool_] = np.logical_and.reduce(same, axis=1)
                return every
            equal: npt.NDArray[np.bool_] = (cols.src_ip if src else cols.dst_ip) == addr
            return equal

        if fl.src_ip is not None:
            fwd &= is_ip(True, fl.src_ip)
            rev &= is_ip(False, fl.src_ip)
        if fl.dst_ip is not None:
            fwd &= is_ip(False, fl.dst_ip)
            rev &= is_ip(True, fl.dst_ip)
        if fl.dest_qp is not None:
            fwd &= cols.dest_qp == fl.dest_qp
        keep &= ~roce | fwd | rev
    return cols if keep.all() else cols.take(keep)


@dataclass(slots=True)
class CaptureRun:
    """What one capture's pass produced (picklable: it comes back from workers)."""

    records: int = 0
    kinds: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(5, np.int64))
    first: int | None = None
    last: int | None = None
    error: str | None = None
    scan_warnings: tuple[str, ...] = ()
    queues: list[QueueState] = field(default_factory=list)
    flows: FlowResults | None = None
    unsupported: dict[int, int] = field(default_factory=dict)  # link type -> records
    cm: list[CmEvent] = field(default_factory=list)  # CM MADs (connection set-up/tear-down)


@dataclass(frozen=True, slots=True)
class CaptureTask:
    """One capture's analysis, as sent to a worker (picklable)."""

    capture: CaptureInput
    opts: AnalysisOptions
    origin_ns: int
    use_native: bool
    chunk_records: int | None = None


def run_capture(task: CaptureTask, step: Callable[[int], None] | None = None) -> CaptureRun:
    """Read and analyse one capture (the map step; runs in any process)."""
    opts, cap = task.opts, task.capture
    pa = PauseAnalyzer(cap.name, opts.link_for(cap.name), xon_gap_ns=opts.xon_gap_ns,
                       xon_storm_ns=opts.xon_storm_ns, priorities=opts.priorities)
    report = step if step is not None else _ignore
    if task.use_native:
        run = _native_pass(cap.path, opts, task.origin_ns, pa,
                           task.chunk_records or NATIVE_BATCH, report)
    else:
        run = _reference_pass(cap.path, opts, task.origin_ns, pa,
                              task.chunk_records or CHUNK_RECORDS, report)
    if run.flows is not None and _any_gsi(run.flows):
        run.cm = cm_events(cap.path, use_native=task.use_native)
    return run


def _any_gsi(fr: FlowResults) -> bool:
    """Whether a flow is sent to QP 1 (CM MADs)."""
    if isinstance(fr.keys, FlowKeys):
        return bool((fr.keys.dest_qps() == GSI_QP).any())
    return any(k.dest_qp == GSI_QP for k in fr.keys)


def _ignore(done: int) -> None:
    pass


def analyze(paths: Sequence[str], opts: AnalysisOptions, *, use_native: bool | None = None,
            progress: Progress | None = None, chunk_records: int | None = None,
            mapper: Mapper | None = None, stream_flows: bool = False) -> dict[str, Any]:
    """Analyse ``paths`` together; returns the JSON-ready result document.

    ``chunk_records``: records per step (the native pass's batch, the
    reference's chunk); results do not depend on it. ``mapper``
    (``netio.analyze.distribute``): where the per-capture analyses run (default:
    here, one after the other); the document does not depend on it.
    ``stream_flows``: ``flows`` is a ``FlowDocuments`` that makes each flow's
    document as it is iterated (bounded memory per flow; ``report.write_json``
    streams it) instead of a list.
    """
    if use_native is None:
        use_native = native.AVAILABLE
    inputs = capture_names(paths)
    total_bytes = sum(_size(c.path) for c in inputs)
    if mapper is None:
        firsts = [first_timestamp(c.path) for c in inputs]
    else:
        firsts = list(mapper.map(first_timestamp, [c.path for c in inputs]))
    origin = min((t for t in firsts if t is not None), default=0)
    tasks = [CaptureTask(c, opts, origin, use_native, chunk_records) for c in inputs]
    if mapper is None:
        done_before = 0

        def runs() -> Iterator[CaptureRun]:
            nonlocal done_before
            for task in tasks:
                def step(done: int, before: int = done_before) -> None:
                    if progress is not None:
                        progress(before + done, total_bytes)
                yield run_capture(task, step)
                done_before += _size(task.capture.path)
        results: Iterator[CaptureRun] = runs()
    else:
        results = _reporting(mapper.map(run_capture, tasks), tasks, progress, total_bytes)
    captures: list[dict[str, Any]] = []
    queues: list[tuple[QueueState, dict[str, Any]]] = []
    flow_results: list[tuple[str, FlowResults, int | None]] = []
    conns: dict[str, list[Connection]] = {}
    warnings: list[str] = []
    for cap, run in zip(inputs, results, strict=True):
        link = opts.link_for(cap.name)
        kinds = run.kinds
        records = run.records
        error = run.error
        skipped = sum(run.unsupported.values())
        if skipped:  # decoded as malformed, one by one; said once instead
            kinds[Kind.MALFORMED] -= skipped
        cap_warnings = list(run.scan_warnings)
        for lt, n in sorted(run.unsupported.items()):
            if skipped == records and error is None and len(run.unsupported) == 1:
                error = f"{cap.path}: {unsupported_linktype(lt)}"
            else:
                cap_warnings.append(f"{cap.path}: {n} records skipped: "
                                    f"{unsupported_linktype(lt)}")
        if error is not None:
            cap_warnings.append(error)
        if kinds[Kind.ROCE] == 0 and records > skipped and error is None:
            filtered = (opts.priorities is not None or opts.flow is not None
                        or opts.start_ns is not None or opts.end_ns is not None)
            what = "match the filters" if filtered else "(UDP port 4791)"
            cap_warnings.append(f"{cap.path}: no RoCEv2 packets {what} among "
                                f"{records} records")
        if records == 0 and error is None:
            cap_warnings.append(f"{cap.path}: the capture holds no packets")
        if run.flows is not None and run.flows.beyond_series:
            cap_warnings.append(
                f"{cap.path}: {run.flows.beyond_series} CE marks/CNPs lie more than "
                f"{MAX_SERIES_INTERVALS} intervals after the first packet (bad timestamps?) "
                "and are left out of ecn_series")
        if kinds[Kind.MALFORMED]:
            cap_warnings.append(f"{cap.path}: {int(kinds[Kind.MALFORMED])} frames could not "
                                "be decoded (malformed or cut before their RoCE headers)")
        warnings.extend(cap_warnings)
        f0 = run.first if run.first is not None else origin
        l0 = run.last if run.last is not None else f0
        entry = {
            "name": cap.name, "path": cap.path, "records": records,
            "packets": int(kinds.sum()), "roce_packets": int(kinds[Kind.ROCE]),
            "pfc_frames": int(kinds[Kind.PFC]), "pause_frames": int(kinds[Kind.PAUSE]),
            "other_packets": int(kinds[Kind.OTHER]),
            "malformed_packets": int(kinds[Kind.MALFORMED]),
            "first_ts_s": (f0 - origin) / 1e9, "last_ts_s": (l0 - origin) / 1e9,
            "duration_s": (l0 - f0) / 1e9, "link_bps": link,
            "complete": error is None and not run.scan_warnings,
            "readable": error is None or records > skipped, "warnings": cap_warnings,
        }
        captures.append(entry)
        for q in run.queues:
            queues.append((q, entry))
        if run.flows is not None:
            flow_results.append((cap.name, run.flows, run.last))
        if run.cm:
            conns[cap.name] = connections(run.cm)
    with _no_gc():
        return _document(captures, queues, flow_results, conns, warnings, origin, opts,
                         use_native, stream_flows)


def _reporting(results: Iterator[CaptureRun], tasks: Sequence[CaptureTask],
               progress: Progress | None, total_bytes: int) -> Iterator[CaptureRun]:
    """Pass the runs on, reporting progress capture by capture."""
    done = 0
    for task, run in zip(tasks, results, strict=True):
        done += _size(task.capture.path)
        if progress is not None:
            progress(done, total_bytes)
        yield run


@contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic garbage collector off: building 100,000 flow documents (millions of
    acyclic dicts and lists) otherwise triggers full collections over a growing heap,
    which takes longer than building them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


#: Records per native step: the scanned frames of one batch stay in the CPU
#: caches between the scan and the analysis pass.
NATIVE_BATCH = 1 << 13
#: Capture bytes between progress reports.
_PROGRESS_BYTES = 32 << 20


def _native_pass(path: str, opts: AnalysisOptions, origin: int, pa: PauseAnalyzer, batch: int,
                 step: Callable[[int], None]) -> CaptureRun:
    """One C pass per batch: classify, filter, analyse flows; PFC/PAUSE rows come back.

    The capture is read through ``WindowScanner`` (a reused read() window), so
    resident memory does not grow with the capture."""
    ffi, lib = native.ffi, native.lib
    run = CaptureRun()
    cfg = analyzer_config(
        origin, opts.interval_ns, opts.cnp_min_gap_ns,
        start_ns=None if opts.start_ns is None else origin + opts.start_ns,
        end_ns=None if opts.end_ns is None else origin + opts.end_ns,
        priorities=opts.priorities, flow=opts.flow, verify_icrc=opts.verify_icrc)
    flows = NativeFlows(cfg)
    ctl_cap = max(1 << 14, 4 * batch)
    ctl = PacketColumns.empty(ctl_cap)
    cctl, _keep_ctl = c_columns(ctl)
    ctl_n = ffi.new("size_t *", 0)
    scan = ScanColumns.empty(batch)
    sp = [ffi.from_buffer(t, getattr(scan, name), require_writable=True) for name, t in (
        ("ts_ns", "int64_t[]"), ("frame_offset", "int64_t[]"), ("caplen", "uint32_t[]"),
        ("orig_len", "uint32_t[]"), ("linktype", "uint16_t[]"))]

    def flush() -> None:
        if ctl_n[0]:
            pa.feed(ctl.take(slice(0, ctl_n[0])))
            ctl_n[0] = 0

    try:
        scanner = WindowScanner(path)
    except CaptureError as exc:
        run.error = str(exc)
        return run
    reported = 0
    try:
        while True:
            n = scanner.next_batch(scan)
            if n == 0:
                break
            run.records += n
            count_unsupported(scan.linktype[:n], run.unsupported)
            rc = lib.netio_analyzer_feed(flows.handle, scanner.cbuffer, scanner.have, *sp, n,
                                         cctl, ctl_cap, ctl_n)
            if rc < 0:
                raise MemoryError("capture analysis ran out of memory")
            if ctl_n[0] > ctl_cap - batch:
                flush()
            if scanner.offset - reported >= _PROGRESS_BYTES:
                reported = scanner.offset
                step(reported)
        flush()
    finally:
        run.scan_warnings = tuple(str(w) for w in scanner.warnings)
        scanner.close()
    step(_size(path))
    summary = flows.summary()
    run.kinds = summary[:5].copy()
    if summary[lib.NETIO_AS_ROWS]:
        run.first = int(summary[lib.NETIO_AS_FIRST_TS])
        run.last = int(summary[lib.NETIO_AS_LAST_TS])
    run.queues = pa.finish()
    run.flows = flows.results(release=True)
    return run


def _reference_pass(path: str, opts: AnalysisOptions, origin: int, pa: PauseAnalyzer,
                    chunk: int, step: Callable[[int], None]) -> CaptureRun:
    """The pure-Python path: decode_frame per frame, numpy filters, FlowReference."""
    run = CaptureRun()
    fr = FlowReference(origin, opts.interval_ns, opts.cnp_min_gap_ns)
    chunks = CaptureChunks(path, False, chunk, opts.verify_icrc)
    try:
        for cols in chunks:
            run.records += len(cols)
            cols = _filter(cols, opts, origin)
            if len(cols):
                run.first = int(cols.ts_ns[0]) if run.first is None else run.first
                run.last = int(cols.ts_ns[-1])
                run.kinds += np.bincount(cols.kind, minlength=5)[:5]
                pa.feed(cols)
                fr.feed(cols)
            step(chunks.bytes_done)
    except CaptureError as exc:
        run.error = str(exc)
    run.scan_warnings = chunks.warnings
    run.unsupported = chunks.unsupported
    run.queues = pa.finish()
    run.flows = fr.results()
    return run


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


def _ip(value: int, v6: bool) -> str:
    return format_ip_int(value, v6)


def _connection_doc(capture: str, c: Connection, origin: int) -> dict[str, Any]:
    def rel(ns: int | None) -> float | None:
        return None if ns is None else (ns - origin) / 1e9

    return {
        "capture": capture, "name": connection_name(c), "service_id": f"0x{c.service_id:016x}",
        "active": {"ip": _ip(*c.active), "qpn": c.active_qpn, "starting_psn": c.active_psn},
        "passive": None if c.passive is None else {
            "ip": _ip(*c.passive), "qpn": c.passive_qpn, "starting_psn": c.passive_psn},
        "path_mtu_bytes": c.path_mtu_bytes, "retry_count": c.retry_count,
        "rnr_retry_count": c.rnr_retry_count,
        "req_s": rel(c.req_ns), "rep_s": rel(c.rep_ns), "rtu_s": rel(c.rtu_ns),
        "dreq_s": rel(c.dreq_ns), "drep_s": rel(c.drep_ns),
        "setup_s": None if c.setup_ns is None else c.setup_ns / 1e9,
        "teardown_s": None if c.teardown_ns is None else c.teardown_ns / 1e9,
    }


def _ecn_series_doc(fr: FlowResults, last_ns: int | None, origin: int,
                    interval_ns: int) -> dict[str, Any]:
    """CE marks and CNPs per interval, both lists covering the capture to its last packet
    (at most ``MAX_SERIES_INTERVALS`` intervals; empty without packets)."""
    span = 0 if last_ns is None else max(0, last_ns - origin) // interval_ns + 1
    n = max(len(fr.ce_series), len(fr.cnp_series), min(MAX_SERIES_INTERVALS, span))

    def padded(x: npt.NDArray[np.int64]) -> list[int]:
        out: list[int] = x.tolist()
        return out + [0] * (n - len(out))

    return {"interval_s": interval_ns / 1e9, "ce_packets": padded(fr.ce_series),
            "cnps": padded(fr.cnp_series)}


def _seen_doc(f: FlowSeen) -> dict[str, Any]:
    return {"capture": f.capture, "src_ip": _ip(f.src_ip, f.ipv6),
            "dst_ip": _ip(f.dst_ip, f.ipv6), "dest_qp": f.dest_qp, "data_bytes": f.data_bytes}


def _document(captures: list[dict[str, Any]], queues: list[tuple[QueueState, dict[str, Any]]],
              flow_results: list[tuple[str, FlowResults, int | None]],
              conns: dict[str, list[Connection]], warnings: list[str],
              origin: int, opts: AnalysisOptions, use_native: bool,
              stream_flows: bool = False) -> dict[str, Any]:
    senders, storms, xon_storms, events = _pause_docs(queues, origin, opts)
    flows = FlowDocuments()
    seen: list[FlowSeen] = []
    fairness_docs: list[dict[str, Any]] = []
    incast_docs: list[dict[str, Any]] = []
    series_doc: dict[str, Any] = {}
    for capture, fr, last_ns in flow_results:
        series = fr.series
        cap_conns = conns.get(capture, [])
        flows.add(len(primary_flows(fr)) if fr.n else 0,
                  partial(flow_docs, capture, fr, opts, origin, cap_conns),
                  partial(flow_texts, capture, fr, opts, origin, cap_conns))
        by_dst: dict[str, list[int]] = {}
        by_egress: dict[str, list[int]] = {}
        senders_to: dict[str, list[tuple[int, Hashable]]] = {}
        ips: dict[tuple[int, bool], str] = {}
        macs: dict[int, str] = {}
        c = fr.c
        spread = len(events) >= 2  # a chain has two senders at least
        for fid, key, dmac, pcp, data in zip(range(fr.n), fr.keys, c["dst_mac"].tolist(),
                                             c["pcp"].tolist(), c["data_payload"].tolist(),
                                             strict=True):
            if spread:
                seen.append(FlowSeen(capture, key.src_ip, key.dst_ip, key.dest_qp, dmac, pcp,
                                     data, key.ipv6))
            if data == 0:
                continue
            dst = ips.get((key.dst_ip, key.ipv6))
            if dst is None:
                dst = ips[(key.dst_ip, key.ipv6)] = _ip(key.dst_ip, key.ipv6)
            egress = macs.get(dmac)
            if egress is None:
                egress = macs[dmac] = format_mac_int(dmac)
            by_dst.setdefault(dst, []).append(fid)
            by_egress.setdefault(egress, []).append(fid)
            senders_to.setdefault(dst, []).append((fid, (key.src_ip, key.ipv6)))
        for kind, groups in (("destination", by_dst), ("egress", by_egress)):
            for fa in fairness_bulk(groups, series.fids, series.bins, series.vals, kind,
                                    origin, opts.interval_ns):
                fairness_docs.append({
                    "capture": capture, "group": fa.group, "key": fa.key, "flows": fa.flows,
                    "windows": fa.windows, "jain_min": fa.jain_min, "jain_mean": fa.jain_mean,
                    "worst_window_start_s": (fa.worst_window_start_ns - origin) / 1e9})
        for inc in incasts(senders_to, series.fids, series.bins, opts.incast_senders,
                           origin, opts.interval_ns):
            incast_docs.append({
                "capture": capture, "destination": inc.destination,
                "start_s": (inc.start_ns - origin) / 1e9, "end_s": (inc.end_ns - origin) / 1e9,
                "max_senders": inc.max_senders})
        series_doc[capture] = _ecn_series_doc(fr, last_ns, origin, opts.interval_ns)
    chains = build_chains(events, seen, opts.causality_ns)

    def rel(ns: int) -> float:
        return (ns - origin) / 1e9

    spreading = []
    for ch in chains:
        r = ch.root
        dest = ch.congested_destination
        spreading.append({
            "root": {"capture": r.capture, "src_mac": format_mac_int(r.src_mac),
                     "priority": r.priority, "start_s": rel(r.start_ns)},
            "congested_destination": None if dest is None else _ip(*dest),
            "converging_flows": [_seen_doc(f) for f in ch.converging],
            "members": [{"capture": m.capture, "src_mac": format_mac_int(m.src_mac),
                         "priority": m.priority, "start_s": rel(m.start_ns),
                         "delay_s": (m.start_ns - r.start_ns) / 1e9} for m in ch.members],
            "victims": [{"capture": v.member.capture,
                         "paused_by": format_mac_int(v.member.src_mac),
                         "priority": v.member.priority,
                         "destinations": sorted(_ip(*d) for d in v.destinations),
                         "flows": [_seen_doc(f) for f in v.flows]}
                        for v in ch.victims],
        })
    assumptions = list(ASSUMPTIONS) if spreading else []
    assumptions += [
        f"Pause quanta are converted at the link speed of each capture (default "
        f"{opts.link_bps / 1e9:g} Gb/s unless set with --link-speed).",
        "Flows are reported per capture point; a flow seen at two points is two entries.",
        "PSN gaps are losses upstream of the capture point; a loss after it shows only as a "
        "NAK or a retransmission without a gap.",
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
        "captures": captures, "warnings": warnings,
        "connections": [_connection_doc(cap, c, origin) for cap, cs in conns.items()
                        for c in cs],
        "pause_senders": senders,
        "storms": storms, "xon_storms": xon_storms, "spreading": spreading,
        "flows": flows if stream_flows else list(flows),
        "fairness": fairness_docs, "incast": incast_docs, "ecn_series": series_doc,
        "assumptions": assumptions, "error": None,
    }
    doc["findings"] = findings(doc)
    return doc
