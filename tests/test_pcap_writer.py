"""PcapWriter: round trips through netio, dpkt and Wireshark's editcap."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import dpkt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pcap_builders import frames

from netio.errors import EncodeError
from netio.pcap import PcapHeader, PcapWriter, open_capture, scan_capture
from netio.pcap.format import MAX_CAPLEN_BYTES
from netio.wire.link import LinkType

TS0_NS = 1_796_052_305_146_700_123


def _read(data: bytes) -> list[tuple[int, bytes, int, int]]:
    with open_capture(io.BytesIO(data), strict=True) as reader:
        return [(r.ts_ns, r.frame, r.orig_len, r.linktype) for r in reader]


@pytest.mark.parametrize("nanosecond", [True, False])
def test_round_trip(tmp_path: Path, nanosecond: bool) -> None:
    path = tmp_path / "w.pcap"
    f = frames(5, size=300)
    with PcapWriter(path, linktype=LinkType.LINUX_SLL2, nanosecond=nanosecond) as writer:
        for i, frame in enumerate(f):
            writer.write(TS0_NS + i * 1_001, frame, orig_len=len(frame) + i)
        assert writer.records_written == 5
    unit = 1 if nanosecond else 1000
    expected = [((TS0_NS + i * 1_001) // unit * unit, frame, len(frame) + i, 276)
                for i, frame in enumerate(f)]
    assert _read(path.read_bytes()) == expected
    header = PcapHeader.decode(path.read_bytes()[:24])
    assert (header.nanosecond, header.snaplen, header.linktype) == (nanosecond,
                                                                     MAX_CAPLEN_BYTES, 276)
    with scan_capture(path) as scanned:
        assert [(int(t), scanned.frame(i)) for i, t in enumerate(scanned.ts_ns)] == [
            (e[0], e[1]) for e in expected]


def test_snaplen_truncates_and_keeps_orig_len() -> None:
    out = io.BytesIO()
    with PcapWriter(out, snaplen=64) as writer:
        writer.write(5, bytes(range(100)))
        writer.write(6, bytes(10), orig_len=1500)
    assert not out.closed  # a file object stays open
    assert _read(out.getvalue()) == [(5, bytes(range(64)), 100, 1), (6, bytes(10), 1500, 1)]


@pytest.mark.parametrize(("kwargs", "args", "fragment"), [
    ({}, (-1, b"x"), "ts_ns -1 outside"),
    ({}, ((1 << 32) * 10**9, b"x"), "outside the pcap range"),
    ({}, (0, b"xyz", 2), "orig_len 2 not in 3"),
    ({"snaplen": 0}, None, "snaplen 0"),
    ({"snaplen": MAX_CAPLEN_BYTES + 1}, None, "snaplen"),
    ({"linktype": 70000}, None, "linktype 70000"),
])
def test_writer_rejects_bad_values(kwargs: dict[str, int], args: tuple[int, bytes] | None,
                                   fragment: str) -> None:
    with pytest.raises(EncodeError, match=fragment):
        writer = PcapWriter(io.BytesIO(), **kwargs)
        assert args is not None
        writer.write(*args)


@pytest.mark.parametrize("nanosecond", [True, False])
def test_dpkt_reads_netio(nanosecond: bool) -> None:
    out = io.BytesIO()
    f = frames(4)
    with PcapWriter(out, nanosecond=nanosecond) as writer:
        for i, frame in enumerate(f):
            writer.write(1_700_000_000_250_000_000 + i * 500_000_000, frame)
    out.seek(0)
    theirs = list(dpkt.pcap.Reader(out))
    assert [buf for _, buf in theirs] == f
    assert [ts for ts, _ in theirs] == [1_700_000_000.25 + i * 0.5 for i in range(4)]


@pytest.mark.parametrize("nanosecond", [True, False])
def test_netio_reads_dpkt_pcap(nanosecond: bool) -> None:
    out = io.BytesIO()
    writer = dpkt.pcap.Writer(out, snaplen=9000, linktype=LinkType.RAW, nano=nanosecond)
    f = frames(4)
    for i, frame in enumerate(f):
        writer.writepkt(frame, ts=1_700_000_000.25 + i * 0.5)
    assert _read(out.getvalue()) == [(1_700_000_000_250_000_000 + i * 500_000_000, frame,
                                      len(frame), LinkType.RAW) for i, frame in enumerate(f)]


def test_netio_reads_dpkt_pcapng() -> None:
    out = io.BytesIO()
    writer = dpkt.pcapng.Writer(out, linktype=LinkType.ETHERNET)
    f = frames(3)
    for i, frame in enumerate(f):
        writer.writepkt(frame, ts=1_700_000_000.25 + i * 0.5)
    assert _read(out.getvalue()) == [(1_700_000_000_250_000_000 + i * 500_000_000, frame,
                                      len(frame), 1) for i, frame in enumerate(f)]


@pytest.mark.tools
def test_editcap_reads_netio(tmp_path: Path) -> None:
    tool = shutil.which("editcap")
    if tool is None:
        raise RuntimeError("editcap (Debian wireshark-common) is required for this test")
    src, dst = tmp_path / "netio.pcap", tmp_path / "wireshark.pcapng"
    with PcapWriter(src) as writer:
        for i, frame in enumerate(frames(20, size=200)):
            writer.write(TS0_NS + i * 7, frame, len(frame) + 4)
    subprocess.run([tool, "-F", "pcapng", str(src), str(dst)], check=True, capture_output=True)
    assert _read(dst.read_bytes()) == _read(src.read_bytes())


@settings(max_examples=60, deadline=None)
@given(
    nanosecond=st.booleans(),
    packets=st.lists(st.tuples(st.integers(0, (1 << 32) * 10**9 - 1), st.binary(max_size=200),
                               st.integers(0, 3000)), max_size=12),
)
def test_round_trip_property(nanosecond: bool, packets: list[tuple[int, bytes, int]]) -> None:
    out = io.BytesIO()
    with PcapWriter(out, nanosecond=nanosecond) as writer:
        for ts_ns, frame, extra in packets:
            writer.write(ts_ns, frame, len(frame) + extra)
    unit = 1 if nanosecond else 1000
    expected = [(ts // unit * unit, frame, len(frame) + extra, 1)
                for ts, frame, extra in packets]
    data = out.getvalue()
    assert _read(data) == expected
    for native_scan in (True, False):
        with scan_capture(data, native_scan=native_scan) as scanned:
            assert [(int(scanned.ts_ns[i]), scanned.frame(i), int(scanned.orig_len[i]),
                     int(scanned.linktype[i])) for i in range(len(scanned))] == expected
