"""The findings of one analysis: what a network engineer must look at, in words.

``findings(doc)`` reads the result document (``netio.analyze.schema``) and
returns ``{severity, kind, message}`` entries, critical first, then warnings,
then information; within a severity, root causes (pause spreading) before
their symptoms (storms), then input problems, XON storms, incasts, then
per-flow problems by ``FLOW_KINDS`` (losses first). A flow seen identically at
several capture points is one finding naming every point.

Losses and retransmissions are told apart by what the capture shows: a PSN
gap is a loss before the capture point; a retransmission without a gap
follows an RNR NAK (receiver not ready), a NAK for a loss after the capture
point, or, with neither, the requester's timeout (the packet or its ACK was
lost after the capture point, or the ACK came late).
"""

from __future__ import annotations

from typing import Any

from netio.analyze.units import human_duration

SEVERITIES: tuple[str, ...] = ("critical", "warning", "info")
#: Per-flow finding kinds, the most important first (losses before their side effects).
FLOW_KINDS: tuple[str, ...] = ("loss", "read_loss", "retransmission", "rnr", "nak", "icrc",
                               "cnp_rate", "ecn")


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 packet``, ``2 packets``."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def percent(ratio: float) -> str:
    """A ratio as a percentage that never shows a nonzero ratio as 0.00%."""
    if ratio == 0:
        return "0%"
    if ratio < 1e-4:
        return "<0.01%"
    return f"{ratio:.2%}"


def t_s(seconds: float) -> str:
    """A time since the first packet, to the µs, without trailing zeros."""
    return f"{seconds:.6f}".rstrip("0").rstrip(".") if seconds else "0"


def flow_name(f: dict[str, Any]) -> str:
    return f"{f['src_ip']}->{f['dst_ip']} qp 0x{f['dest_qp']:x}"


def _prio(x: dict[str, Any]) -> str:
    return "all priorities (802.3x PAUSE)" if x["priority"] is None else \
        f"priority {x['priority']}"


def _storm(s: dict[str, Any], storm_s: float) -> str:
    return (f"PFC storm on {s['capture']}: {s['src_mac']} kept {_prio(s)} paused for "
            f"{s['duration_s'] * 1e3:.1f} ms (t={t_s(s['start_s'])}..{t_s(s['end_s'])} s; "
            f"a storm is >= {storm_s * 1e3:g} ms)")


def _spreading(ch: dict[str, Any], incast: list[dict[str, Any]], interval_s: float) -> str:
    r = ch["root"]
    others = ch["members"][1:]
    msg = (f"Pause spreading from {r['capture']}: {r['src_mac']} paused {_prio(r)} at "
           f"t={t_s(r['start_s'])} s")
    if others:
        last = max(m["delay_s"] for m in others)
        points = ", ".join(dict.fromkeys(m["capture"] for m in others))
        msg += (f" and {plural(len(others), 'more sender')} followed within "
                f"{human_duration(last)} (on {points})")
    dest = ch["congested_destination"]
    if dest:
        msg += f"; congested destination {dest}"
        # An incast onto it that was under way when the root paused (within a window).
        cause = [i for i in incast if i["destination"] == dest
                 and i["start_s"] <= r["start_s"] <= i["end_s"] + interval_s]
        if cause:
            msg += (f" (incast: {cause[0]['max_senders']} senders from "
                    f"t={t_s(cause[0]['start_s'])} s)")
    flows = [f"{flow_name(x)} on {x['capture']}" for v in ch["victims"] for x in v["flows"]]
    if flows:
        msg += f"; victims (paused, not sending to {dest}): {', '.join(flows)}"
    elif ch["victims"]:
        msg += "; victims: the peers paused by " + ", ".join(
            f"{v['paused_by']} on {v['capture']}" for v in ch["victims"])
    return msg


def _retransmissions(f: dict[str, Any], gap_packets: int, gaps: int, retx: int,
                     ratio: float | None, what: str = "") -> str | None:
    """One sentence on a direction's losses and retransmissions, with their likely cause."""
    if not gap_packets and not retx:
        return None
    parts = []
    if gap_packets:
        parts.append(f"{plural(gap_packets, 'packet')} lost before this capture point "
                     f"({plural(gaps, 'PSN gap')})")
    else:
        parts.append("no loss before this capture point")
    if retx:
        share = f" ({percent(ratio)} of requests)" if ratio is not None else ""
        parts.append(f"{plural(retx, 'packet')} retransmitted{share}")
    seq_naks = f["naks"].get("PSN_SEQUENCE_ERROR", 0) if not what else 0
    rnr = f["rnr_naks"] if not what else 0
    if retx and seq_naks:
        parts.append(f"go-back-N after {plural(seq_naks, 'NAK')} (PSN sequence error)"
                     + ("" if gap_packets else ": the loss was after this capture point"))
    elif retx and rnr:
        parts.append(f"resent after {plural(rnr, 'RNR NAK')} (receiver not ready)")
    elif retx and not gap_packets:
        parts.append("no NAK seen: a timeout retransmission (the packet or its ACK was lost "
                     "after this capture point, or the ACK came late)")
    return what + "; ".join(parts)


def _flow_problems(f: dict[str, Any], cnp_gap_s: float) -> list[tuple[str, str, str]]:
    """(severity, kind, text) of one flow (its name and capture are added by the caller)."""
    out: list[tuple[str, str, str]] = []
    text = _retransmissions(f, f["psn_gap_packets"], f["psn_gaps"],
                            f["retransmitted_packets"], f["retransmission_ratio"])
    if text:
        out.append(("warning", "loss" if f["psn_gap_packets"] else "retransmission", text))
    rr = f["read_responses"]
    if rr:
        text = _retransmissions(f, rr["psn_gap_packets"], rr["psn_gaps"],
                                rr["retransmitted_packets"], None, "READ responses: ")
        if text:
            out.append(("warning", "read_loss", text))
    if f["rnr_naks"]:
        timers = ", ".join(human_duration(t) for t in f["rnr_timer_s"])
        out.append(("warning", "rnr", f"{plural(f['rnr_naks'], 'RNR NAK')} from the responder "
                    f"(receiver not ready: no receive buffer posted; retry after >= {timers})"))
    other_naks = {k: v for k, v in f["naks"].items() if k != "PSN_SEQUENCE_ERROR"}
    if other_naks:
        out.append(("warning", "nak", "NAKs " + ", ".join(
            f"{k.replace('_', ' ').lower()} x{v}" for k, v in other_naks.items())))
    if f["icrc_failures"]:
        n = f["icrc_failures"]
        out.append(("warning", "icrc", f"{plural(n, 'packet')} with a bad ICRC (corrupted on "
                    f"the way; the receiver drops {'it' if n == 1 else 'them'})"))
    gap = human_duration(cnp_gap_s)
    for d, side in ((f["ecn"], ""), ((f["reverse"] or {}).get("ecn"), "reverse direction: ")):
        if d and d["cnp_rate_violations"]:
            out.append(("warning", "cnp_rate",
                        f"{side}{d['cnp_rate_violations']} of {plural(d['cnps'], 'CNP')} came "
                        f"less than {gap} after the previous one for this QP (DCQCN sends at "
                        f"most one per {gap})"))
    for d, side in ((f["ecn"], ""), ((f["reverse"] or {}).get("ecn"), "reverse direction: ")):
        if d and d["ce_packets"]:
            out.append(("info", "ecn", f"{side}{plural(d['ce_packets'], 'packet')} CE-marked "
                        f"(congestion on the path), {plural(d['cnps'], 'CNP')} sent back"))
    return out


def findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The document's findings, most important first (see the module docstring)."""
    out: list[dict[str, Any]] = []
    storm_s = doc["options"]["storm_detection_s"]
    for ch in doc["spreading"]:
        out.append({"severity": "critical", "kind": "pause_spreading",
                    "message": _spreading(ch, doc["incast"], doc["options"]["interval_s"])})
    for s in doc["storms"]:
        out.append({"severity": "critical", "kind": "pfc_storm",
                    "message": _storm(s, storm_s)})
    explained = {(s["capture"], s["src_mac"], s["priority"]) for s in doc["storms"]} | {
        (m["capture"], m["src_mac"], m["priority"]) for ch in doc["spreading"]
        for m in ch["members"]}
    for p in doc["pause_senders"]:
        if (p["capture"], p["src_mac"], p["priority"]) in explained or not p["intervals"]:
            continue
        out.append({"severity": "info", "kind": "pause",
                    "message": f"Pauses on {p['capture']}: {p['src_mac']} paused {_prio(p)} "
                               f"for {human_duration(p['paused_s'])} in "
                               f"{plural(len(p['intervals']), 'interval')} (longest "
                               f"{human_duration(p['longest_pause_s'])}, "
                               f"{percent(p['paused_fraction'])} of the capture)"})
    # What is wrong with the input qualifies everything below it.
    for w in doc["warnings"]:
        out.append({"severity": "warning", "kind": "input", "message": w})
    for s in doc["xon_storms"]:
        out.append({"severity": "warning", "kind": "xon_storm",
                    "message": f"XON storm on {s['capture']}: {s['src_mac']} sent "
                               f"{plural(s['xon_frames'], 'XON frame')} for {_prio(s)} "
                               f"({s['rate_per_s']:.0f}/s, t={t_s(s['start_s'])}.."
                               f"{t_s(s['end_s'])} s)"})
    interval_ms = doc["options"]["interval_s"] * 1e3
    for i in doc["incast"]:
        out.append({"severity": "warning", "kind": "incast",
                    "message": f"Incast on {i['capture']}: up to {i['max_senders']} senders "
                               f"to {i['destination']} in one {interval_ms:g} ms window, "
                               f"t={t_s(i['start_s'])}..{t_s(i['end_s'])} s"})
    # Per flow, merged over the capture points that saw the same thing.
    merged: dict[tuple[str, str, str, str], list[str]] = {}
    flows = doc["flows"]  # streamed documents: only those that may have a problem
    for f in (flows.with_problems() if hasattr(flows, "with_problems") else flows):
        for severity, kind, text in _flow_problems(f, doc["options"]["cnp_min_gap_s"]):
            merged.setdefault((severity, kind, flow_name(f), text), []).append(f["capture"])
    ranked = sorted(merged.items(), key=lambda kv: FLOW_KINDS.index(kv[0][1]))
    for (severity, kind, name, text), caps in ranked:
        out.append({"severity": severity, "kind": kind,
                    "message": f"{name} on {', '.join(caps)}: {text}"})
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    out.sort(key=lambda x: rank[x["severity"]])  # stable: the order above within each
    return out


__all__ = ["FLOW_KINDS", "SEVERITIES", "findings", "flow_name", "percent", "plural", "t_s"]
