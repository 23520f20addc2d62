"""One analysis result, rendered as human text and JSON (PNG plots: ``netio.analyze.plots``).

The text puts the findings first (``netio.analyze.findings``: root causes,
storms, then input problems, incasts, per-flow losses and congestion), then
tables whose headers carry their units: the captures, the pause spreading
chains, storms, pause senders, flows (with a legend of their columns) and
fairness.
"""

from __future__ import annotations

import io
import json
import textwrap
from collections.abc import Sequence
from typing import Any, TextIO

from netio.analyze.findings import flow_name, plural
from netio.analyze.units import human_bytes, human_duration


def write_json(doc: dict[str, Any], out: TextIO) -> None:
    """Write ``doc`` as one JSON document, streamed: each top-level member on its own
    line, and each element of a top-level list (every flow, pause sender, ...) on its
    own line, encoded by the C encoder one element at a time (so the text of the
    whole document is never held in memory, and 100,000 flows take seconds, not
    minutes as with ``indent``)."""
    enc = json.JSONEncoder().encode
    out.write("{")
    for i, (key, value) in enumerate(doc.items()):
        out.write(("\n " if i == 0 else ",\n ") + enc(key) + ": ")
        if isinstance(value, Sequence) and not isinstance(value, str):
            # Streamed flow documents come as text already (``FlowDocuments.json_lines``).
            lines = value.json_lines() if hasattr(value, "json_lines") else map(enc, value)
            out.write("[")
            for j, text in enumerate(lines):
                out.write(("\n  " if j == 0 else ",\n  ") + text)
            out.write("\n ]" if len(value) else "]")
        else:
            out.write(enc(value))
    out.write("\n}\n")


def to_json(doc: dict[str, Any]) -> str:
    buf = io.StringIO()
    write_json(doc, buf)
    return buf.getvalue()


def _table(headers: list[str], rows: list[list[str]], *, text_columns: int = 1) -> list[str]:
    """Aligned columns: the first ``text_columns`` left-aligned, the numbers right-aligned."""
    if not rows:
        return []
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < text_columns else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return [line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def _lat_us(s: dict[str, Any] | None) -> str:
    if not s:
        return "-"
    return "/".join(f"{v:.1f}" if v < 1000 else f"{v:.0f}"
                    for v in (s["p50"] * 1e6, s["p99"] * 1e6))


def _us(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e6:.1f}"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.2f}"


def _flow_row(f: dict[str, Any]) -> list[str]:
    rev = f["reverse"] or {}
    rev_ecn = rev.get("ecn") or {}
    return [
        f["capture"], flow_name(f), _ops(f), str(f["packets"] + rev.get("packets", 0)),
        _mib(f["bytes"] + rev.get("bytes", 0)), _mib(f["goodput_bytes"]),
        f"{f['goodput_bps'] / 1e9:.3f}",
        str(f["messages"]), str(f["psn_gap_packets"]), str(f["retransmitted_packets"]),
        str(sum(f["naks"].values())), str(f["rnr_naks"]),
        str(f["ecn"]["ce_packets"] + rev_ecn.get("ce_packets", 0)),
        str(f["ecn"]["cnps"] + rev_ecn.get("cnps", 0)),
        _lat_us(f["ack_latency_s"]), _lat_us(f["read_latency_s"]), str(f["icrc_failures"]),
    ]


def _ops(f: dict[str, Any]) -> str:
    """What the requester did: WRITE, SEND, READ, ATOMIC (by opcode name), or '-'."""
    kinds = []
    for name in f["opcodes"]:
        for word in ("WRITE", "SEND", "READ_REQUEST", "COMPARE_SWAP", "FETCH_ADD"):
            if word in name:
                k = {"READ_REQUEST": "READ", "COMPARE_SWAP": "ATOMIC",
                     "FETCH_ADD": "ATOMIC"}.get(word, word)
                if k not in kinds:
                    kinds.append(k)
    return "+".join(kinds) or "-"


FLOW_LEGEND = (
    "pkts, wire, data, CE and CNP count both directions; data = payload sent the first time "
    "(a READ's data are its responses): the JSON goodput_bytes; rate = that data over the time "
    "from the first to the last packet of either direction: the JSON goodput_bps; lost = packets "
    "missing from the PSN sequence (lost before this capture point); retx = requests sent "
    "again; NAK = NAKs other than RNR NAKs")


#: Flows listed per capture in the text report unless ``--top`` says otherwise.
DEFAULT_TOP_FLOWS = 20


def to_text(doc: dict[str, Any], *, top: int = DEFAULT_TOP_FLOWS) -> str:
    """The human report; at most ``top`` flows per capture (most bytes first; the JSON
    document has every flow)."""
    out: list[str] = []
    caps = doc["captures"]
    total = sum(c["packets"] for c in caps)
    read = [c for c in caps if c["packets"]]
    span = (max(c["last_ts_s"] for c in read) - min(c["first_ts_s"] for c in read)
            if read else 0.0)
    kinds = [(key, name) for key, name in (
        ("roce_packets", "RoCEv2"), ("pfc_frames", "PFC"), ("pause_frames", "802.3x PAUSE"),
        ("other_packets", "other"), ("malformed_packets", "malformed"))
        if key == "roce_packets" or sum(c[key] for c in caps)]
    out.append(f"netio-analyze: {plural(len(caps), 'capture')}, {total:,} packets over "
               f"{human_duration(span)}: " + ", ".join(
                   f"{sum(c[key] for c in caps):,} {name}" for key, name in kinds))
    out.append("")
    sev = {"critical": "!!", "warning": " !", "info": "  "}
    if doc["findings"]:
        out.append("Findings (most important first; !! critical, ! warning)")
        for f in doc["findings"]:
            out.append(f"{sev[f['severity']]} {f['message']}")
    else:
        out.append("Findings: none (no pauses, losses, retransmissions, NAKs, bad ICRCs or "
                   "congestion marks)")
    out.append("")
    out.append("Captures (times in seconds since the first packet of all captures)")
    out += _table(["capture", "packets", "RoCE", "PFC", "PAUSE", "other", "malformed",
                   "first[s]", "duration[s]", "link[Gb/s]", "complete"],
                  [[c["name"], str(c["packets"]), str(c["roce_packets"]), str(c["pfc_frames"]),
                    str(c["pause_frames"]), str(c["other_packets"]),
                    str(c["malformed_packets"]), f"{c['first_ts_s']:.6f}",
                    f"{c['duration_s']:.6f}", f"{c['link_bps'] / 1e9:g}",
                    "yes" if c["complete"] else "NO"]
                   for c in caps])
    if doc.get("connections"):
        out += ["", "Connections (CM REQ/REP/RTU, DREQ/DREP; active = the side that sent the REQ)"]
        out += _table(["capture", "active (ip qp)", "passive (ip qp)", "service", "MTU",
                       "retry", "RNR retry", "REQ at[s]", "set-up[us]", "tear-down[us]"],
                      [[c["capture"], f"{c['active']['ip']} 0x{c['active']['qpn']:x}",
                        "-" if c["passive"] is None else
                        f"{c['passive']['ip']} 0x{c['passive']['qpn']:x}",
                        c["service_id"], str(c["path_mtu_bytes"] or "-"), str(c["retry_count"]),
                        str(c["rnr_retry_count"]), f"{c['req_s']:.6f}", _us(c["setup_s"]),
                        _us(c["teardown_s"])] for c in doc["connections"]], text_columns=4)
    for ch in doc["spreading"]:
        r = ch["root"]
        out += ["", f"Pause spreading chain rooted at {r['src_mac']} on {r['capture']} "
                f"(t={r['start_s']:.6f} s)"]
        if ch["congested_destination"]:
            conv = ", ".join(f"{f['src_ip']}->{f['dst_ip']}" for f in ch["converging_flows"])
            out.append(f"  congested destination {ch['congested_destination']}; "
                       f"flows converging on it: {conv}")
        out += ["  " + x for x in _table(
            ["capture", "pausing MAC", "prio", "start[s]", "after root[us]"],
            [[m["capture"], m["src_mac"], _prio(m), f"{m['start_s']:.6f}",
              f"{m['delay_s'] * 1e6:.1f}"] for m in ch["members"]], text_columns=2)]
        for v in ch["victims"]:
            out.append(f"  victim: the peer paused by {v['paused_by']} on {v['capture']} sends "
                       f"only to {', '.join(v['destinations'])}, not to "
                       f"{ch['congested_destination']}")
            for f in v["flows"]:
                out.append(f"    paused flow {flow_name(f)} ({human_bytes(f['data_bytes'])} of "
                           "data in the capture)")
    if doc["storms"]:
        out += ["", "PFC storms (a queue paused continuously for >= "
                f"{doc['options']['storm_detection_s'] * 1e3:g} ms; longest first)"]
        out += _table(["capture", "sender MAC", "prio", "start[s]", "end[s]", "duration[ms]",
                       "detected[s]"],
                      [[s["capture"], s["src_mac"], _prio(s), f"{s['start_s']:.6f}",
                        f"{s['end_s']:.6f}", f"{s['duration_s'] * 1e3:.3f}",
                        f"{s['detected_s']:.6f}"]
                       for s in doc["storms"]], text_columns=2)
    if doc["pause_senders"]:
        out += ["", "Pause senders (the MAC that sent XOFF; its link partner stopped sending "
                "that priority)"]
        out += _table(["capture", "sender MAC", "prio", "XOFF", "XON", "intervals",
                       "paused[ms]", "longest[ms]", "paused[%]", "rate[frames/s]"],
                      [[p["capture"], p["src_mac"], _prio(p), str(p["xoff_frames"]),
                        str(p["xon_frames"]), str(len(p["intervals"])),
                        f"{p['paused_s'] * 1e3:.3f}", f"{p['longest_pause_s'] * 1e3:.3f}",
                        f"{p['paused_fraction'] * 100:.2f}", f"{p['frame_rate_per_s']:.1f}"]
                       for p in doc["pause_senders"]], text_columns=2)
    if doc["xon_storms"]:
        out += ["", "XON storms"]
        out += _table(["capture", "sender MAC", "prio", "start[s]", "end[s]", "XON frames",
                       "rate[frames/s]"],
                      [[s["capture"], s["src_mac"], _prio(s), f"{s['start_s']:.6f}",
                        f"{s['end_s']:.6f}", str(s["xon_frames"]), f"{s['rate_per_s']:.0f}"]
                       for s in doc["xon_storms"]], text_columns=2)
    flows = doc["flows"]
    if flows:
        shown: list[dict[str, Any]] = []
        per_capture: dict[str, int] = {}
        # Streamed documents: only the shown ones are made (100,000 flows, --top 20).
        heads = flows.first_of_each(top) if hasattr(flows, "first_of_each") else flows
        for f in heads:  # most bytes first within each capture
            k = per_capture[f["capture"]] = per_capture.get(f["capture"], 0) + 1
            if k <= top:
                shown.append(f)
        cut = len(shown) < len(flows)
        out += ["", f"RoCE flows ({len(flows)}; per capture point, most bytes first"
                + (f"; the first {top} of each capture shown (--top), all in --json"
                   if cut else "") + ")"]
        out += _table(
            ["capture", "flow (src->dst qp)", "ops", "pkts", "wire[MiB]", "data[MiB]",
             "rate[Gb/s]", "msgs", "lost", "retx", "NAK", "RNR", "CE", "CNP",
             "ACK p50/p99[us]", "READ p50/p99[us]", "bad ICRC"],
            [_flow_row(f) for f in shown], text_columns=3)
        out += textwrap.wrap(FLOW_LEGEND, 100, initial_indent="  (",
                             subsequent_indent="   ")
        out[-1] += ")"
    if doc["fairness"]:
        out += ["", f"Fairness (Jain's index over the flows with data, per "
                f"{doc['options']['interval_s'] * 1e3:g} ms window; 1 = equal shares)"]
        out += _table(["capture", "group", "key", "flows", "windows", "min", "mean",
                       "worst at[s]"],
                      [[x["capture"], x["group"], x["key"], str(x["flows"]), str(x["windows"]),
                        f"{x['jain_min']:.3f}", f"{x['jain_mean']:.3f}",
                        f"{x['worst_window_start_s']:.3f}"] for x in doc["fairness"]],
                      text_columns=3)
    if doc["assumptions"]:
        out += ["", "Assumptions"]
        out += [f"- {a}" for a in doc["assumptions"]]
    return "\n".join(out) + "\n"


def _prio(x: dict[str, Any]) -> str:
    return "all" if x["priority"] is None else str(x["priority"])


__all__ = ["human_duration", "to_json", "to_text", "write_json"]
