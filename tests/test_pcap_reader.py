"""netio.pcap streaming reader: classic pcap, pcapng, reference capture, damage."""

from __future__ import annotations

import io
import shutil
import subprocess
import warnings
from pathlib import Path

import dpkt
import pytest
from pcap_builders import (
    block,
    epb,
    frames,
    idb,
    option,
    packet_block,
    pcap_file,
    shb,
    spb,
)

from netio.errors import CaptureError, CaptureWarning
from netio.pcap import CaptureFormat, PcapHeader, Record, open_capture
from netio.pcap.format import MAX_CAPLEN_BYTES
from netio.pcap.source import CHUNK_BYTES
from netio.wire.link import LinkType

REF = Path(__file__).resolve().parents[1] / ".." / "shared" / "rxe-lab" / "ref-rxe-rc.pcap"


def records_of(path: Path | str) -> list[Record]:
    with open_capture(path, strict=True) as reader:
        return list(reader)


def key(records: list[Record]) -> list[tuple[int, bytes, int, int]]:
    return [(r.ts_ns, r.frame, r.orig_len, r.linktype) for r in records]


def editcap(tmp_path: Path, fmt: str, src: Path) -> Path:
    tool = shutil.which("editcap")
    if tool is None:
        raise RuntimeError("editcap (Debian wireshark-common) is required for this test")
    out = tmp_path / f"converted.{fmt}"
    subprocess.run([tool, "-F", fmt, str(src), str(out)], check=True, capture_output=True)
    return out


# --- the reference kernel-rxe capture -------------------------------------------------


def test_reference_capture_matches_dpkt() -> None:
    records = records_of(REF)
    assert len(records) == 200
    with REF.open("rb") as file:
        theirs = list(dpkt.pcap.Reader(file))
    assert [r.frame for r in records] == [buf for _, buf in theirs]
    for record, (ts, _) in zip(records, theirs, strict=True):
        assert abs(record.ts_ns / 1e9 - ts) < 1e-6
        assert record.linktype == LinkType.ETHERNET
        assert record.orig_len == len(record.frame)
    assert [r.record_index for r in records] == list(range(200))
    assert records[0].byte_offset == 24
    assert records[1].byte_offset == 24 + 16 + len(records[0].frame)


@pytest.mark.tools
@pytest.mark.parametrize("fmt", ["pcapng", "nsecpcap"])
def test_reference_capture_converted_by_editcap_reads_identically(tmp_path: Path,
                                                                  fmt: str) -> None:
    converted = editcap(tmp_path, fmt, REF)
    with open_capture(converted, strict=True) as reader:
        theirs = list(reader)
        expected_format = CaptureFormat.PCAPNG if fmt == "pcapng" else CaptureFormat.PCAP
        assert reader.format == expected_format
    assert key(theirs) == key(records_of(REF))


# --- classic pcap ----------------------------------------------------------------------


@pytest.mark.parametrize("big_endian", [False, True])
@pytest.mark.parametrize("nanosecond", [False, True])
def test_classic_pcap_byte_orders_and_resolutions(big_endian: bool, nanosecond: bool) -> None:
    frame_list = frames(3)
    frac = [999_999, 0, 123_456] if not nanosecond else [999_999_999, 0, 123_456_789]
    data = pcap_file([(1_700_000_000 + i, frac[i], f, len(f) + 40 * i)
                      for i, f in enumerate(frame_list)],
                     big_endian=big_endian, nanosecond=nanosecond, linktype=LinkType.LINUX_SLL2)
    with open_capture(io.BytesIO(data), strict=True) as reader:
        got = list(reader)
        assert reader.pcap_header == PcapHeader(big_endian=big_endian, nanosecond=nanosecond,
                                                snaplen=65535, linktype=276)
    unit = 1 if nanosecond else 1000
    assert [r.ts_ns for r in got] == [(1_700_000_000 + i) * 10**9 + frac[i] * unit
                                      for i in range(3)]
    assert [r.frame for r in got] == frame_list
    assert [r.orig_len for r in got] == [len(f) + 40 * i for i, f in enumerate(frame_list)]
    assert [r.truncated for r in got] == [False, True, True]
    assert {r.linktype for r in got} == {LinkType.LINUX_SLL2}


@pytest.mark.parametrize("linktype", [LinkType.ETHERNET, LinkType.RAW, LinkType.LINUX_SLL,
                                      LinkType.LINUX_SLL2, LinkType.IPV4, LinkType.IPV6])
def test_classic_pcap_link_types(linktype: LinkType) -> None:
    data = pcap_file([(1, 2, b"\x45" + bytes(39), 40)], linktype=linktype)
    (record,) = list(open_capture(io.BytesIO(data)))
    assert record.linktype == linktype


def test_classic_pcap_fcs_bits_and_any_snaplen() -> None:
    # LinkType field upper bits announce a 4-byte FCS; the snaplen (here 16) is not
    # enforced: captures with caplen above it exist in the wild.
    data = pcap_file([(1, 0, bytes(60), 60)], linktype=1 | (1 << 26) | (2 << 28), snaplen=16)
    with open_capture(io.BytesIO(data), strict=True) as reader:
        (record,) = list(reader)
        assert reader.pcap_header is not None
        assert reader.pcap_header.fcs_bytes == 4
        assert reader.pcap_header.snaplen == 16
    assert record.linktype == LinkType.ETHERNET and record.caplen == 60


def test_empty_capture_has_no_records() -> None:
    assert list(open_capture(io.BytesIO(pcap_file([])), strict=True)) == []


def test_header_round_trips() -> None:
    header = PcapHeader(big_endian=True, nanosecond=False, snaplen=1500, linktype=113,
                        fcs_bytes=4)
    assert PcapHeader.decode(header.encode()) == header


# --- pcapng ----------------------------------------------------------------------------


@pytest.mark.parametrize("big_endian", [False, True])
def test_pcapng_multi_section_multi_interface(big_endian: bool) -> None:
    f = frames(6)
    other = not big_endian
    data = b"".join([
        shb(big_endian=big_endian, options=option(1, b"a comment", big_endian=big_endian)
            + option(0, b"", big_endian=big_endian)),
        idb(LinkType.ETHERNET, tsresol=9, big_endian=big_endian, name=b"eth0"),
        idb(LinkType.RAW, big_endian=big_endian),  # default µs
        block(4, b"\0\0\0\0", big_endian=big_endian),  # NRB, skipped
        epb(1, 5_000_001, f[0], big_endian=big_endian),
        epb(0, 7_000_000_000_123, f[1], 1500, big_endian=big_endian),
        block(0x40000BAD, b"PEN!custom", big_endian=big_endian),  # custom block, skipped
        block(5, bytes(16), big_endian=big_endian),  # ISB, skipped
        # second section, other byte order: interfaces start over
        shb(big_endian=other),
        idb(LinkType.LINUX_SLL2, tsresol=0x80 | 20, tsoffset_s=1_000, big_endian=other),
        idb(LinkType.LINUX_SLL, snaplen=10, big_endian=other),
        epb(0, 3 << 20, f[2], big_endian=other),
        packet_block(1, 42, f[3], big_endian=other),
        block(0x12345678, b"unknown", big_endian=other),
        # third section: SPB takes interface 0 and its snaplen
        shb(big_endian=big_endian),
        idb(LinkType.IPV4, snaplen=20, big_endian=big_endian),
        spb(f[4], big_endian=big_endian),
        spb(f[5][:8], 9000, big_endian=big_endian),
    ])
    with open_capture(io.BytesIO(data), strict=True) as reader:
        got = list(reader)
        assert reader.format == CaptureFormat.PCAPNG
    assert [(r.linktype, r.interface_id) for r in got] == [
        (LinkType.RAW, 1), (LinkType.ETHERNET, 0), (LinkType.LINUX_SLL2, 0),
        (LinkType.LINUX_SLL, 1), (LinkType.IPV4, 0), (LinkType.IPV4, 0)]
    assert [r.ts_ns for r in got] == [5_000_001_000, 7_000_000_000_123,
                                      3 * 10**9 + 1_000 * 10**9, 42_000, 0, 0]
    assert [r.frame for r in got] == [f[0], f[1], f[2], f[3], f[4][:20], f[5][:8]]
    assert [r.orig_len for r in got] == [len(f[0]), 1500, len(f[2]), len(f[3]), len(f[4]), 9000]
    assert [r.record_index for r in got] == list(range(6))
    assert got[0].byte_offset == data.index(epb(1, 5_000_001, f[0], big_endian=big_endian))


@pytest.mark.parametrize(("tsresol", "units", "ts_ns"), [
    (6, 1_500_000, 1_500_000_000),  # default resolution, explicit
    (9, 123, 123),
    (3, 5, 5_000_000),
    (0, 2, 2_000_000_000),
    (12, 123_456, 123),  # picoseconds floor to ns
    (30, 10**19, 0),  # 10^-30 s units: far below 1 ns
    (0x80 | 0, 5, 5_000_000_000),  # 2^0 s
    (0x80 | 10, 1024, 1_000_000_000),  # 2^-10 s
    (0x80 | 30, 3, 2),  # 3 * 1e9 / 2^30 = 2.79 -> 2
    (0x80 | 32, (1_700_000_000 << 32) | (1 << 31), 1_700_000_000_500_000_000),
])
def test_pcapng_timestamp_resolutions(tsresol: int, units: int, ts_ns: int) -> None:
    data = shb() + idb(tsresol=tsresol) + epb(0, units, b"x" * 14)
    (record,) = list(open_capture(io.BytesIO(data), strict=True))
    assert record.ts_ns == ts_ns


@pytest.mark.parametrize("tsoffset_s", [-5, 0, 86_400])
def test_pcapng_timestamp_offset(tsoffset_s: int) -> None:
    data = shb() + idb(tsresol=9, tsoffset_s=tsoffset_s) + epb(0, 10**10, b"x" * 14)
    (record,) = list(open_capture(io.BytesIO(data), strict=True))
    assert record.ts_ns == 10**10 + tsoffset_s * 10**9


# --- sources ---------------------------------------------------------------------------


def test_reads_from_a_pipe() -> None:
    with subprocess.Popen(["cat", str(REF)], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        with open_capture(proc.stdout, strict=True) as reader:
            got = list(reader)
    assert key(got) == key(records_of(REF))


class _CountingFile(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.read_sizes: list[int] = []

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.read_sizes.append(len(data))
        return data


def test_streaming_reads_in_bounded_chunks() -> None:
    frame = bytes(1000)
    data = pcap_file([(i, 0, frame, 1000) for i in range(4000)])  # about 4 MiB
    file = _CountingFile(data)
    assert sum(1 for _ in open_capture(file, strict=True)) == 4000
    assert max(file.read_sizes) <= CHUNK_BYTES
    assert len(file.read_sizes) > len(data) // CHUNK_BYTES


# --- damage ----------------------------------------------------------------------------


def _damaged(data: bytes, expect_records: int, *fragments: str) -> CaptureError:
    """Non-strict: the good records then a warning; strict: the same error raised."""
    with pytest.warns(CaptureWarning) as caught:
        reader = open_capture(io.BytesIO(data))
        got = list(reader)
    assert len(got) == expect_records
    assert reader.damage is not None and len(reader.warnings) == 1
    assert str(reader.warnings[0]) == str(reader.damage)
    assert any(isinstance(w.message, CaptureWarning) for w in caught)
    for fragment in fragments:
        assert fragment in str(reader.damage)
    strict = open_capture(io.BytesIO(data), strict=True)
    with pytest.raises(CaptureError) as raised:
        list(strict)
    assert str(raised.value) == str(reader.damage)
    return raised.value


def _good_pcap(n: int = 3) -> bytes:
    return pcap_file([(i, 0, f, len(f)) for i, f in enumerate(frames(n))])


def test_truncated_final_record_header() -> None:
    data = _good_pcap()
    error = _damaged(data + bytes(7), 3, "truncated record header: 7 bytes left, 16 needed")
    assert (error.record_index, error.byte_offset) == (3, len(data))
    assert f"record 3, byte offset {len(data)}" in str(error)


def test_truncated_final_record_data() -> None:
    data = _good_pcap()
    cut = data[:-5]
    last = len(data) - 16 - len(frames(3)[2])
    error = _damaged(cut, 2, "runs past the end of the file")
    assert (error.record_index, error.byte_offset) == (2, last)


def test_record_longer_than_file() -> None:
    data = _good_pcap() + pcap_file([(9, 0, b"", 5000)])[24:][:8] + (5000).to_bytes(4, "little")
    data += (5000).to_bytes(4, "little") + bytes(100)
    _damaged(data, 3, "5016 bytes needed, 116 left")


def test_absurd_captured_length() -> None:
    data = _good_pcap(1)
    bad = bytearray(data)
    bad[24 + 8:24 + 12] = (MAX_CAPLEN_BYTES + 1).to_bytes(4, "little")
    error = _damaged(bytes(bad), 0, f"captured length {MAX_CAPLEN_BYTES + 1} exceeds the limit")
    assert error.byte_offset == 24


@pytest.mark.parametrize(("data", "fragment"), [
    (b"", "empty file"),
    (b"GIF89a" + bytes(30), "bad magic number 0x47494638"),
    (bytes.fromhex("d4c3b2a1") + bytes(10), "truncated pcap file header: 14 bytes"),
])
def test_not_a_capture(data: bytes, fragment: str) -> None:
    for strict in (False, True):
        with pytest.raises(CaptureError, match=fragment):
            open_capture(io.BytesIO(data), strict=strict)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="cannot open"):
        open_capture(tmp_path / "nope.pcap")


def _pcapng_damage_cases() -> list[tuple[bytes, int, str, int]]:
    head = shb() + idb(tsresol=9)
    good = epb(0, 1, b"a" * 20)
    zero_len = (6).to_bytes(4, "little") + bytes(4) + bytes(20)
    mismatch = bytearray(epb(0, 2, b"b" * 20))
    mismatch[-4:] = (999).to_bytes(4, "little")
    caplen_big = bytearray(epb(0, 3, b"c" * 20))
    caplen_big[20:24] = (64).to_bytes(4, "little")
    bad_bom = bytearray(shb())
    bad_bom[8:12] = b"abcd"
    v2 = bytearray(shb())
    v2[12:14] = (2).to_bytes(2, "little")
    at = len(head) + len(good)
    return [
        (head + good + zero_len, 1, "EPB total length 0 is invalid", at),
        (head + good + (6).to_bytes(4, "little") + (13).to_bytes(4, "little") + bytes(12), 1,
         "EPB total length 13 is invalid", at),
        (head + good + bytes(mismatch), 1, "EPB trailing length 999 differs", at),
        (head + good + bytes(caplen_big), 1, "EPB captured length 64 does not fit its block", at),
        (head + good + epb(1, 5, b"x"), 1, "EPB names interface 1 but the section describes 1",
         at),
        (head + good + epb(0, 5, b"x")[:-3], 1, "EPB runs past the end of the file", at),
        (head + good + epb(0, 5, b"x")[:5], 1, "truncated block header: 5 bytes left", at),
        (head + good + shb()[:10], 1, "truncated SHB header: 10 bytes left, 12 needed", at),
        (head + good + bytes(bad_bom), 1, "SHB byte-order magic 0x61626364", at),
        (head + good + bytes(v2), 1, "pcapng version 2.0", at),
        (head + good + shb() + spb(b"x"), 1, "SPB names interface 0 but the section describes 0",
         at + len(shb())),
        (head + good + block(1, bytes(4)), 1, "IDB total length 16 is invalid", at),
        (head + good + block(1, bytes(8) + option(9, b"\x06\x06")), 1,
         "if_tsresol option has length 2", at),
        (head + good + block(1, bytes(8) + (9).to_bytes(2, "little") + (40).to_bytes(2, "little")),
         1, "IDB option 9 of length 40 runs past the block", at),
        (head + good + epb(0, (1 << 64) - 1, b"x"), 1, "timestamp 18446744073709551615", at),
        (head + good + block(6, bytes(12)), 1, "EPB total length 24 is invalid", at),
    ]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("data", "records", "fragment", "offset"), _pcapng_damage_cases())
def test_pcapng_damage(data: bytes, records: int, fragment: str, offset: int) -> None:
    error = _damaged(data, records, fragment)
    assert error.byte_offset == offset
    assert error.record_index == records


def test_damage_outcome_reports_path(tmp_path: Path) -> None:
    path = tmp_path / "cut.pcap"
    path.write_bytes(_good_pcap()[:-1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)
        reader = open_capture(path)
        assert len(list(reader)) == 2
    assert reader.damage is not None and reader.damage.path == str(path)
    assert str(reader.damage).startswith(f"{path}, record 2, byte offset ")
    reader.close()

