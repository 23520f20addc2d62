"""On-disk constants of pcap and pcapng, netio's limits, and the damage vocabulary.

The streaming readers, the pure-Python reference scanner and the native
scanner (``native/pcapscan.c``) all stop on damage with one of the
``ScanStatus`` codes below; ``Damage`` turns a status into the words of the
``CaptureError``, so the three report the same damage in the same way.

References: classic pcap and pcapng as in draft-ietf-opsawg-pcap and
draft-ietf-opsawg-pcapng (the formats libpcap and Wireshark write).
"""

from __future__ import annotations

from enum import IntEnum

from netio.errors import CaptureError

#: Largest captured length of one packet netio accepts (libpcap's MAXIMUM_SNAPLEN,
#: 256 KiB). A larger caplen is treated as damage, not as a huge packet: it is
#: what a corrupted length field usually looks like.
MAX_CAPLEN_BYTES = 262_144

#: Largest pcapng block netio accepts (16 MiB): packet blocks are far smaller,
#: the limit only leaves room for large name-resolution or custom blocks while
#: keeping the streaming reader's memory bounded.
MAX_BLOCK_BYTES = 16 * 1024 * 1024

#: Smallest ``ts_ns`` and largest: timestamps are int64 nanoseconds (years 1677..2262).
TS_NS_MIN = -(1 << 63)
TS_NS_MAX = (1 << 63) - 1

# Classic pcap magic numbers as read in the file's own byte order.
PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
PCAP_HEADER_BYTES = 24
PCAP_RECORD_HEADER_BYTES = 16

# pcapng (draft-ietf-opsawg-pcapng §4.1: SHB byte-order magic).
PCAPNG_BYTE_ORDER_MAGIC = 0x1A2B3C4D
#: Default interface timestamp resolution (if_tsresol absent): microseconds.
PCAPNG_DEFAULT_TSRESOL = 6


class BlockType(IntEnum):
    """pcapng block types (draft-ietf-opsawg-pcapng §10.1) that netio interprets."""

    SECTION_HEADER = 0x0A0D0D0A
    INTERFACE_DESCRIPTION = 0x00000001
    PACKET = 0x00000002  # obsolete Packet Block (appendix A)
    SIMPLE_PACKET = 0x00000003
    NAME_RESOLUTION = 0x00000004
    INTERFACE_STATISTICS = 0x00000005
    ENHANCED_PACKET = 0x00000006
    DECRYPTION_SECRETS = 0x0000000A


#: Short names used in messages.
BLOCK_NAMES: dict[int, str] = {
    BlockType.SECTION_HEADER: "SHB",
    BlockType.INTERFACE_DESCRIPTION: "IDB",
    BlockType.PACKET: "PB",
    BlockType.SIMPLE_PACKET: "SPB",
    BlockType.NAME_RESOLUTION: "NRB",
    BlockType.INTERFACE_STATISTICS: "ISB",
    BlockType.ENHANCED_PACKET: "EPB",
    BlockType.DECRYPTION_SECRETS: "DSB",
}

#: Minimum total length of each packet block (header, fixed fields, trailer).
EPB_MIN_BYTES = 32
PB_MIN_BYTES = 32
SPB_MIN_BYTES = 16
BLOCK_MIN_BYTES = 12


class CaptureFormat(IntEnum):
    """Container format of a capture file (values as in the native scanner)."""

    PCAP = 1
    PCAPNG = 2


class ScanStatus(IntEnum):
    """Why a scan or read stopped; mirrors ``enum netio_scan_status`` in C."""

    FULL = 0  # the output arrays are full; resume at the returned offset
    END = 1  # clean end of the data
    BLOCK = 2  # a pcapng SHB or IDB at the offset, parsed by the Python caller
    TRUNCATED_HEADER = 3  # too few bytes left for a record or block header
    TRUNCATED_DATA = 4  # the record or block runs past the end of the file
    CAPLEN_TOO_BIG = 5  # captured length above MAX_CAPLEN_BYTES
    BAD_BLOCK_LENGTH = 6  # pcapng block length too small, unaligned, or too big
    BLOCK_LENGTH_MISMATCH = 7  # pcapng trailing block length differs from the leading one
    UNKNOWN_INTERFACE = 8  # packet names an interface the section did not describe
    TIMESTAMP_RANGE = 9  # timestamp outside int64 nanoseconds
    CAPLEN_EXCEEDS_BLOCK = 10  # packet data does not fit in its pcapng block


#: ``block_type`` for damage in a pcapng block whose type could not be read.
UNKNOWN_BLOCK = -1


def block_name(block_type: int) -> str:
    if block_type == UNKNOWN_BLOCK:
        return "block"
    name = BLOCK_NAMES.get(block_type)
    return name if name is not None else f"block type 0x{block_type:08x}"


def damage_reason(status: ScanStatus, *, block_type: int | None, value: int, limit: int) -> str:
    """Human words for a damage status; ``value``/``limit`` are the offending numbers."""
    what = "record" if block_type is None else block_name(block_type)
    if status is ScanStatus.TRUNCATED_HEADER:
        return f"truncated {what} header: {value} bytes left, {limit} needed"
    if status is ScanStatus.TRUNCATED_DATA:
        return f"{what} runs past the end of the file: {limit} bytes needed, {value} left"
    if status is ScanStatus.CAPLEN_TOO_BIG:
        return f"{what} captured length {value} exceeds the limit of {limit} bytes"
    if status is ScanStatus.BAD_BLOCK_LENGTH:
        return (f"{what} total length {value} is invalid (must be a multiple of 4, "
                f"at least {limit} and at most {MAX_BLOCK_BYTES})")
    if status is ScanStatus.BLOCK_LENGTH_MISMATCH:
        return f"{what} trailing length {value} differs from its leading length {limit}"
    if status is ScanStatus.UNKNOWN_INTERFACE:
        return f"{what} names interface {value} but the section describes {limit}"
    if status is ScanStatus.TIMESTAMP_RANGE:
        return (f"{what} timestamp {value} (in interface time units) is outside the int64 "
                f"nanosecond range")
    if status is ScanStatus.CAPLEN_EXCEEDS_BLOCK:
        return f"{what} captured length {value} does not fit its block of {limit} bytes"
    raise ValueError(f"{status!r} is not a damage status")


class Damage(Exception):
    """Damage found by a record or block decoder; the reader adds where (``at``).

    ``status`` is the ScanStatus for the damage the native scanner also
    detects, None for damage only the Python SHB/IDB parsers see.
    """

    def __init__(self, reason: str, status: ScanStatus | None = None, *,
                 block_type: int | None = None, value: int = 0, limit: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.block_type = block_type
        self.value = value
        self.limit = limit

    @classmethod
    def of(cls, status: ScanStatus, *, block_type: int | None, value: int, limit: int) -> Damage:
        reason = damage_reason(status, block_type=block_type, value=value, limit=limit)
        return cls(reason, status, block_type=block_type, value=value, limit=limit)

    def at(self, *, path: str | None, record_index: int, byte_offset: int) -> CaptureError:
        return CaptureError(self.reason, path=path, record_index=record_index,
                            byte_offset=byte_offset)


#: Link types netio decodes (LINKTYPE_* values, https://www.tcpdump.org/linktypes.html):
#: Ethernet, raw IP (101, and IPv4/IPv6 228/229), Linux cooked v1 (113) and v2 (276).
SUPPORTED_LINKTYPES: frozenset[int] = frozenset({1, 101, 113, 228, 229, 276})

#: Names of link types netio does not read, as tcpdump's list calls them.
_UNSUPPORTED_NAMES: dict[int, str] = {
    0: "NULL, BSD loopback", 9: "PPP", 105: "IEEE 802.11", 108: "OpenBSD loopback",
    127: "IEEE 802.11 radiotap", 197: "ERF", 239: "NFLOG", 247: "InfiniBand",
    249: "USBPcap",
}


def unsupported_linktype(linktype: int) -> str:
    """The one sentence that says a link type cannot be read, and what can."""
    name = _UNSUPPORTED_NAMES.get(linktype)
    what = f"link type {linktype}" + (f" ({name})" if name else "")
    return (f"{what} is not supported; netio reads Ethernet, Linux cooked v1/v2 and "
            "raw IP")
