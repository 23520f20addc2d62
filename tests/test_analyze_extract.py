"""The native extractor gives exactly the columns of the decode_frame-based reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netio import native
from netio.analyze.columns import Flag, Kind, PacketColumns
from netio.analyze.extract import FlowIndex, extract_native, extract_reference
from netio.pcap.scan import CaptureScanner, ScanColumns
from netio.scenario import generate, scenario_from_dict
from netio.scenario.presets import small_dict
from netio.wire.bth import OPCODE_TABLE, Bth, ExtHeader, Opcode
from netio.wire.ethernet import Vlan
from netio.wire.ext import Aeth, Reth
from netio.wire.ip import Ecn
from netio.wire.packet import build_roce_frame
from netio.wire.pfc import build_pause_frame, build_pfc_frame

REF = Path(__file__).parents[1] / ".." / "shared" / "rxe-lab" / "ref-rxe-rc.pcap"

def _need_native() -> None:
    if not native.AVAILABLE:
        pytest.fail("netio._native is not built (run tools/rebuild)")


def _native_of(frames: list[tuple[bytes, int, int]]) -> PacketColumns:
    buf = b"".join(f for f, _, _ in frames) or b"\0"
    lens = [len(f) for f, _, _ in frames]
    offs = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64) if lens else \
        np.zeros(0, np.int64)
    n = len(frames)
    scan = ScanColumns(np.arange(n, dtype=np.int64), offs, np.array(lens, np.uint32),
                       np.array([o for _, _, o in frames], np.uint32),
                       np.array([lt for _, lt, _ in frames], np.uint16),
                       np.zeros(n, np.uint32))
    return extract_native(buf, scan)


def _check(frames: list[tuple[bytes, int, int]]) -> PacketColumns:
    ref = extract_reference(frames, np.arange(len(frames), dtype=np.int64))
    nat = _native_of(frames)
    assert nat.equals(ref) == []
    return ref


def _capture_parity(path: Path) -> PacketColumns:
    _need_native()
    with CaptureScanner(str(path)) as sc:
        scan = ScanColumns.concatenate(list(sc.chunks()))
        mv = memoryview(sc.buffer)
        frames = [(bytes(mv[o:o + c]), int(lt), int(ol)) for o, c, lt, ol in
                  zip(scan.frame_offset, scan.caplen, scan.linktype, scan.orig_len,
                      strict=True)]
        ref = extract_reference(frames, scan.ts_ns)
        nat = extract_native(sc.buffer, scan)
        del mv
    assert nat.equals(ref) == []
    return ref


def test_reference_capture_parity() -> None:
    cols = _capture_parity(REF)
    assert np.all(cols.kind == Kind.ROCE)
    assert np.all(cols.flags & Flag.ICRC_OK)  # all 200 kernel-rxe ICRCs verify


def test_generated_capture_parity(tmp_path: Path) -> None:
    g = generate(scenario_from_dict(small_dict()), tmp_path, truth=False)
    cols = _capture_parity(g.captures[0])
    assert set(np.unique(cols.kind).tolist()) == {Kind.ROCE, Kind.PFC}
    bad = ((cols.flags & Flag.ICRC_CHECKED) != 0) & ((cols.flags & Flag.ICRC_OK) == 0)
    assert int(np.count_nonzero(bad)) == 1


def test_opcode_layout_matches_wire_table() -> None:
    _need_native()
    out = native.ffi.new("int32_t[6]")
    for op in range(256):
        native.lib.netio_analyze_opcode_layout(op, out)
        info = OPCODE_TABLE[op]
        if info is None:
            assert out[0] == 0, hex(op)
            continue
        assert out[0] == 1 and out[1] == info.header_bytes, hex(op)
        assert bool(out[2]) == info.has_payload, hex(op)
        assert (out[3] >= 0) == (ExtHeader.RETH in info.headers), hex(op)
        assert (out[4] >= 0) == (ExtHeader.AETH in info.headers), hex(op)


def _samples() -> list[bytes]:
    mac1, mac2 = b"\x02\0\0\0\0\x01", b"\x02\0\0\0\0\x02"
    out = [
        build_roce_frame(src_mac=mac1, dst_mac=mac2, src_ip="10.0.0.1", dst_ip="10.0.0.2",
                         src_port=5000, bth=Bth(Opcode.RC_RDMA_WRITE_FIRST, dest_qp=0x12,
                                                psn=77, ack_req=True, fecn=True),
                         reth=Reth(0x1000, 5, 4096), payload=bytes(1024), ecn=Ecn.CE,
                         vlan=Vlan(pcp=3, vid=100)),
        build_roce_frame(src_mac=mac2, dst_mac=mac1, src_ip="10.0.0.2", dst_ip="10.0.0.1",
                         src_port=5001, bth=Bth(Opcode.RC_ACKNOWLEDGE, dest_qp=0x11, psn=77),
                         aeth=Aeth.nak(3, 0)),
        build_roce_frame(src_mac=mac2, dst_mac=mac1, src_ip="fd00::2", dst_ip="fd00::1",
                         src_port=5001, bth=Bth(Opcode.RC_SEND_ONLY, dest_qp=0x11, psn=1,
                                                pad_count=1), payload=b"abc", ipv6=True),
        build_pfc_frame(mac1, 0x28, (0, 0, 0, 500, 0, 0xFFFF, 0, 0)),
        build_pause_frame(mac2, 1234),
    ]
    return out


def test_sample_frames_parity_and_fields() -> None:
    _need_native()
    frames = [(f, 1, len(f)) for f in _samples()]
    cols = _check(frames)
    assert cols.kind.tolist() == [Kind.ROCE, Kind.ROCE, Kind.ROCE, Kind.PFC, Kind.PAUSE]
    assert cols.payload_bytes[0] == 1024 and cols.reth_len[0] == 4096
    assert cols.ecn[0] == 3 and cols.pcp[0] == 3 and cols.vlan[0] == 100
    assert cols.flags[0] & Flag.FECN and cols.flags[0] & Flag.ACK_REQ
    assert cols.syndrome[1] >> 5 == 3
    assert cols.flags[2] & Flag.IPV6 and cols.payload_bytes[2] == 3
    assert cols.quanta[3].tolist() == [0, 0, 0, 500, 0, 0xFFFF, 0, 0]
    assert cols.quanta[4, 0] == 1234
    # Truncated by a snap length: headers still extracted, ICRC unchecked.
    short = [(f[:n], 1, len(f)) for f in _samples()[:3] for n in (10, 40, 60, 70, 90)]
    _check(short)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 4), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)),
                                   max_size=6),
       st.integers(0, 1200), st.sampled_from([1, 101, 113, 228, 229, 276, 147]))
def test_fuzzed_frames_parity(which: int, flips: list[tuple[int, int]], cut: int,
                              linktype: int) -> None:
    _need_native()
    frame = bytearray(_samples()[which])
    for pos, val in flips:
        if pos < len(frame):
            frame[pos] = val
    data = bytes(frame[:cut])
    _check([(data, linktype, max(len(data), len(frame)))])


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=120), st.sampled_from([1, 101, 113, 276, 228, 229]))
def test_random_bytes_parity(data: bytes, linktype: int) -> None:
    _need_native()
    _check([(data, linktype, len(data))])


def test_flow_index_native_matches_dict() -> None:
    _need_native()
    rng = np.random.default_rng(1)
    n = 20000
    cols = PacketColumns.empty(n)
    cols.kind[:] = rng.choice([Kind.ROCE, Kind.PFC], size=n, p=[0.9, 0.1])
    cols.src_ip[:] = rng.integers(0, 50, n)
    cols.dst_ip[:] = rng.integers(0, 50, n)
    cols.dest_qp[:] = rng.integers(0, 40, n)
    a, b = FlowIndex(use_native=True), FlowIndex(use_native=False)
    for part in (slice(0, 7000), slice(7000, n)):
        sub = cols.take(part)
        assert np.array_equal(a.ids(sub), b.ids(sub))
    assert a.keys == b.keys and len(a) > 1024  # the C table grew past its first size
