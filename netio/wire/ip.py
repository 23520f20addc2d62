"""IPv4 (RFC 791) and IPv6 (RFC 8200) headers, with DSCP and ECN (RFC 2474, RFC 3168)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from ipaddress import IPv4Address, IPv6Address
from typing import ClassVar, Self

from netio.errors import DecodeError, EncodeError
from netio.wire._fields import FieldSpec, out_of_range


class Ecn(IntEnum):
    """The two ECN bits of the IPv4 TOS / IPv6 traffic-class byte (RFC 3168)."""

    NOT_ECT = 0
    ECT1 = 1
    ECT0 = 2
    CE = 3


class IpProto(IntEnum):
    HOPOPT = 0
    ICMP = 1
    IGMP = 2
    TCP = 6
    UDP = 17
    IPV6_ROUTE = 43
    IPV6_FRAG = 44
    GRE = 47
    ICMPV6 = 58
    IPV6_NONXT = 59
    IPV6_OPTS = 60


_ECN: tuple[Ecn, ...] = tuple(Ecn(i) for i in range(4))
_PROTO_BY_VALUE: dict[int, IpProto] = {int(p): p for p in IpProto}

# Decoded captures repeat a handful of addresses: cache the address objects
# (ipaddress construction costs far more than a dict lookup).
_ADDR_CACHE_MAX = 4096
_v4_cache: dict[bytes, IPv4Address] = {}
_v6_cache: dict[bytes, IPv6Address] = {}


def _v4(raw: bytes) -> IPv4Address:
    addr = _v4_cache.get(raw)
    if addr is None:
        addr = IPv4Address(raw)
        if len(_v4_cache) < _ADDR_CACHE_MAX:
            _v4_cache[raw] = addr
    return addr


def _v6(raw: bytes) -> IPv6Address:
    addr = _v6_cache.get(raw)
    if addr is None:
        addr = IPv6Address(raw)
        if len(_v6_cache) < _ADDR_CACHE_MAX:
            _v6_cache[raw] = addr
    return addr


def internet_checksum(data: bytes | bytearray | memoryview) -> int:
    """RFC 1071 one's-complement checksum of ``data`` (odd length padded with a zero byte)."""
    if len(data) & 1:
        data = bytes(data) + b"\x00"
    total: int = sum(struct.unpack(f">{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


_IPV4 = struct.Struct(">BBHHHBBH4s4s")
_IPV4_FIELDS: FieldSpec = (
    ("protocol", 8), ("dscp", 6), ("ecn", 2), ("total_length", 16), ("identification", 16),
    ("ttl", 8), ("fragment_offset", 13),
)


@dataclass(frozen=True, slots=True)
class Ipv4:
    """IPv4 header. ``checksum=None`` means "compute it in encode()".

    ``total_length`` covers header + payload (the builders in netio.wire.packet
    fill it in); ``fragment_offset`` is in 8-byte units as on the wire.
    """

    src_ip: IPv4Address
    dst_ip: IPv4Address
    protocol: int
    dscp: int = 0
    ecn: Ecn = Ecn.NOT_ECT
    total_length: int = 20
    identification: int = 0
    dont_fragment: bool = True
    ttl: int = 64
    checksum: int | None = None
    more_fragments: bool = False
    fragment_offset: int = 0
    options: bytes = b""

    SIZE_BYTES: ClassVar[int] = 20  # without options

    def __post_init__(self) -> None:
        try:
            ok = (0 <= self.protocol <= 0xFF and 0 <= self.dscp <= 63 and 0 <= self.ecn <= 3
                  and 0 <= self.total_length <= 0xFFFF and 0 <= self.identification <= 0xFFFF
                  and 0 <= self.ttl <= 0xFF and 0 <= self.fragment_offset <= 0x1FFF
                  and type(self.src_ip) is IPv4Address and type(self.dst_ip) is IPv4Address
                  and (self.checksum is None or 0 <= self.checksum <= 0xFFFF)
                  and not self.options)
        except TypeError:
            ok = False
        if not ok:
            self._check_slow()

    def _check_slow(self) -> None:
        try:
            ok = (0 <= self.protocol <= 0xFF and 0 <= self.dscp <= 63 and 0 <= self.ecn <= 3
                  and 0 <= self.total_length <= 0xFFFF and 0 <= self.identification <= 0xFFFF
                  and 0 <= self.ttl <= 0xFF and 0 <= self.fragment_offset <= 0x1FFF)
        except TypeError:
            ok = False
        if not ok:
            raise out_of_range("IPv4", self, _IPV4_FIELDS)
        if self.checksum is not None and not (isinstance(self.checksum, int)
                                              and 0 <= self.checksum <= 0xFFFF):
            raise EncodeError("IPv4", f"checksum={self.checksum!r} does not fit in 16 bits")
        if not isinstance(self.src_ip, IPv4Address) or not isinstance(self.dst_ip, IPv4Address):
            raise EncodeError("IPv4", "src_ip and dst_ip must be IPv4Address")
        if not isinstance(self.options, bytes) or len(self.options) % 4 or len(self.options) > 40:
            raise EncodeError("IPv4", f"options must be a multiple of 4 bytes up to 40, "
                                      f"got {len(self.options)}")

    @property
    def header_bytes(self) -> int:
        return 20 + len(self.options)

    @property
    def payload_bytes(self) -> int:
        return self.total_length - self.header_bytes

    @property
    def is_fragment(self) -> bool:
        return self.more_fragments or self.fragment_offset != 0

    def _pack(self, checksum: int) -> bytes:
        ihl = 5 + len(self.options) // 4
        flags_frag = (self.dont_fragment << 14) | (self.more_fragments << 13) | self.fragment_offset
        return _IPV4.pack(0x40 | ihl, (self.dscp << 2) | self.ecn, self.total_length,
                          self.identification, flags_frag, self.ttl, self.protocol, checksum,
                          self.src_ip.packed, self.dst_ip.packed) + self.options

    def compute_checksum(self) -> int:
        """The header checksum these fields should carry."""
        return internet_checksum(self._pack(0))

    def checksum_ok(self) -> bool:
        return self.checksum is None or self.checksum == self.compute_checksum()

    def encode(self) -> bytes:
        if self.checksum is not None:
            return self._pack(self.checksum)
        header = bytearray(self._pack(0))
        struct.pack_into(">H", header, 10, internet_checksum(header))
        return bytes(header)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        avail = len(buf) - offset
        if avail < 20:
            raise DecodeError("IPv4", offset, f"need 20 bytes, have {avail}")
        (vihl, tos, total, ident, flags_frag, ttl, proto, csum, src, dst) = \
            _IPV4.unpack_from(buf, offset)
        if vihl >> 4 != 4:
            raise DecodeError("IPv4", offset, f"version {vihl >> 4}, expected 4")
        hlen = (vihl & 0xF) * 4
        if hlen < 20:
            raise DecodeError("IPv4", offset, f"header length {hlen} is below 20")
        if avail < hlen:
            raise DecodeError("IPv4", offset, f"header length {hlen} exceeds the {avail} bytes")
        if total < hlen:
            raise DecodeError("IPv4", offset, f"total length {total} is below the header "
                                              f"length {hlen}")
        options = bytes(buf[offset + 20: offset + hlen]) if hlen > 20 else b""
        return cls(_v4(src), _v4(dst), _PROTO_BY_VALUE.get(proto, proto), tos >> 2,
                   _ECN[tos & 3], total, ident, (flags_frag & 0x4000) != 0, ttl, csum,
                   (flags_frag & 0x2000) != 0, flags_frag & 0x1FFF, options)


_IPV6 = struct.Struct(">IHBB16s16s")
_IPV6_FIELDS: FieldSpec = (
    ("next_header", 8), ("dscp", 6), ("ecn", 2), ("flow_label", 20), ("payload_length", 16),
    ("hop_limit", 8),
)


@dataclass(frozen=True, slots=True)
class Ipv6:
    """IPv6 fixed header (40 bytes). Extension headers are not decoded."""

    src_ip: IPv6Address
    dst_ip: IPv6Address
    next_header: int
    dscp: int = 0
    ecn: Ecn = Ecn.NOT_ECT
    flow_label: int = 0
    payload_length: int = 0
    hop_limit: int = 64

    SIZE_BYTES: ClassVar[int] = 40

    def __post_init__(self) -> None:
        try:
            ok = (0 <= self.next_header <= 0xFF and 0 <= self.dscp <= 63 and 0 <= self.ecn <= 3
                  and 0 <= self.flow_label <= 0xFFFFF and 0 <= self.payload_length <= 0xFFFF
                  and 0 <= self.hop_limit <= 0xFF)
        except TypeError:
            ok = False
        if not ok:
            raise out_of_range("IPv6", self, _IPV6_FIELDS)
        if not isinstance(self.src_ip, IPv6Address) or not isinstance(self.dst_ip, IPv6Address):
            raise EncodeError("IPv6", "src_ip and dst_ip must be IPv6Address")

    @property
    def header_bytes(self) -> int:
        return 40

    def encode(self) -> bytes:
        word = (6 << 28) | (self.dscp << 22) | (self.ecn << 20) | self.flow_label
        return _IPV6.pack(word, self.payload_length, self.next_header, self.hop_limit,
                          self.src_ip.packed, self.dst_ip.packed)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        avail = len(buf) - offset
        if avail < 40:
            raise DecodeError("IPv6", offset, f"need 40 bytes, have {avail}")
        word, plen, nxt, hlim, src, dst = _IPV6.unpack_from(buf, offset)
        if word >> 28 != 6:
            raise DecodeError("IPv6", offset, f"version {word >> 28}, expected 6")
        return cls(_v6(src), _v6(dst), _PROTO_BY_VALUE.get(nxt, nxt), (word >> 22) & 0x3F,
                   _ECN[(word >> 20) & 3], word & 0xFFFFF, plen, hlim)
