"""One analysis result, rendered as human text and JSON (PNG plots: ``netio.analyze.plots``).

The text puts the findings first (storms, spreading, then losses and
congestion), then tables whose headers carry their units.
"""

from __future__ import annotations

import json
from typing import Any

from netio.analyze.units import human_bytes, human_duration, human_rate


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return []
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(c.rjust(w) if i else c.ljust(w)
                             for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    return out


def _lat(s: dict[str, Any] | None) -> str:
    if not s:
        return "-"
    return f"{s['p50'] * 1e6:.1f}/{s['p99'] * 1e6:.1f}"


def to_text(doc: dict[str, Any], *, max_flows: int = 30) -> str:
    out: list[str] = []
    caps = doc["captures"]
    total = sum(c["packets"] for c in caps)
    out.append(f"netio-analyze: {len(caps)} capture(s), {total} packets "
               f"({sum(c['roce_packets'] for c in caps)} RoCEv2, "
               f"{sum(c['pfc_frames'] for c in caps)} PFC, "
               f"{sum(c['pause_frames'] for c in caps)} PAUSE)")
    out.append("")
    sev = {"critical": "!!", "warning": " !", "info": "  "}
    if doc["findings"]:
        out.append("Findings (most important first)")
        for f in doc["findings"]:
            out.append(f"{sev[f['severity']]} {f['message']}")
    else:
        out.append("Findings: nothing abnormal (no pauses, storms, losses or congestion marks)")
    out.append("")
    out.append("Captures")
    out += _table(["capture", "packets", "RoCE", "PFC", "PAUSE", "other", "malformed",
                   "duration[s]", "link[Gb/s]", "complete"],
                  [[c["name"], str(c["packets"]), str(c["roce_packets"]), str(c["pfc_frames"]),
                    str(c["pause_frames"]), str(c["other_packets"]),
                    str(c["malformed_packets"]), f"{c['duration_s']:.6f}",
                    f"{c['link_bps'] / 1e9:g}", "yes" if c["complete"] else "NO"]
                   for c in caps])
    if doc["storms"]:
        out += ["", "PFC storms (paused >= "
                f"{doc['options']['storm_detection_s'] * 1e3:g} ms)"]
        out += _table(["capture", "sender MAC", "prio", "start[s]", "end[s]", "duration[ms]"],
                      [[s["capture"], s["src_mac"], _prio(s), f"{s['start_s']:.6f}",
                        f"{s['end_s']:.6f}", f"{s['duration_s'] * 1e3:.3f}"]
                       for s in doc["storms"]])
    for ch in doc["spreading"]:
        r = ch["root"]
        out += ["", f"Pause spreading chain rooted at {r['src_mac']} on {r['capture']} "
                f"(t={r['start_s']:.6f} s)"]
        if ch["congested_destination"]:
            conv = ", ".join(f"{f['src_ip']}->{f['dst_ip']}" for f in ch["converging_flows"])
            out.append(f"  congested destination {ch['congested_destination']}; "
                       f"converging flows: {conv}")
        out += ["  " + x for x in _table(
            ["capture", "pausing MAC", "prio", "start[s]", "after root[us]"],
            [[m["capture"], m["src_mac"], _prio(m), f"{m['start_s']:.6f}",
              f"{m['delay_s'] * 1e6:.1f}"] for m in ch["members"]])]
        for v in ch["victims"]:
            out.append(f"  victim: the peer paused by {v['paused_by']} on {v['capture']} sends "
                       f"only to {', '.join(v['destinations'])}, not to "
                       f"{ch['congested_destination']}")
            for f in v["flows"]:
                out.append(f"    paused flow {f['src_ip']}->{f['dst_ip']} qp 0x{f['dest_qp']:06x}"
                           f" ({human_bytes(f['data_bytes'])} of data)")
    if doc["pause_senders"]:
        out += ["", "Pause senders"]
        out += _table(["capture", "sender MAC", "prio", "XOFF", "XON", "intervals", "paused[ms]",
                       "longest[ms]", "paused[%]", "rate[frames/s]"],
                      [[p["capture"], p["src_mac"], _prio(p), str(p["xoff_frames"]),
                        str(p["xon_frames"]), str(len(p["intervals"])),
                        f"{p['paused_s'] * 1e3:.3f}", f"{p['longest_pause_s'] * 1e3:.3f}",
                        f"{p['paused_fraction'] * 100:.2f}", f"{p['frame_rate_per_s']:.1f}"]
                       for p in doc["pause_senders"]])
    if doc["xon_storms"]:
        out += ["", "XON storms"]
        out += _table(["capture", "sender MAC", "prio", "start[s]", "end[s]", "XON frames"],
                      [[s["capture"], s["src_mac"], _prio(s), f"{s['start_s']:.6f}",
                        f"{s['end_s']:.6f}", str(s["xon_frames"])] for s in doc["xon_storms"]])
    flows = doc["flows"]
    if flows:
        out += ["", f"RoCE flows ({len(flows)}, largest first"
                + (f", first {max_flows} shown" if len(flows) > max_flows else "") + ")"]
        out += _table(
            ["capture", "flow (src->dst qp)", "pkts", "bytes", "goodput[b/s]", "msgs", "lost",
             "retx", "retx[%]", "NAK", "RNR", "CE", "CNP", "ACK p50/p99[us]",
             "READ p50/p99[us]", "ICRC bad"],
            [[f["capture"], f"{f['src_ip']}->{f['dst_ip']} 0x{f['dest_qp']:06x}",
              str(f["packets"]), human_bytes(f["bytes"]), human_rate(f["goodput_bps"]),
              str(f["messages"]), str(f["psn_gap_packets"]), str(f["retransmitted_packets"]),
              f"{f['retransmission_ratio'] * 100:.2f}", str(sum(f["naks"].values())),
              str(f["rnr_naks"]),
              str(f["ecn"]["ce_packets"] + ((f["reverse"] or {}).get("ecn") or {}).get(
                  "ce_packets", 0)),
              str(f["ecn"]["cnps"] + ((f["reverse"] or {}).get("ecn") or {}).get("cnps", 0)),
              _lat(f["ack_latency_s"]), _lat(f["read_latency_s"]), str(f["icrc_failures"])]
             for f in flows[:max_flows]])
    if doc["fairness"]:
        out += ["", f"Fairness (Jain's index per {doc['options']['interval_s'] * 1e3:g} ms "
                "window, 1 = fair)"]
        out += _table(["capture", "group", "key", "flows", "windows", "min", "mean",
                       "worst at[s]"],
                      [[x["capture"], x["group"], x["key"], str(x["flows"]), str(x["windows"]),
                        f"{x['jain_min']:.3f}", f"{x['jain_mean']:.3f}",
                        f"{x['worst_window_start_s']:.3f}"] for x in doc["fairness"]])
    if doc["assumptions"]:
        out += ["", "Assumptions"]
        out += [f"- {a}" for a in doc["assumptions"]]
    return "\n".join(out) + "\n"


def _prio(x: dict[str, Any]) -> str:
    return "all" if x["priority"] is None else str(x["priority"])


__all__ = ["human_duration", "to_json", "to_text"]
