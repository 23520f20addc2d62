"""Triggered capture: a storm on an interface records PFC/RoCE traffic with tcpdump,
bounded in time and size, then netio-analyze runs on it (or the record says why not)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from daemon_helpers import need_tool

from netio.daemon.app import Daemon
from netio.daemon.capture import CaptureManager, analyzer_available
from netio.daemon.config import CaptureSection, parse_config
from netio.telemetry import metrics as m
from netio.telemetry.sample import Collection, Sample

S = 1_000_000_000


def _sender(stop: threading.Event) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        while not stop.is_set():
            s.sendto(b"\x64" + bytes(40), ("127.0.0.1", 4791))  # RoCEv2 port
            s.sendto(b"not roce", ("127.0.0.1", 4792))  # filtered out
            time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.tools
def test_storm_triggers_bounded_capture_and_analysis(tmp_path: Path) -> None:
    need_tool("tcpdump")
    cap_dir = tmp_path / "captures"
    cfg = parse_config({
        "daemon": {"listen": "127.0.0.1:0", "sysfs_root": str(tmp_path)},
        "watchdog": {"detection_time_s": 0.2, "restoration_time_s": 0.2},
        "capture": {"enabled": True, "directory": str(cap_dir), "duration_s": 1.5,
                    "cooldown_s": 600, "ring_files": 2, "file_bytes": 1_000_000},
    })
    stop = threading.Event()
    sender = threading.Thread(target=_sender, args=(stop,), daemon=True)
    sender.start()

    async def scenario() -> Daemon:
        d = Daemon(cfg, jobs_factory=lambda c: [])
        for i in range(5):  # a storm on lo, priority 3
            d.ingest(Collection("ethtool", (
                Sample(m.PFC_PAUSE_FRAMES, ("lo", "rx", "3"), 100.0 * i),), (), i * S // 10))
        assert d.capture.in_progress() == ["lo"]
        # a second storm on the same interface does not start a second capture
        assert not d.capture.trigger("lo", "again")
        await d.capture.wait_idle()
        return d

    try:
        d = asyncio.run(scenario())
    finally:
        stop.set()
        sender.join(5)
    (rec,) = d.capture.records
    assert rec.status == "done", rec
    assert rec.reason == "pfc_storm rx priority 3"
    assert 1 <= len(rec.files) <= 2 and rec.total_bytes > 24
    assert rec.finished_unix_s is not None and rec.finished_unix_s - rec.started_unix_s < 10
    for f in rec.files:
        assert Path(f).parent == cap_dir and os.path.getsize(f) <= 1_000_000 + 65536
    # only RoCEv2 packets were kept: read the pcap with the project's reader if present
    data = Path(rec.files[0]).read_bytes()
    assert data[:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4")
    assert b"not roce" not in data and data.count(b"\x12\xb7") >= 10  # dst port 4791
    why = analyzer_available()
    (an,) = rec.analyses[:1]
    assert why is None, why
    assert an.error is None and an.report_path is not None and an.summary is not None, an
    report = json.loads(Path(an.report_path).read_text())
    # the library's document: the capture it read, with the RoCEv2 packets sent above
    (cap,) = report["captures"]
    assert cap["path"] == rec.files[0] and cap["roce_packets"] >= 10
    # the record is kept next to the capture and served by the API
    side = json.loads((cap_dir / f"{rec.id}.json").read_text())
    assert side["files"] == list(rec.files)
    assert d.capture.records_json()[0]["id"] == rec.id
    outcomes = {s.labels: s.value for s in d.capture.samples() if s.spec is m.CAPTURES}
    assert outcomes == {("done",): 1.0}


def test_capture_failure_is_recorded(tmp_path: Path) -> None:
    cfg = CaptureSection(enabled=True, directory=str(tmp_path / "c"),
                         tcpdump_path="/nonexistent/tcpdump", cooldown_s=0)

    async def go() -> CaptureManager:
        cm = CaptureManager(cfg)
        assert cm.trigger("eth9", "alarm x")
        await cm.wait_idle()
        return cm

    cm = asyncio.run(go())
    (rec,) = cm.records
    assert rec.status == "failed" and "/nonexistent/tcpdump not found" in (rec.error or "")


def test_disabled_capture_and_cooldown(tmp_path: Path) -> None:
    async def go() -> None:
        assert not CaptureManager(CaptureSection(enabled=False)).trigger("eth0", "x")
        cm = CaptureManager(CaptureSection(enabled=True, directory=str(tmp_path),
                                           tcpdump_path="/nonexistent", cooldown_s=600))
        assert cm.trigger("eth0", "x")
        await cm.wait_idle()
        assert not cm.trigger("eth0", "y")  # cooling down
        assert cm.trigger("eth1", "y")  # per interface
        await cm.wait_idle()
        assert cm.outcomes == {"failed": 2, "cooldown": 1}

    asyncio.run(go())


def test_prune_keeps_the_directory_under_its_cap(tmp_path: Path) -> None:
    d = tmp_path / "c"
    d.mkdir()
    for i in range(5):  # five old captures of 400 kB each
        (d / f"netio-2020010{i}T000000Z-000000000-eth0.pcap0").write_bytes(bytes(400_000))
        (d / f"netio-2020010{i}T000000Z-000000000-eth0.json").write_text("{}")
    cm = CaptureManager(CaptureSection(enabled=True, directory=str(d),
                                       max_total_bytes=1_000_000))
    cm._prune(reserve=100_000)  # 2 x 400 kB + json + 100 kB fit in 1 MB
    left = sorted(p.name for p in d.iterdir())
    assert left == ["netio-20200103T000000Z-000000000-eth0.json",
                    "netio-20200103T000000Z-000000000-eth0.pcap0",
                    "netio-20200104T000000Z-000000000-eth0.json",
                    "netio-20200104T000000Z-000000000-eth0.pcap0"]


def test_summary_line_from_a_report() -> None:
    from netio.daemon.capture import _summary

    assert _summary({"summary": "2 storms\nmore"}) == "2 storms"
    line = _summary({"schema_version": 1, "storms": [{}], "flows": [{}, {}], "captures": [{}],
                     "findings": [{"message": "PFC storm on port 1"}]})
    assert line == "storms=1, flows=2, findings=1; first finding: PFC storm on port 1"
