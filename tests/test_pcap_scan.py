"""netio.pcap fast path: native scanner == pure-Python reference == streaming reader."""

from __future__ import annotations

import mmap
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from pcap_builders import SAMPLES, read_scanner, read_streaming

from netio import native
from netio.errors import CaptureError, CaptureWarning
from netio.pcap import CaptureFormat, CaptureScanner, ScanColumns, open_capture, scan_capture

REF = Path(__file__).resolve().parents[1] / ".." / "shared" / "rxe-lab" / "ref-rxe-rc.pcap"


def test_native_scanner_is_built() -> None:
    # CI builds netio._native; the parity tests below would otherwise compare the
    # reference with itself.
    assert native.AVAILABLE


def _all_agree(data: bytes) -> None:
    streaming = read_streaming(data)
    for native_scan in (True, False):
        for chunks in ((1 << 16,), (1, 2, 3)):
            assert read_scanner(data, native_scan=native_scan, chunk_sizes=chunks) == streaming


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_samples_agree(name: str) -> None:
    data = SAMPLES[name]
    outcome = read_streaming(data)
    assert outcome.damage is None and outcome.open_error is None and len(outcome.packets) >= 5
    _all_agree(data)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_truncation_agrees(name: str) -> None:
    data = SAMPLES[name]
    for cut in range(len(data) + 1):
        _all_agree(data[:cut])


def test_reference_capture_agrees() -> None:
    data = REF.read_bytes()
    _all_agree(data)
    for cut in range(len(data) - 3000, len(data) + 1, 97):
        _all_agree(data[:cut])


@pytest.mark.tools
@pytest.mark.parametrize("fmt", ["pcapng", "nsecpcap"])
def test_editcap_conversions_agree(tmp_path: Path, fmt: str) -> None:
    tool = shutil.which("editcap")
    if tool is None:
        raise RuntimeError("editcap (Debian wireshark-common) is required for this test")
    out = tmp_path / "c"
    subprocess.run([tool, "-F", fmt, str(REF), str(out)], check=True, capture_output=True)
    data = out.read_bytes()
    _all_agree(data)
    assert read_streaming(data).packets == read_streaming(REF.read_bytes()).packets


@pytest.mark.parametrize("native_scan", [True, False])
def test_scan_capture_result(native_scan: bool) -> None:
    with open_capture(REF) as reader:
        records = list(reader)
    with scan_capture(REF, native_scan=native_scan, chunk_records=64) as result:
        assert result.format == CaptureFormat.PCAP and result.path == str(REF)
        assert isinstance(result.buffer, mmap.mmap)
        assert len(result) == 200 and result.damage is None and result.warnings == ()
        assert result.ts_ns.dtype == np.int64 and result.frame_offset.dtype == np.int64
        assert result.caplen.dtype == np.uint32 and result.orig_len.dtype == np.uint32
        assert result.linktype.dtype == np.uint16 and result.interface_id.dtype == np.uint32
        assert result.ts_ns.tolist() == [r.ts_ns for r in records]
        assert result.frame_offset.tolist() == [r.byte_offset + 16 for r in records]
        assert result.caplen.tolist() == [len(r.frame) for r in records]
        assert [result.frame(i) for i in range(200)] == [r.frame for r in records]
    assert result.buffer.closed


def test_fill_uses_caller_arrays_and_resumes() -> None:
    data = SAMPLES["pcapng-le"]
    expected = read_streaming(data).packets
    with CaptureScanner(data) as scanner:
        assert scanner.native and scanner.format == CaptureFormat.PCAPNG
        out = ScanColumns.empty(2)
        got: list[int] = []
        while not scanner.done:
            n = scanner.fill(out)
            got += out.ts_ns[:n].tolist()
            assert scanner.state.record_index == len(got)
        assert scanner.fill(out) == 0
    assert got == [p[0] for p in expected]


def test_chunks_number_records() -> None:
    with CaptureScanner(REF) as scanner:
        chunks = list(scanner.chunks(64))
    assert [c.first_record_index for c in chunks] == [0, 64, 128, 192]
    assert [len(c) for c in chunks] == [64, 64, 64, 8]
    with pytest.raises(ValueError, match="chunk_records"):
        next(CaptureScanner(REF).chunks(0))


@pytest.mark.parametrize("native_scan", [True, False])
def test_scan_damage_warns_or_raises(native_scan: bool) -> None:
    data = SAMPLES["pcap-ns-be"][:-4]
    with pytest.warns(CaptureWarning, match="record 5, byte offset"):
        result = scan_capture(data, native_scan=native_scan)
    assert len(result) == 5 and result.damage is not None
    assert str(result.warnings[0]) == str(result.damage) == read_streaming(data).damage
    with pytest.raises(CaptureError, match="record 5"):
        scan_capture(data, native_scan=native_scan, strict=True)


def test_scan_rejects_non_captures(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    with pytest.raises(CaptureError, match="empty file"):
        scan_capture(empty)
    with pytest.raises(CaptureError, match="bad magic"):
        scan_capture(b"\x00" * 64)
    with pytest.raises(CaptureError, match="cannot open"):
        scan_capture(tmp_path / "missing.pcap")
