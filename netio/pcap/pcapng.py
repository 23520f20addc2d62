"""pcapng: sections, interfaces and packet blocks (streaming).

Implements draft-ietf-opsawg-pcapng: every block is ``type, total length,
body, total length``; a Section Header Block (§4.1) sets the byte order and
forgets the interfaces of the previous section; Interface Description Blocks
(§4.2) give each interface its link type, snap length and timestamp
resolution/offset (options ``if_tsresol`` §4.2 code 9 and ``if_tsoffset``
code 14); packets come in Enhanced (§4.3), Simple (§4.4) or the obsolete
Packet Block (appendix A). Other blocks are skipped.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Self

from netio.pcap.format import (
    BLOCK_MIN_BYTES,
    EPB_MIN_BYTES,
    MAX_BLOCK_BYTES,
    MAX_CAPLEN_BYTES,
    PB_MIN_BYTES,
    PCAPNG_BYTE_ORDER_MAGIC,
    PCAPNG_DEFAULT_TSRESOL,
    SPB_MIN_BYTES,
    TS_NS_MAX,
    TS_NS_MIN,
    UNKNOWN_BLOCK,
    BlockType,
    Damage,
    ScanStatus,
)
from netio.pcap.pcap import Source
from netio.pcap.record import Record

SHB_MIN_BYTES = 28
IDB_MIN_BYTES = 20
_OPT_ENDOFOPT = 0
_OPT_IF_TSRESOL = 9
_OPT_IF_TSOFFSET = 14

_SHB = BlockType.SECTION_HEADER
_IDB = BlockType.INTERFACE_DESCRIPTION
_EPB = BlockType.ENHANCED_PACKET
_PB = BlockType.PACKET
_SPB = BlockType.SIMPLE_PACKET


def is_pcapng_magic(head: bytes) -> bool:
    """True when a file starts with a Section Header Block (type is byte-order neutral)."""
    return head[:4] == _SHB.to_bytes(4, "little")


@dataclass(frozen=True, slots=True)
class SectionHeader:
    """A Section Header Block (§4.1). ``section_length_bytes`` is -1 when not given."""

    big_endian: bool
    version_major: int
    version_minor: int
    section_length_bytes: int

    @classmethod
    def decode(cls, block: bytes, big_endian: bool) -> Self:
        """Parse a whole SHB (as ``read_block`` returns it)."""
        if len(block) < SHB_MIN_BYTES:
            raise Damage.of(ScanStatus.BAD_BLOCK_LENGTH, block_type=_SHB, value=len(block),
                            limit=SHB_MIN_BYTES)
        major, minor, section_length = struct.unpack_from(
            ">HHq" if big_endian else "<HHq", block, 12)
        if major != 1:
            raise Damage(f"SHB has pcapng version {major}.{minor}; netio reads version 1.x")
        return cls(big_endian, major, minor, section_length)


@dataclass(frozen=True, slots=True)
class Interface:
    """An Interface Description Block (§4.2), as far as packet reading needs it.

    ``tsresol`` is the raw ``if_tsresol`` byte: bit 7 clear means 10^-n seconds
    per unit, set means 2^-n; ``tsoffset_s`` is ``if_tsoffset``, seconds added
    to every timestamp.
    """

    linktype: int
    snaplen: int
    tsresol: int = PCAPNG_DEFAULT_TSRESOL
    tsoffset_s: int = 0

    @classmethod
    def decode(cls, block: bytes, big_endian: bool) -> Self:
        """Parse a whole IDB (as ``read_block`` returns it)."""
        if len(block) < IDB_MIN_BYTES:
            raise Damage.of(ScanStatus.BAD_BLOCK_LENGTH, block_type=_IDB, value=len(block),
                            limit=IDB_MIN_BYTES)
        bo = ">" if big_endian else "<"
        linktype, _reserved, snaplen = struct.unpack_from(bo + "HHI", block, 8)
        tsresol = PCAPNG_DEFAULT_TSRESOL
        tsoffset_s = 0
        for code, value in _options(block, 16, len(block) - 4, big_endian, "IDB"):
            if code == _OPT_IF_TSRESOL:
                if len(value) != 1:
                    raise Damage(f"IDB if_tsresol option has length {len(value)}, must be 1")
                tsresol = value[0]
            elif code == _OPT_IF_TSOFFSET:
                if len(value) != 8:
                    raise Damage(f"IDB if_tsoffset option has length {len(value)}, must be 8")
                (tsoffset_s,) = struct.unpack(bo + "q", value)
        return cls(linktype, snaplen, tsresol, tsoffset_s)

    @property
    def ts_scale(self) -> tuple[int, int, int]:
        """``(mul, div, shift)`` with ``ns = ((units * mul) // div) >> shift`` exactly.

        The native scanner computes the same with 128-bit integers.
        """
        exponent = self.tsresol & 0x7F
        if self.tsresol & 0x80:
            return 1_000_000_000, 1, exponent
        if exponent <= 9:
            return 10 ** (9 - exponent), 1, 0
        if exponent - 9 <= 19:
            return 1, 10 ** (exponent - 9), 0
        return 0, 1, 0  # 10^-29 s units or finer: any 64-bit count is under 1 ns

    def ts_ns(self, units: int) -> int:
        """Nanoseconds since the epoch for a timestamp of ``units`` (floor)."""
        mul, div, shift = self.ts_scale
        return (((units * mul) // div) >> shift) + self.tsoffset_s * 1_000_000_000


def _options(block: bytes, start: int, end: int, big_endian: bool,
             name: str) -> Iterator[tuple[int, bytes]]:
    """``(code, value)`` for each option in ``block[start:end]`` (§3.5)."""
    head = struct.Struct(">HH" if big_endian else "<HH")
    pos = start
    while pos + 4 <= end:
        code, length = head.unpack_from(block, pos)
        if code == _OPT_ENDOFOPT:
            return
        value_end = pos + 4 + length
        if value_end > end:
            raise Damage(f"{name} option {code} of length {length} runs past the block")
        yield code, block[pos + 4:value_end]
        pos = value_end + (-length % 4)


def read_block(src: Source, big_endian: bool) -> tuple[int, bool, bytes] | None:
    """The next whole block as ``(block_type, big_endian, block)``; None at end of file.

    ``big_endian`` is the current section's byte order; a Section Header Block
    brings its own, which is returned. Raises ``Damage`` for a truncated header,
    an invalid total length (< 12, not a multiple of 4, > MAX_BLOCK_BYTES), a
    block running past the end of the file, or a trailing length that differs,
    in that order (as the native scanner).
    """
    head = src.read(8)
    if len(head) < 8:
        if not head:
            return None
        raise Damage.of(ScanStatus.TRUNCATED_HEADER, block_type=UNKNOWN_BLOCK,
                        value=len(head), limit=8)
    if head[:4] == b"\x0a\x0d\x0d\x0a":
        bom = src.read(4)
        if len(bom) < 4:
            raise Damage.of(ScanStatus.TRUNCATED_HEADER, block_type=_SHB,
                            value=8 + len(bom), limit=12)
        if bom == PCAPNG_BYTE_ORDER_MAGIC.to_bytes(4, "big"):
            big_endian = True
        elif bom == PCAPNG_BYTE_ORDER_MAGIC.to_bytes(4, "little"):
            big_endian = False
        else:
            raise Damage(f"SHB byte-order magic 0x{bom.hex()} is not 1a2b3c4d in either order")
        head += bom
    order: Literal["big", "little"] = "big" if big_endian else "little"
    block_type = int.from_bytes(head[:4], order)
    total = int.from_bytes(head[4:8], order)
    if total < BLOCK_MIN_BYTES or total % 4 or total > MAX_BLOCK_BYTES:
        raise Damage.of(ScanStatus.BAD_BLOCK_LENGTH, block_type=block_type, value=total,
                        limit=BLOCK_MIN_BYTES)
    rest = src.read(total - len(head))
    if len(head) + len(rest) < total:
        raise Damage.of(ScanStatus.TRUNCATED_DATA, block_type=block_type,
                        value=len(head) + len(rest), limit=total)
    trailer = int.from_bytes(rest[-4:], order)
    if trailer != total:
        raise Damage.of(ScanStatus.BLOCK_LENGTH_MISMATCH, block_type=block_type,
                        value=trailer, limit=total)
    return block_type, big_endian, head + rest


def decode_packet(block_type: int, block: bytes, big_endian: bool,
                  interfaces: list[Interface]) -> tuple[int, int, int, int, int] | None:
    """``(interface_id, ts_ns, orig_len, data_offset, caplen)`` of a packet block.

    None for a block that is no packet block. ``data_offset`` is the frame's
    offset in ``block``. Raises ``Damage`` (checks in the native scanner's order).
    """
    bo = ">" if big_endian else "<"
    length = len(block)
    if block_type in (_EPB, _PB):
        minimum = EPB_MIN_BYTES if block_type == _EPB else PB_MIN_BYTES
        if length < minimum:
            raise Damage.of(ScanStatus.BAD_BLOCK_LENGTH, block_type=block_type, value=length,
                            limit=minimum)
        if block_type == _EPB:
            iface, ts_hi, ts_lo, caplen, orig_len = struct.unpack_from(bo + "IIIII", block, 8)
        else:
            iface, _drops, ts_hi, ts_lo, caplen, orig_len = struct.unpack_from(
                bo + "HHIIII", block, 8)
        if iface >= len(interfaces):
            raise Damage.of(ScanStatus.UNKNOWN_INTERFACE, block_type=block_type, value=iface,
                            limit=len(interfaces))
        if caplen > MAX_CAPLEN_BYTES:
            raise Damage.of(ScanStatus.CAPLEN_TOO_BIG, block_type=block_type, value=caplen,
                            limit=MAX_CAPLEN_BYTES)
        if 28 + caplen + 4 > length:
            raise Damage.of(ScanStatus.CAPLEN_EXCEEDS_BLOCK, block_type=block_type,
                            value=caplen, limit=length)
        units = (ts_hi << 32) | ts_lo
        ts_ns = interfaces[iface].ts_ns(units)
        if not TS_NS_MIN <= ts_ns <= TS_NS_MAX:
            raise Damage.of(ScanStatus.TIMESTAMP_RANGE, block_type=block_type, value=units,
                            limit=0)
        return iface, ts_ns, orig_len, 28, caplen
    if block_type == _SPB:
        if length < SPB_MIN_BYTES:
            raise Damage.of(ScanStatus.BAD_BLOCK_LENGTH, block_type=block_type, value=length,
                            limit=SPB_MIN_BYTES)
        if not interfaces:
            raise Damage.of(ScanStatus.UNKNOWN_INTERFACE, block_type=block_type, value=0,
                            limit=0)
        (orig_len,) = struct.unpack_from(bo + "I", block, 8)
        caplen = min(orig_len, length - SPB_MIN_BYTES)
        snaplen = interfaces[0].snaplen
        if snaplen:
            caplen = min(caplen, snaplen)
        if caplen > MAX_CAPLEN_BYTES:
            raise Damage.of(ScanStatus.CAPLEN_TOO_BIG, block_type=block_type, value=caplen,
                            limit=MAX_CAPLEN_BYTES)
        return 0, 0, orig_len, 12, caplen
    return None


class Walker:
    """Walks a pcapng file block by block, keeping the section's byte order and interfaces."""

    __slots__ = ("big_endian", "interfaces", "section")

    def __init__(self) -> None:
        self.big_endian = False
        self.interfaces: list[Interface] = []
        self.section: SectionHeader | None = None

    def control_block(self, block_type: int, block: bytes, big_endian: bool) -> bool:
        """Take an SHB or IDB into the state; False for any other block."""
        if block_type == _SHB:
            self.section = SectionHeader.decode(block, big_endian)
            self.big_endian = big_endian
            self.interfaces = []
            return True
        if block_type == _IDB:
            self.interfaces.append(Interface.decode(block, self.big_endian))
            return True
        return False


def iter_records(src: Source, *, path: str | None) -> Iterator[Record]:
    """Yield the packets of a pcapng file from its first block on; CaptureError at damage.

    A damaged block's ``record_index`` is the index the next packet would have.
    """
    walker = Walker()
    index = 0
    while True:
        offset = src.offset
        try:
            got = read_block(src, walker.big_endian)
            if got is None:
                return
            block_type, big_endian, block = got
            if walker.control_block(block_type, block, big_endian):
                continue
            packet = decode_packet(block_type, block, walker.big_endian, walker.interfaces)
        except Damage as damage:
            raise damage.at(path=path, record_index=index, byte_offset=offset) from None
        if packet is None:
            continue
        iface, ts_ns, orig_len, start, caplen = packet
        yield Record(ts_ns, walker.interfaces[iface].linktype, block[start:start + caplen],
                     orig_len, iface, index, offset)
        index += 1
