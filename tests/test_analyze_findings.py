"""Findings and the text report read as a network engineer would read them.

Every retransmission is given its cause (loss before the capture point, a NAK
for a loss after it, an RNR NAK, or a timeout); nothing reads as a
contradiction ("0 packets lost, 1 retransmitted"); the most important comes
first; a flow seen alike at several points is one finding.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from netio.analyze.engine import analyze
from netio.analyze.findings import SEVERITIES, findings, percent, plural, t_s
from netio.analyze.options import AnalysisOptions
from netio.analyze.report import to_text
from netio.scenario import generate, scenario_from_dict
from netio.scenario.presets import small_dict

ECN = {"ect_packets": 0, "ce_packets": 0, "cnps": 0, "cnp_reaction_s": None,
       "cnp_rate_violations": 0, "fecn_packets": 0, "becn_packets": 0}


def flow(**kw: Any) -> dict[str, Any]:
    f: dict[str, Any] = {
        "capture": "p1", "src_ip": "10.0.0.1", "dst_ip": "10.0.0.2", "dest_qp": 0x12,
        "psn_gap_packets": 0, "psn_gaps": 0, "retransmitted_packets": 0,
        "retransmission_ratio": 0.0, "read_responses": None, "naks": {}, "rnr_naks": 0,
        "rnr_timer_s": [], "icrc_failures": 0, "ecn": dict(ECN), "reverse": None}
    f.update(kw)
    return f


def doc(*flows: dict[str, Any], **kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "options": {"storm_detection_s": 0.2, "interval_s": 0.01, "cnp_min_gap_s": 50e-6},
        "spreading": [], "storms": [], "pause_senders": [], "xon_storms": [], "incast": [],
        "warnings": [], "flows": list(flows)}
    d.update(kw)
    return d


def messages(d: dict[str, Any]) -> list[str]:
    return [f["message"] for f in findings(d)]


def test_words() -> None:
    assert [plural(1, "packet"), plural(2, "packet"), plural(0, "NAK")] == [
        "1 packet", "2 packets", "0 NAKs"]
    assert [percent(0), percent(3e-5), percent(0.0123)] == ["0%", "<0.01%", "1.23%"]
    assert [t_s(0.3), t_s(0.300201), t_s(0.0)] == ["0.3", "0.300201", "0"]


@pytest.mark.parametrize(("kw", "says", "kind"), [
    # A retransmission with no gap and no NAK of any kind: the requester timed out.
    ({"retransmitted_packets": 3, "retransmission_ratio": 0.03},
     "10.0.0.1->10.0.0.2 qp 0x12 on p1: no loss before this capture point; 3 packets "
     "retransmitted (3.00% of requests); no NAK seen: a timeout retransmission (the packet or "
     "its ACK was lost after this capture point, or the ACK came late)", "retransmission"),
    # After an RNR NAK: the receiver was not ready, nothing was lost.
    ({"retransmitted_packets": 1, "retransmission_ratio": 1e-5, "rnr_naks": 1,
      "rnr_timer_s": [0.00128]},
     "no loss before this capture point; 1 packet retransmitted (<0.01% of requests); "
     "resent after 1 RNR NAK (receiver not ready)", "retransmission"),
    # A sequence NAK without a gap here: the loss was after the capture point.
    ({"retransmitted_packets": 4, "retransmission_ratio": 0.01,
      "naks": {"PSN_SEQUENCE_ERROR": 1}},
     "no loss before this capture point; 4 packets retransmitted (1.00% of requests); "
     "go-back-N after 1 NAK (PSN sequence error): the loss was after this capture point",
     "retransmission"),
    # A gap here, then go-back-N.
    ({"psn_gap_packets": 2, "psn_gaps": 1, "retransmitted_packets": 5,
      "retransmission_ratio": 0.05, "naks": {"PSN_SEQUENCE_ERROR": 1}},
     "2 packets lost before this capture point (1 PSN gap); 5 packets retransmitted (5.00% of "
     "requests); go-back-N after 1 NAK (PSN sequence error)", "loss"),
    # A gap whose retransmission was not captured (the capture ended first).
    ({"psn_gap_packets": 1, "psn_gaps": 1},
     "1 packet lost before this capture point (1 PSN gap)", "loss"),
])
def test_every_retransmission_has_a_cause(kw: dict[str, Any], says: str, kind: str) -> None:
    got = findings(doc(flow(**kw)))
    first = got[0]
    assert first["kind"] == kind and first["severity"] == "warning"
    assert says in first["message"]
    assert "0 packets lost" not in first["message"]


def test_read_responses_other_naks_icrc_and_cnp_rate() -> None:
    rev = {"ecn": {**ECN, "ce_packets": 7, "cnps": 7, "cnp_rate_violations": 6}}
    got = messages(doc(flow(
        read_responses={"psn_gap_packets": 0, "psn_gaps": 0, "retransmitted_packets": 2},
        naks={"REMOTE_ACCESS_ERROR": 2}, icrc_failures=3, reverse=rev)))
    assert any("READ responses: no loss before this capture point; 2 packets retransmitted; "
               "no NAK seen: a timeout retransmission" in m for m in got)
    assert any("NAKs remote access error x2" in m for m in got)
    assert any("3 packets with a bad ICRC (corrupted on the way; the receiver drops them)"
               in m for m in got)
    assert any("reverse direction: 6 of 7 CNPs came less than 50.0 µs after the previous one"
               in m for m in got)
    assert got[-1].endswith("reverse direction: 7 packets CE-marked (congestion on the path), "
                            "7 CNPs sent back")


def test_a_flow_seen_alike_at_two_points_is_one_finding() -> None:
    a = flow(rnr_naks=1, rnr_timer_s=[0.00128])
    b = copy.deepcopy(a)
    b["capture"] = "p2"
    c = copy.deepcopy(a)
    c["capture"] = "p3"
    c["rnr_naks"] = 2
    got = messages(doc(a, b, c))
    assert got == [
        "10.0.0.1->10.0.0.2 qp 0x12 on p1, p2: 1 RNR NAK from the responder (receiver not "
        "ready: no receive buffer posted; retry after >= 1.3 ms)",
        "10.0.0.1->10.0.0.2 qp 0x12 on p3: 2 RNR NAKs from the responder (receiver not "
        "ready: no receive buffer posted; retry after >= 1.3 ms)"]


def test_order_and_pauses_outside_storms() -> None:
    sender = {"capture": "p1", "src_mac": "02:00:00:00:00:09", "vlan": None, "kind": "pfc",
              "priority": 3, "intervals": [[0.1, 0.11], [0.2, 0.23]], "paused_s": 0.04,
              "longest_pause_s": 0.03, "paused_fraction": 0.04}
    d = doc(flow(icrc_failures=1, ecn={**ECN, "ce_packets": 5, "cnps": 5}),
            pause_senders=[sender], warnings=["p1.pcap: cut short at record 9"],
            incast=[{"capture": "p1", "destination": "10.0.0.2", "start_s": 0.1, "end_s": 0.12,
                     "max_senders": 5}])
    got = findings(d)
    assert [f["kind"] for f in got] == ["input", "incast", "icrc", "pause", "ecn"]
    assert got[3]["message"] == (
        "Pauses on p1: 02:00:00:00:00:09 paused priority 3 for 40.0 ms in 2 intervals "
        "(longest 30.0 ms, 4.00% of the capture)")
    ranks = [SEVERITIES.index(f["severity"]) for f in got]
    assert ranks == sorted(ranks)


@pytest.fixture(scope="module")
def small_doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out: Path = tmp_path_factory.mktemp("findings")
    caps = generate(scenario_from_dict(small_dict()), out, truth=False).captures
    return analyze([str(p) for p in caps], AnalysisOptions())


def test_small_scenario_reads_right(small_doc: dict[str, Any]) -> None:
    got = findings(small_doc)
    kinds = [f["kind"] for f in got]
    assert kinds[:4] == ["pause_spreading", "pfc_storm", "pfc_storm", "pfc_storm"]
    spread = got[0]["message"]
    assert "3 more senders followed within 600.0 µs (on sw1-p1, sw1-p2, sw1-p4)" in spread
    assert "victims (paused, not sending to 10.0.0.3): 10.0.0.4->10.0.0.5 qp 0x52 on sw1-p4, " \
           "10.0.0.4->10.0.0.5 qp 0x53 on sw1-p4" in spread
    by_kind = {f["kind"]: f["message"] for f in got}
    # Flow C: the retransmission follows its RNR NAK, at both points that saw it.
    assert by_kind["retransmission"].startswith(
        "10.0.0.2->10.0.0.3 qp 0x32 on host3, sw1-p2: no loss before this capture point; "
        "1 packet retransmitted")
    assert by_kind["retransmission"].endswith("resent after 1 RNR NAK (receiver not ready)")
    # Flow D: lost before sw1-p1, NAKed and resent.
    assert by_kind["loss"].startswith("10.0.0.1->10.0.0.5 qp 0x51 on sw1-p1: 1 packet lost "
                                      "before this capture point (1 PSN gap); ")
    assert by_kind["loss"].endswith("go-back-N after 1 NAK (PSN sequence error)")
    # sw1-p2's 150 ms pause is part of the chain: no separate finding.
    assert "pause" not in kinds
    # Per-flow problems: losses before their side effects, congestion marks last.
    assert kinds[4:] == ["incast", "loss", "retransmission", "rnr", "icrc", "ecn", "ecn"]
    text = to_text(small_doc)
    assert "0 packets lost" not in text and "(0.00%)" not in text
    flows = text[text.index("RoCE flows"):text.index("Fairness")]
    read = next(line for line in flows.splitlines() if "qp 0x42" in line)
    # The READ flow's data are its responses: not 0 b/s.
    cells = read.split()
    assert cells[4] == "READ" and float(cells[7]) > 0 and float(cells[8]) > 0  # data, rate
    assert "ACK p50/p99[us]" in flows and "wire[MiB]" in flows and "rate[Gb/s]" in flows
