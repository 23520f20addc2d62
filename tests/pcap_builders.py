"""Hand-built pcap and pcapng bytes for the netio.pcap tests.

Written from the format drafts (draft-ietf-opsawg-pcap, draft-ietf-opsawg-pcapng),
independently of netio's writer, so the tests can cover byte orders and blocks
netio never writes.
"""

from __future__ import annotations

import io
import struct
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from netio.errors import CaptureError, CaptureWarning
from netio.pcap import CaptureScanner, ScanColumns, open_capture
from netio.wire.link import LinkType


def pcap_file(records: Iterable[tuple[int, int, bytes, int]], *, big_endian: bool = False,
              nanosecond: bool = True, linktype: int = 1, snaplen: int = 65535) -> bytes:
    """Classic pcap from ``(ts_s, ts_frac, frame, orig_len)``."""
    bo = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    out = [struct.pack(bo + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for ts_s, frac, frame, orig_len in records:
        out.append(struct.pack(bo + "IIII", ts_s, frac, len(frame), orig_len))
        out.append(frame)
    return b"".join(out)


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def block(block_type: int, body: bytes, *, big_endian: bool = False) -> bytes:
    bo = ">" if big_endian else "<"
    body = _pad(body)
    total = 12 + len(body)
    return struct.pack(bo + "II", block_type, total) + body + struct.pack(bo + "I", total)


def option(code: int, value: bytes, *, big_endian: bool = False) -> bytes:
    bo = ">" if big_endian else "<"
    return struct.pack(bo + "HH", code, len(value)) + _pad(value)


def end_of_options(*, big_endian: bool = False) -> bytes:
    return option(0, b"", big_endian=big_endian)


def shb(*, big_endian: bool = False, minor: int = 0, options: bytes = b"") -> bytes:
    bo = ">" if big_endian else "<"
    body = struct.pack(bo + "IHHq", 0x1A2B3C4D, 1, minor, -1) + options
    return block(0x0A0D0D0A, body, big_endian=big_endian)


def idb(linktype: int = 1, *, snaplen: int = 0, tsresol: int | None = None,
        tsoffset_s: int | None = None, big_endian: bool = False,
        name: bytes | None = None) -> bytes:
    bo = ">" if big_endian else "<"
    opts = b""
    if name is not None:
        opts += option(2, name, big_endian=big_endian)  # if_name, ignored by netio
    if tsresol is not None:
        opts += option(9, bytes([tsresol]), big_endian=big_endian)
    if tsoffset_s is not None:
        opts += option(14, struct.pack(bo + "q", tsoffset_s), big_endian=big_endian)
    if opts:
        opts += end_of_options(big_endian=big_endian)
    return block(1, struct.pack(bo + "HHI", linktype, 0, snaplen) + opts, big_endian=big_endian)


def epb(interface_id: int, ts_units: int, frame: bytes, orig_len: int | None = None, *,
        big_endian: bool = False, options: bytes = b"") -> bytes:
    bo = ">" if big_endian else "<"
    orig = len(frame) if orig_len is None else orig_len
    body = struct.pack(bo + "IIIII", interface_id, ts_units >> 32, ts_units & 0xFFFFFFFF,
                       len(frame), orig) + _pad(frame) + options
    return block(6, body, big_endian=big_endian)


def packet_block(interface_id: int, ts_units: int, frame: bytes, *,
                 big_endian: bool = False) -> bytes:
    """The obsolete Packet Block (pcapng appendix A)."""
    bo = ">" if big_endian else "<"
    body = struct.pack(bo + "HHIIII", interface_id, 0, ts_units >> 32, ts_units & 0xFFFFFFFF,
                       len(frame), len(frame)) + _pad(frame)
    return block(2, body, big_endian=big_endian)


def spb(frame: bytes, orig_len: int | None = None, *, big_endian: bool = False) -> bytes:
    bo = ">" if big_endian else "<"
    orig = len(frame) if orig_len is None else orig_len
    return block(3, struct.pack(bo + "I", orig) + _pad(frame), big_endian=big_endian)


def frames(n: int, *, size: int = 60) -> list[bytes]:
    """``n`` distinct synthetic frames of roughly ``size`` bytes."""
    return [bytes((i * 7 + j) & 0xFF for j in range(size + i % 5)) for i in range(n)]


def _pcapng_sample(big_endian: bool) -> bytes:
    f = frames(5, size=40)
    other = not big_endian
    return b"".join([
        shb(big_endian=big_endian),
        idb(LinkType.ETHERNET, tsresol=9, big_endian=big_endian),
        idb(LinkType.RAW, tsresol=0x80 | 24, tsoffset_s=-3, big_endian=big_endian),
        epb(1, 77 << 24, f[0], big_endian=big_endian),
        block(4, bytes(8), big_endian=big_endian),
        epb(0, 1_700_000_000_123_456_789, f[1], 100, big_endian=big_endian),
        shb(big_endian=other),
        idb(LinkType.LINUX_SLL, snaplen=30, big_endian=other),
        spb(f[2], big_endian=other),
        packet_block(0, 5, f[3], big_endian=other),
        epb(0, 6, f[4], big_endian=other),
    ])


#: Small valid captures: classic pcap in both byte orders and resolutions, and
#: two-section pcapng (EPB, SPB, PB, an NRB to skip) in both byte orders.
SAMPLES = {
    "pcap-us-le": pcap_file([(i, 999_999 - i, f, len(f) + i)
                             for i, f in enumerate(frames(6, size=30))], nanosecond=False),
    "pcap-ns-be": pcap_file([(1_700_000_000 + i, i * 3, f, len(f))
                             for i, f in enumerate(frames(6, size=30))], big_endian=True,
                            linktype=LinkType.LINUX_SLL2),
    "pcapng-le": _pcapng_sample(False),
    "pcapng-be": _pcapng_sample(True),
}


@dataclass(frozen=True)
class Outcome:
    """What a reader made of some bytes: the packets, the damage, or the open error."""

    packets: tuple[tuple[int, bytes, int, int, int], ...]  # ts_ns, frame, orig_len, lt, iface
    damage: str | None
    open_error: str | None


def read_streaming(data: bytes, *, strict: bool = False) -> Outcome:
    """Read ``data`` with ``open_capture`` (damage as warnings)."""
    try:
        reader = open_capture(io.BytesIO(data), strict=strict)
    except CaptureError as error:
        return Outcome((), None, str(error))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)
        packets = tuple((r.ts_ns, r.frame, r.orig_len, r.linktype, r.interface_id)
                        for r in reader)
    return Outcome(packets, None if reader.damage is None else str(reader.damage), None)


def read_scanner(data: bytes, *, native_scan: bool, chunk_sizes: Sequence[int] = (1 << 16,),
                 strict: bool = False) -> Outcome:
    """Read ``data`` with ``CaptureScanner.fill``, in chunks of the given sizes in turn."""
    try:
        scanner = CaptureScanner(data, strict=strict, native_scan=native_scan)
    except CaptureError as error:
        return Outcome((), None, str(error))
    packets = []
    with warnings.catch_warnings(), scanner:
        warnings.simplefilter("ignore", CaptureWarning)
        turn = 0
        while not scanner.done:
            out = ScanColumns.empty(chunk_sizes[turn % len(chunk_sizes)])
            turn += 1
            n = scanner.fill(out)
            for i in range(n):
                start = int(out.frame_offset[i])
                frame = bytes(data[start:start + int(out.caplen[i])])
                packets.append((int(out.ts_ns[i]), frame, int(out.orig_len[i]),
                                int(out.linktype[i]), int(out.interface_id[i])))
        return Outcome(tuple(packets), None if scanner.damage is None else str(scanner.damage),
                       None)
