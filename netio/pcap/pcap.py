"""Classic pcap: the file header and the packet records (streaming).

Layout (draft-ietf-opsawg-pcap §4, §5): a 24-byte file header whose magic
number gives the byte order and the timestamp unit (µs or ns), then records
of a 16-byte header (seconds, fraction, captured length, original length)
followed by the captured bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Protocol, Self

from netio.errors import CaptureError
from netio.pcap.format import (
    MAX_CAPLEN_BYTES,
    PCAP_HEADER_BYTES,
    PCAP_MAGIC_NS,
    PCAP_MAGIC_US,
    PCAP_RECORD_HEADER_BYTES,
    Damage,
    ScanStatus,
)
from netio.pcap.record import Record

_MAGICS: dict[bytes, tuple[bool, bool]] = {
    # file bytes -> (big_endian, nanosecond)
    PCAP_MAGIC_US.to_bytes(4, "little"): (False, False),
    PCAP_MAGIC_NS.to_bytes(4, "little"): (False, True),
    PCAP_MAGIC_US.to_bytes(4, "big"): (True, False),
    PCAP_MAGIC_NS.to_bytes(4, "big"): (True, True),
}

_RECORD_LE = struct.Struct("<IIII")
_RECORD_BE = struct.Struct(">IIII")


class Source(Protocol):
    """What the record readers need from a byte source (``ByteSource``, ``MemorySource``)."""

    @property
    def offset(self) -> int: ...

    def read(self, n: int) -> bytes: ...


def is_pcap_magic(head: bytes) -> bool:
    """True when the first four bytes of a file are a classic pcap magic number."""
    return head[:4] in _MAGICS


@dataclass(frozen=True, slots=True)
class PcapHeader:
    """The classic pcap file header (§4). ``linktype`` is the low 16 bits of the
    LinkType field; ``fcs_bytes`` is the FCS length its upper bits announce (or None)."""

    big_endian: bool
    nanosecond: bool
    snaplen: int
    linktype: int
    version_major: int = 2
    version_minor: int = 4
    fcs_bytes: int | None = None

    SIZE_BYTES: ClassVar[int] = PCAP_HEADER_BYTES

    @classmethod
    def decode(cls, head: bytes, *, path: str | None = None) -> Self:
        """Parse the first 24 bytes of a file; CaptureError if they are not a pcap header."""
        flags = _MAGICS.get(bytes(head[:4]))
        if flags is None:
            raise CaptureError(
                f"not a pcap file: bad magic number 0x{bytes(head[:4]).hex()}",
                path=path, record_index=0, byte_offset=0)
        if len(head) < PCAP_HEADER_BYTES:
            raise CaptureError(
                f"truncated pcap file header: {len(head)} bytes, {PCAP_HEADER_BYTES} needed",
                path=path, record_index=0, byte_offset=0)
        big_endian, nanosecond = flags
        fmt = ">HHiIII" if big_endian else "<HHiIII"
        major, minor, _thiszone, _sigfigs, snaplen, link_field = struct.unpack_from(fmt, head, 4)
        fcs_bytes = (link_field >> 28) * 2 if link_field & (1 << 26) else None
        return cls(big_endian=big_endian, nanosecond=nanosecond, snaplen=snaplen,
                   linktype=link_field & 0xFFFF, version_major=major, version_minor=minor,
                   fcs_bytes=fcs_bytes)

    def encode(self) -> bytes:
        magic = PCAP_MAGIC_NS if self.nanosecond else PCAP_MAGIC_US
        link_field = self.linktype
        if self.fcs_bytes is not None:
            link_field |= (1 << 26) | ((self.fcs_bytes // 2) << 28)
        return struct.pack(">IHHiIII" if self.big_endian else "<IHHiIII", magic,
                           self.version_major, self.version_minor, 0, 0, self.snaplen,
                           link_field)

    @property
    def record_struct(self) -> struct.Struct:
        return record_struct(self.big_endian)

    @property
    def ts_unit_ns(self) -> int:
        """Nanoseconds per unit of the records' fractional-second field."""
        return 1 if self.nanosecond else 1000


def record_struct(big_endian: bool) -> struct.Struct:
    """The record header layout (ts_s, ts_frac, caplen, orig_len) in a byte order."""
    return _RECORD_BE if big_endian else _RECORD_LE


def read_record(src: Source, record: struct.Struct,
                ts_unit_ns: int) -> tuple[int, int, bytes] | None:
    """The next record as ``(ts_ns, orig_len, frame)``; None at a clean end of file.

    Raises ``Damage`` for a truncated header, an absurd captured length
    (> MAX_CAPLEN_BYTES), or data that runs past the end of the file, checked in
    that order (the native scanner checks in the same order).
    """
    head = src.read(PCAP_RECORD_HEADER_BYTES)
    if len(head) < PCAP_RECORD_HEADER_BYTES:
        if not head:
            return None
        raise Damage.of(ScanStatus.TRUNCATED_HEADER, block_type=None, value=len(head),
                     limit=PCAP_RECORD_HEADER_BYTES)
    ts_s, ts_frac, caplen, orig_len = record.unpack(head)
    if caplen > MAX_CAPLEN_BYTES:
        raise Damage.of(ScanStatus.CAPLEN_TOO_BIG, block_type=None, value=caplen,
                     limit=MAX_CAPLEN_BYTES)
    frame = src.read(caplen)
    if len(frame) < caplen:
        raise Damage.of(ScanStatus.TRUNCATED_DATA, block_type=None,
                     value=PCAP_RECORD_HEADER_BYTES + len(frame),
                     limit=PCAP_RECORD_HEADER_BYTES + caplen)
    return ts_s * 1_000_000_000 + ts_frac * ts_unit_ns, orig_len, frame


def iter_records(src: Source, header: PcapHeader, *, path: str | None) -> Iterator[Record]:
    """Yield the records after the file header; CaptureError at the first damage."""
    record = header.record_struct
    unit = header.ts_unit_ns
    linktype = header.linktype
    index = 0
    while True:
        offset = src.offset
        try:
            got = read_record(src, record, unit)
        except Damage as damage:
            raise damage.at(path=path, record_index=index, byte_offset=offset) from None
        if got is None:
            return
        ts_ns, orig_len, frame = got
        yield Record(ts_ns, linktype, frame, orig_len, 0, index, offset)
        index += 1
