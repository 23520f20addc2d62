"""Truth: the analysis document a generated scenario must produce (fourth stage).

Computed from the generator's intent (packets it dropped, marked, paused, the
pause frames it scheduled), in plain sequential Python, independent of the
vectorised analyses. Keys and units are those of the analysis JSON
(``netio.analyze.schema``): times in seconds relative to ``time_origin_ns``,
bytes, counts. Tests compare each key present here with the analysis output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from netio.analyze.columns import Kind
from netio.analyze.options import DEFAULT_OPTIONS, AnalysisOptions
from netio.analyze.units import format_ipv4_int, format_mac_int
from netio.scenario.packets import Packets, Rows, pause_intervals
from netio.scenario.spec import Scenario
from netio.wire.bth import Opcode


def _s(ns: int, t0: int) -> float:
    return (ns - t0) / 1e9


def _summary(samples_ns: Sequence[int]) -> dict[str, float | int] | None:
    """count/min/p50/p90/p99/max in seconds; None when empty.

    The exact q-quantile is the order statistic of rank floor(q*(n-1)) (0-based,
    numpy's 'lower'); the analyzer reports it within its sketch's relative error."""
    if not samples_ns:
        return None
    a = np.sort(np.asarray(samples_ns, dtype=np.int64))
    p50, p90, p99 = (int(a[(p * (a.size - 1)) // 100]) / 1e9 for p in (50, 90, 99))
    return {"count": int(a.size), "min": int(a[0]) / 1e9, "p50": p50, "p90": p90,
            "p99": p99, "max": int(a[-1]) / 1e9}


def _storms(intervals: Sequence[tuple[int, int]], opts: AnalysisOptions) -> list[tuple[int, int]]:
    """(start, end) of storms: SONiC-style detection/restoration over paused intervals."""
    out: list[tuple[int, int]] = []
    cluster: list[tuple[int, int]] = []
    for iv in [*intervals, None]:
        if iv is not None and cluster and iv[0] - cluster[-1][1] < opts.restore_ns:
            cluster.append(iv)
            continue
        if cluster:
            long = [c for c in cluster if c[1] - c[0] >= opts.storm_ns]
            if long:
                out.append((long[0][0], cluster[-1][1]))
        cluster = [iv] if iv is not None else []
    return out


def truth_document(scenario: Scenario, packets: Packets,
                   opts: AnalysisOptions = DEFAULT_OPTIONS) -> dict[str, Any]:
    """What the analysis of the captures must report (last stage of the pipeline)."""
    tables, flows, pause_frames = packets.tables, packets.flows, packets.pause_frames
    firsts = [int(t.cols["ts_ns"][0]) for t in tables.values() if len(t)]
    t0 = min(firsts) if firsts else scenario.epoch_ns
    captures: dict[str, Any] = {}
    windows: dict[str, tuple[int, int]] = {}
    for name, table in tables.items():
        kind = table.cols["kind"]
        ts = table.cols["ts_ns"]
        first, last = (int(ts[0]), int(ts[-1])) if len(table) else (t0, t0)
        windows[name] = (first, last)
        captures[name] = {
            "packets": len(table), "roce_packets": int(np.count_nonzero(kind == Kind.ROCE)),
            "pfc_frames": int(np.count_nonzero(kind == Kind.PFC)),
            "pause_frames": int(np.count_nonzero(kind == Kind.PAUSE)),
            "first_ts_s": _s(first, t0), "last_ts_s": _s(last, t0),
            "duration_s": (last - first) / 1e9,
        }
    # Pause senders: every (capture, MAC, vlan, priority) that sent PFC/PAUSE.
    link = {p.name: p.link_bps for p in scenario.ports}
    per_queue: dict[tuple[str, int, int | None, str, int | None], list[tuple[int, int]]] = {}
    for p, frames in zip(scenario.pauses, pause_frames, strict=True):
        kind_name = "pause" if p.priorities is None else "pfc"
        for prio in (p.priorities if p.priorities is not None else (None,)):
            per_queue.setdefault((p.port, p.src_mac, p.vlan, kind_name, prio), []).extend(frames)
    for xs in scenario.xon_storms:
        a = scenario.epoch_ns + xs.start_ns
        xframes = [(t, 0) for t in range(a, a + xs.duration_ns, xs.interval_ns)]
        per_queue.setdefault((xs.port, xs.src_mac, None, "pfc", xs.priority), []).extend(xframes)
    senders = []
    storms = []
    xon_storms = []
    all_intervals: list[tuple[int, str, int, int | None]] = []  # (start, capture, mac, prio)
    for (port, mac, vlan, kind_name, prio), frames in sorted(
            per_queue.items(),
            key=lambda kv: (kv[0][0], kv[0][1], 9 if kv[0][4] is None else kv[0][4])):
        frames = sorted(frames)
        ivs = pause_intervals(frames, link[port])
        first, last = windows[port]
        dur = last - first
        inside = sum(max(0, min(e, last) - max(s, first)) for s, e in ivs)
        xon = sum(1 for _, q in frames if q == 0)
        base = {"capture": port, "src_mac": format_mac_int(mac), "vlan": vlan,
                "kind": kind_name, "priority": prio}
        senders.append({
            **base, "xoff_frames": len(frames) - xon, "xon_frames": xon,
            "intervals": [[_s(s, t0), _s(e, t0)] for s, e in ivs],
            "paused_s": sum(e - s for s, e in ivs) / 1e9,
            "longest_pause_s": max((e - s for s, e in ivs), default=0) / 1e9,
            "paused_fraction": inside / dur if dur > 0 else 0.0,
            "frame_rate_per_s": len(frames) / (dur / 1e9) if dur > 0 else 0.0,
        })
        for a, e in _storms(ivs, opts):
            storms.append({**base, "start_s": _s(a, t0), "end_s": _s(e, t0),
                           "duration_s": (e - a) / 1e9})
        for a, _ in ivs:
            all_intervals.append((a, port, mac, prio))
        xons = [t for t, q in frames if q == 0]
        run: list[int] = []
        for x in [*xons, None]:
            if x is not None and run and x - run[-1] <= opts.xon_gap_ns:
                run.append(x)
                continue
            if len(run) > 1 and run[-1] - run[0] >= opts.xon_storm_ns:
                xon_storms.append({**base, "start_s": _s(run[0], t0), "end_s": _s(run[-1], t0),
                                   "xon_frames": len(run)})
            run = [x] if x is not None else []
    flow_docs = []
    series = {port: _data_per_window(t, t0, opts.interval_ns) for port, t in tables.items()}
    for fidx, (f, tr) in enumerate(zip(scenario.flows, flows, strict=True)):
        for h in f.hops:
            t = tables[h.port]
            mine = t.cols["flow"] == fidx
            fwd = mine & (t.cols["dir"] == 0)
            rev = mine & (t.cols["dir"] == 1)
            ops = t.cols["opcode"]

            def mix(mask: Any, ops: Any = ops) -> dict[str, int]:
                vals, counts = np.unique(ops[mask], return_counts=True)
                return {Opcode(int(v)).name: int(c) for v, c in zip(vals, counts, strict=True)}

            ecn_fwd: dict[str, Any] = {"ce_packets": 0, "cnps": 0, "cnp_reaction_s": None,
                       "cnp_rate_violations": 0}
            ecn_rev = dict(ecn_fwd)
            ecn_data: dict[str, Any] = {"ce_packets": tr.ce_packets, "cnps": tr.cnps,
                        "cnp_reaction_s": _summary(tr.cnp_reaction_ns),
                        "cnp_rate_violations": tr.cnp_violations}
            if f.op == "read":
                ecn_rev = ecn_data
            else:
                ecn_fwd = ecn_data
            # The marks the generator set on each direction's packets (it sets no FECN;
            # CNPs carry BECN and are not ECN-capable).
            ecn = t.cols["ecn"]
            for marks, mask in ((ecn_fwd, fwd), (ecn_rev, rev)):
                marks["ect_packets"] = int(np.count_nonzero(mask & ((ecn == 1) | (ecn == 2))))
                marks["fecn_packets"] = 0
                marks["becn_packets"] = int(np.count_nonzero(mask & t.cols["becn"]))
            ts = t.cols["ts_ns"][mine]
            span_ns = int(ts.max() - ts.min())
            pay_fwd = int(t.cols["payload"][fwd].sum())
            pay_rev = int(t.cols["payload"][rev].sum())
            flow_docs.append({
                "capture": h.port, "src_ip": format_ipv4_int(f.src_ip),
                "dst_ip": format_ipv4_int(f.dst_ip), "dest_qp": f.dst_qp,
                "priority": f.priority,
                "packets": int(np.count_nonzero(fwd)), "payload_bytes": pay_fwd,
                # Every message's data once, in whichever direction it travelled,
                # over the span of the flow's packets at this port (both directions).
                "goodput_bytes": f.messages * f.message_bytes,
                "goodput_bps": f.messages * f.message_bytes * 8 / (max(1, span_ns) / 1e9),
                "opcodes": mix(fwd), "messages": tr.messages if f.op != "read" else f.messages,
                "psn_gaps": tr.psn_gaps, "psn_gap_packets": tr.psn_gap_packets,
                "duplicate_packets": tr.duplicates, "out_of_order_packets": tr.out_of_order,
                "retransmitted_packets": tr.retransmitted,
                "retransmission_ratio": tr.retransmitted / tr.requests if tr.requests else 0.0,
                "naks": dict(sorted(tr.naks.items())), "rnr_naks": tr.rnr_naks,
                "rnr_timer_s": sorted(set(tr.rnr_timer_s)),
                "ack_latency_s": _summary(tr.ack_latency_ns),
                "read_latency_s": _summary(tr.read_latency_ns),
                "icrc_failures": _bad_icrcs_checked(scenario, t, mine, h.port),
                "ecn": ecn_fwd,
                "throughput": _throughput(series[h.port].get((fidx, 0), {}), opts.interval_ns),
                "reverse": {"dest_qp": f.src_qp, "packets": int(np.count_nonzero(rev)),
                            "payload_bytes": pay_rev, "opcodes": mix(rev), "ecn": ecn_rev,
                            "throughput": _throughput(series[h.port].get((fidx, 1), {}),
                                                      opts.interval_ns)},
            })
    doc = {
        "schema_version": 1, "scenario": scenario.name, "time_origin_ns": t0,
        "captures": captures, "pause_senders": senders, "storms": storms,
        "xon_storms": xon_storms, "flows": flow_docs,
        "spreading": _spreading_truth(scenario, all_intervals, t0, opts, tables, series),
        **_sharing_truth(scenario, tables, t0, opts),
    }
    doc["finding_kinds"] = _finding_kinds(doc)
    return doc


def _finding_kinds(doc: dict[str, Any]) -> list[str]:
    """The kinds of finding the analysis must report (netio.analyze.findings' list), from
    what the scenario put in: chains, storms, pauses outside them, XON storms, incasts;
    per flow losses (dropped requests), retransmissions without loss (RNR retries), RNR
    NAKs, bad ICRCs the snap length lets through, DCQCN rate violations, CE marks. The
    generated captures are whole and undamaged, so no "input" finding."""
    kinds = set()
    if doc["spreading"]:
        kinds.add("pause_spreading")
    if doc["storms"]:
        kinds.add("pfc_storm")
    explained = {(s["capture"], s["src_mac"], s["priority"]) for s in doc["storms"]} | {
        (m["capture"], m["src_mac"], m["priority"]) for ch in doc["spreading"]
        for m in ch["members"]}
    if any((p["capture"], p["src_mac"], p["priority"]) not in explained and p["intervals"]
           for p in doc["pause_senders"]):
        kinds.add("pause")
    if doc["xon_storms"]:
        kinds.add("xon_storm")
    if doc["incast"]:
        kinds.add("incast")
    for f in doc["flows"]:
        if f["psn_gap_packets"]:
            kinds.add("loss")
        elif f["retransmitted_packets"]:
            kinds.add("retransmission")
        if f["rnr_naks"]:
            kinds.add("rnr")
        if f["icrc_failures"]:
            kinds.add("icrc")
        for e in (f["ecn"], f["reverse"]["ecn"]):
            if e["cnp_rate_violations"]:
                kinds.add("cnp_rate")
            if e["ce_packets"]:
                kinds.add("ecn")
    return sorted(kinds)


def _data_per_window(t: Rows, t0: int, interval_ns: int) -> dict[tuple[int, int], dict[int, int]]:
    """(flow, direction) -> window -> data bytes at one port: the payload of the first
    copy (first time its PSN passes this port) of every packet that carries one."""
    c = t.cols
    data: dict[tuple[int, int], dict[int, int]] = {}
    seen: set[tuple[int, int, int]] = set()
    for i in np.nonzero((c["kind"] == Kind.ROCE) & (c["payload"] > 0))[0].tolist():
        key = (int(c["flow"][i]), int(c["dir"][i]), int(c["psn"][i]))
        if key in seen:
            continue  # a retransmitted copy
        seen.add(key)
        w = (int(c["ts_ns"][i]) - t0) // interval_ns
        d = data.setdefault(key[:2], {})
        d[w] = d.get(w, 0) + int(c["payload"][i])
    return data


def _throughput(series: dict[int, int], interval_ns: int) -> dict[str, Any]:
    """The sparse throughput series: windows that carried data, ascending."""
    ws = sorted(series)
    return {"interval_s": interval_ns / 1e9, "start_s": [w * interval_ns / 1e9 for w in ws],
            "bps": [series[w] * 8 / (interval_ns / 1e9) for w in ws]}


def _sharing_truth(scenario: Scenario, tables: dict[str, Rows], t0: int,
                   opts: AnalysisOptions) -> dict[str, list[dict[str, Any]]]:
    """Fairness and incast, from the data each flow direction carried per window.

    Data: the payload of the first copy (first time its PSN passes this port) of
    every packet with payload: requests of WRITE/SEND flows, responses of READ
    flows. Per capture and window of ``interval_ns`` from ``t0``: Jain's index
    (sum x)^2 / (n sum x^2) over the directions sharing a destination IP (or an
    egress MAC) that carried data in it, when at least two did; an incast is a
    run of windows in which at least ``incast_senders`` source IPs sent data to
    one destination."""
    fairness: list[dict[str, Any]] = []
    incasts: list[dict[str, Any]] = []
    iv = opts.interval_ns
    for port, t in tables.items():
        data = _data_per_window(t, t0, iv)
        dests: dict[tuple[str, str], list[dict[int, int]]] = {}
        senders: dict[str, dict[int, set[int]]] = {}
        for (fidx, direction), series in data.items():
            f = scenario.flows[fidx]
            hop = next(h for h in f.hops if h.port == port)
            src, dst = (f.src_ip, f.dst_ip) if direction == 0 else (f.dst_ip, f.src_ip)
            egress = hop.dst_mac if direction == 0 else hop.src_mac
            dests.setdefault(("destination", format_ipv4_int(dst)), []).append(series)
            dests.setdefault(("egress", format_mac_int(egress)), []).append(series)
            per = senders.setdefault(format_ipv4_int(dst), {})
            for w in series:
                per.setdefault(w, set()).add(src)
        for (group, group_key), members in dests.items():
            if len(members) < 2:
                continue
            jains = []
            for w in sorted({w for m in members for w in m}):
                x = [m[w] for m in members if m.get(w, 0) > 0]
                if len(x) >= 2:
                    jains.append((sum(x) ** 2 / (len(x) * sum(v * v for v in x)), w))
            if not jains:
                continue
            worst = min(jains, key=lambda jw: (jw[0], jw[1]))
            fairness.append({"capture": port, "group": group, "key": group_key,
                             "flows": len(members), "windows": len(jains),
                             "jain_min": worst[0],
                             "jain_mean": sum(j for j, _ in jains) / len(jains),
                             "worst_window_start_s": worst[1] * iv / 1e9})
        for dst_ip, per in senders.items():
            hot = sorted(w for w, who in per.items() if len(who) >= opts.incast_senders)
            runs: list[list[int]] = []
            for w in hot:
                if runs and w == runs[-1][-1] + 1:
                    runs[-1].append(w)
                else:
                    runs.append([w])
            for r in runs:
                incasts.append({"capture": port, "destination": dst_ip,
                                "start_s": r[0] * iv / 1e9, "end_s": (r[-1] + 1) * iv / 1e9,
                                "max_senders": max(len(per[w]) for w in r)})
    return {"fairness": fairness, "incast": incasts}


#: Bytes of each extension header (IBTA §9.3, Table 9 and §9.3.1..9.3.6): RETH 16,
#: AETH 4, AtomicETH 28, AtomicAckETH 8, ImmDt 4, IETH 4, DETH 8, FETH 4; a CNP
#: carries 16 reserved bytes (Annex A17.9.2).
_EXT_BYTES: dict[str, int] = {"RETH": 16, "AETH": 4, "ATOMIC_ETH": 28, "ATOMIC_ACK_ETH": 8,
                              "IMM_DT": 4, "IETH": 4, "DETH": 8, "FETH": 4, "CNP_PADDING": 16}
#: Every generated frame: Ethernet 14 + 802.1Q 4 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4.
_FRAME_OVERHEAD_BYTES = 14 + 4 + 20 + 8 + 12 + 4


def _bad_icrcs_checked(scenario: Scenario, table: Rows, mine: Any, port: str) -> int:
    """Bad-ICRC packets of a flow at ``port`` that the snap length keeps whole: a frame
    is checked when it is captured whole, decided per packet from its length."""
    from netio.wire.bth import opcode_info

    rows = np.nonzero(mine & table.cols["bad_icrc"])[0]
    snaplen = scenario.port(port).snaplen
    n = 0
    for r in rows.tolist():
        op = int(table.cols["opcode"][r])
        pay = int(table.cols["payload"][r])
        ext = sum(_EXT_BYTES[h.name] for h in opcode_info(op).headers)
        n += _FRAME_OVERHEAD_BYTES + ext + pay + (-pay) % 4 <= snaplen
    return n


def _spreading_truth(scenario: Scenario, events: list[tuple[int, str, int, int | None]], t0: int,
                     opts: AnalysisOptions, tables: dict[str, Rows],
                     series: dict[str, dict[tuple[int, int], dict[int, int]]]
                     ) -> list[dict[str, Any]]:
    """Chains of pauses starting within the causality window of an earlier member."""
    chains: list[list[tuple[int, str, int, int | None]]] = []
    for ev in sorted(events):
        for chain in chains:
            if any(m[0] <= ev[0] <= m[0] + opts.causality_ns and (m[1], m[2]) != (ev[1], ev[2])
                   for m in chain):
                if all((m[1], m[2]) != (ev[1], ev[2]) for m in chain):
                    chain.append(ev)
                break
        else:
            chains.append([ev])
    out = []
    for chain in chains:
        if len(chain) < 2:
            continue
        root = chain[0]
        # Flows seen at the root's capture, addressed to the pausing MAC, at its priority.
        conv: list[tuple[str, int]] = []
        by_dst: dict[int, int] = {}
        for f in scenario.flows:
            for h in f.hops:
                if h.port == root[1] and h.dst_mac == root[2] and (
                        root[3] is None or f.priority == root[3]):
                    conv.append((f.name, f.dst_ip))
                    by_dst[f.dst_ip] = by_dst.get(f.dst_ip, 0) + f.messages * f.message_bytes
        dest = max(by_dst, key=lambda d: by_dst[d]) if by_dst else None
        victims = []
        for m in chain[1:]:
            dsts = {f.dst_ip for f in scenario.flows for h in f.hops
                    if h.port == m[1] and h.dst_mac == m[2]
                    and (m[3] is None or f.priority == m[3])}
            if dest is not None and dsts and dest not in dsts:
                victims.append({"capture": m[1], "paused_by": format_mac_int(m[2]),
                                "priority": m[3],
                                "destinations": sorted(format_ipv4_int(d) for d in dsts),
                                "flows": _paused_data_flows(scenario, m[1], m[2], m[3])})
        out.append({
            "root": {"capture": root[1], "src_mac": format_mac_int(root[2]),
                     "priority": root[3], "start_s": _s(root[0], t0)},
            "congested_destination": None if dest is None else format_ipv4_int(dest),
            "converging_flows": _converging(scenario, tables[root[1]], series[root[1]],
                                            root[1], root[2], root[3]),
            "members": [{"capture": m[1], "src_mac": format_mac_int(m[2]), "priority": m[3],
                         "start_s": _s(m[0], t0), "delay_s": (m[0] - root[0]) / 1e9}
                        for m in chain],
            "victims": victims,
        })
    return out


def _converging(scenario: Scenario, table: Rows, series: dict[tuple[int, int], dict[int, int]],
                port: str, mac: int, prio: int | None) -> list[dict[str, Any]]:
    """Every flow direction seen at ``port`` that is addressed to the pausing ``mac`` (at
    the paused priority), in order of its first packet there, with its data bytes."""
    c = table.cols
    out = []
    for fidx, f in enumerate(scenario.flows):
        if prio is not None and f.priority != prio:
            continue
        for h in f.hops:
            if h.port != port:
                continue
            for direction, to_mac in ((0, h.dst_mac), (1, h.src_mac)):
                rows = np.nonzero((c["flow"] == fidx) & (c["dir"] == direction)
                                  & (c["kind"] == Kind.ROCE))[0]
                if to_mac != mac or rows.size == 0:
                    continue
                src, dst = (f.src_ip, f.dst_ip) if direction == 0 else (f.dst_ip, f.src_ip)
                out.append((int(rows[0]), {
                    "capture": port, "src_ip": format_ipv4_int(src),
                    "dst_ip": format_ipv4_int(dst),
                    "dest_qp": f.dst_qp if direction == 0 else f.src_qp,
                    "data_bytes": sum(series.get((fidx, direction), {}).values())}))
    return [d for _, d in sorted(out, key=lambda x: x[0])]


def _paused_data_flows(scenario: Scenario, port: str, mac: int, prio: int | None
                       ) -> list[dict[str, Any]]:
    """Data-carrying directions at ``port`` addressed to the pausing ``mac``: write/send
    requests on hops toward it, READ responses on READ hops away from it."""
    out = []
    for f in scenario.flows:
        if prio is not None and f.priority != prio:
            continue
        data = f.messages * f.message_bytes
        for h in f.hops:
            if h.port != port:
                continue
            if h.dst_mac == mac and f.op != "read":
                out.append((f.src_ip, f.dst_ip, f.dst_qp, data))
            if h.src_mac == mac and f.op == "read":
                out.append((f.dst_ip, f.src_ip, f.src_qp, data))
    return [{"src_ip": format_ipv4_int(s), "dst_ip": format_ipv4_int(d), "dest_qp": q,
             "data_bytes": n} for s, d, q, n in sorted(out)]
