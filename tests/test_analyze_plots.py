"""What the PNG charts draw: steps with zeros while paused, the whole capture span, storms.

The series are checked through the functions the charts are drawn from
(``netio.analyze.plots``), on the small scenario (a 300 ms PFC storm from
0.3 s, a READ flow, an incast with CE marks and CNPs from 0.25 s to 0.3 s)
and on a variant with several pauses per sender, an 802.3x PAUSE and an XON
storm.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pcap_builders import pcap_file

from netio.analyze import engine
from netio.analyze.engine import analyze
from netio.analyze.options import AnalysisOptions
from netio.analyze.plots import (
    capture_span_s,
    data_streams,
    ecn_captures,
    ecn_series,
    pause_rows,
    plotted_throughput,
    throughput_series,
    window_steps,
    write_plots,
)
from netio.pcap import PcapWriter
from netio.scenario import generate, scenario_from_dict
from netio.scenario.presets import small_dict
from netio.wire.bth import Bth, Opcode
from netio.wire.ext import Reth
from netio.wire.packet import build_roce_frame

PNG = b"\x89PNG\r\n\x1a\n"


def _analyse(d: dict[str, Any], out: Path) -> dict[str, Any]:
    caps = generate(scenario_from_dict(d), out, truth=False).captures
    return analyze([str(p) for p in caps], AnalysisOptions())


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _analyse(small_dict(), tmp_path_factory.mktemp("plots"))


@pytest.fixture(scope="module")
def pauses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = small_dict()
    p2 = "02:00:00:01:00:02"
    d["pauses"] += [
        {"port": "sw1-p2", "src_mac": p2, "start": 0.05, "duration": 0.02},
        {"port": "sw1-p2", "src_mac": p2, "start": 0.10, "duration": 0.03},
        {"port": "sw1-p2", "src_mac": p2, "start": 0.70, "duration": 0.05, "kind": "pause"},
    ]
    d["xon_storms"] = [{"port": "sw1-p4", "src_mac": "02:00:00:01:00:04", "priority": 3,
                        "start": 0.62, "duration": 0.25, "interval": 1e-4}]
    return _analyse(d, tmp_path_factory.mktemp("pauses"))


def _flow(doc: dict[str, Any], capture: str, src: str, dst: str) -> dict[str, Any]:
    return next(f for f in doc["flows"]
                if (f["capture"], f["src_ip"], f["dst_ip"]) == (capture, src, dst))


def test_window_steps_fill_empty_windows_with_one_zero_step() -> None:
    s = window_steps("x", [2, 3, 7], [5.0, 6.0, 1.0], 0.5, 0, 10)
    assert s.edges_s == (0.0, 1.0, 1.5, 2.0, 3.5, 4.0, 5.0)
    assert s.values == (0.0, 5.0, 6.0, 0.0, 1.0, 0.0)
    assert [s.at(t) for t in (0.2, 1.2, 1.7, 2.5, 3.7, 4.9, 5.0)] == [0, 5, 6, 0, 1, 0, 0]
    assert s.between(2.0, 3.5) == [0.0]
    # A million-window span with two busy windows is a handful of steps.
    big = window_steps("y", [10, 999_990], [1.0, 2.0], 1e-3, 0, 1_000_000)
    assert len(big.values) == 5 and big.edges_s[-1] == pytest.approx(1000.0)
    # Nothing at all: one zero step over the span.
    assert window_steps("z", [], [], 1.0, 3, 5).values == (0.0,)


def test_throughput_is_zero_while_paused_not_a_line_across(small: dict[str, Any]) -> None:
    f = _flow(small, "host3", "10.0.0.1", "10.0.0.3")
    # The document lists no window during the storm (sparse) ...
    assert not [t for t in f["throughput"]["start_s"] if 0.305 < t < 0.59]
    stream = next(d for d in data_streams(small) if d.capture == "host3"
                  and d.label.startswith("10.0.0.1->10.0.0.3"))
    s = throughput_series(small, stream)
    # ... and the plotted series is 0 through the pause, busy before and after it.
    assert set(s.between(0.31, 0.59)) == {0.0}
    assert s.at(0.1) > 0 and s.at(0.8) > 0
    assert max(s.values) == pytest.approx(max(f["throughput"]["bps"]) / 1e9)
    # It covers the capture from its first to its last packet.
    cap = next(c for c in small["captures"] if c["name"] == "host3")
    assert s.edges_s[0] <= cap["first_ts_s"] and s.edges_s[-1] >= cap["last_ts_s"]
    assert s.edges_s[-1] - cap["last_ts_s"] <= f["throughput"]["interval_s"]


def test_read_responses_are_drawn_and_stop_while_their_sender_is_paused(
        small: dict[str, Any]) -> None:
    read = next(d for d in data_streams(small) if "READ responses" in d.label)
    assert read.capture == "sw1-p4" and read.label.startswith("10.0.0.4->10.0.0.5 qp 0x53")
    s = throughput_series(small, read)
    # sw1 pauses h4 (which sends the READ responses) from 0.3006 s to 0.5506 s.
    assert set(s.between(0.31, 0.55)) == {0.0}
    assert s.at(0.1) > 0 and s.at(0.7) > 0


def test_top_n_streams_by_data(small: dict[str, Any]) -> None:
    streams = data_streams(small)
    assert [d.data_bytes for d in streams] == sorted((d.data_bytes for d in streams),
                                                     reverse=True)
    drawn, total = plotted_throughput(small, n=3)
    assert total == len(streams) > 3
    assert [s.label for _, s in drawn] == [d.label for d in streams[:3]]


def test_ecn_series_cover_the_capture_span(small: dict[str, Any]) -> None:
    dt = small["options"]["interval_s"]
    for cap in small["captures"]:
        doc = small["ecn_series"][cap["name"]]
        n = math.floor(cap["last_ts_s"] / dt + 1e-9) + 1
        assert len(doc["ce_packets"]) == len(doc["cnps"]) == n
    assert ecn_captures(small) == ["host3", "sw1-p2", "sw1-p1"]  # most marks first
    ce, cnp = ecn_series(small, "host3")
    cap = next(c for c in small["captures"] if c["name"] == "host3")
    assert ce.edges_s[-1] >= cap["last_ts_s"] > 0.89
    # Marks from 0.25 s to 0.3 s only; zero before and after, to the end.
    assert ce.at(0.27) > 0 and cnp.at(0.27) > 0
    assert set(ce.between(0.0, 0.24)) == set(ce.between(0.31, 0.9)) == {0.0}
    assert sum(v for v in ce.values) == sum(small["ecn_series"]["host3"]["ce_packets"])


def test_pause_rows_keep_every_interval_and_mark_storms(pauses: dict[str, Any]) -> None:
    rows = {r.label: r for r in pause_rows(pauses)}
    p2 = rows["sw1-p2 02:00:00:01:00:02 prio 3"]
    assert [(round(s, 4), round(e, 4)) for s, e in p2.paused_s] == [
        (0.05, 0.07), (0.1, 0.13), (0.3004, 0.4504)]
    assert p2.storms_s == ()  # 150 ms: below the 200 ms storm detection time
    host3 = rows["host3 02:00:00:00:00:03 prio 3"]
    assert host3.storms_s == ((0.3, 0.6),)
    assert host3.detected_s == (pytest.approx(0.5),)  # 200 ms into the storm
    assert rows["sw1-p4 02:00:00:01:00:04 prio 3"].xon_storms_s == (
        (pytest.approx(0.62), pytest.approx(0.8699)),)
    pause = rows["sw1-p2 02:00:00:01:00:02 PAUSE (all priorities)"]
    assert pause.paused_s == ((pytest.approx(0.7), pytest.approx(0.75)),)
    # Earliest pause first.
    assert next(iter(rows)) == p2.label
    starts = [min(s for s, _ in r.paused_s) for r in rows.values()]
    assert starts == sorted(starts)


def test_plots_are_written(pauses: dict[str, Any], tmp_path: Path) -> None:
    paths = write_plots(pauses, tmp_path)
    assert [p.name for p in paths] == ["pause_timeline.png", "flow_throughput.png", "ce_cnp.png"]
    for p in paths:
        assert p.read_bytes()[:8] == PNG


def test_plots_of_a_capture_without_roce_or_pauses(tmp_path: Path) -> None:
    path = tmp_path / "plain.pcap"
    frame = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + bytes(46)
    path.write_bytes(pcap_file([(1, i * 1000, frame, len(frame)) for i in range(3)]))
    doc = analyze([str(path)], AnalysisOptions())
    assert doc["flows"] == [] and ecn_captures(doc) == [] and pause_rows(doc) == []
    assert capture_span_s(doc) == (0.0, 2e-6)
    for p in write_plots(doc, tmp_path / "plots"):
        assert p.read_bytes()[:8] == PNG


def test_ecn_series_length_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two packets an hour apart: the dense CE/CNP lists stop at the cap.
    path = tmp_path / "gap.pcap"
    w = PcapWriter(path)
    for i, ts in enumerate((1_000_000_000, 3_601_000_000_000)):
        w.write(ts, build_roce_frame(
            src_mac=b"\x02\0\0\0\0\x01", dst_mac=b"\x02\0\0\0\0\x02", src_ip="10.0.0.1",
            dst_ip="10.0.0.2", src_port=5000,
            bth=Bth(Opcode.RC_RDMA_WRITE_ONLY, dest_qp=0x12, psn=i), reth=Reth(0x1000, 5, 8),
            payload=bytes(8)))
    w.close()
    monkeypatch.setattr(engine, "MAX_SERIES_INTERVALS", 1000)
    doc = analyze([str(path)], AnalysisOptions())
    series = doc["ecn_series"]["gap"]
    assert len(series["ce_packets"]) == len(series["cnps"]) == 1000
