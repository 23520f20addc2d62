"""Capture link types and the Linux "cooked" link-layer headers.

A capture record is (link type, frame); :func:`netio.wire.packet.decode_frame`
uses the link type to find the network layer. Link-type numbers are the
tcpdump.org LINKTYPE_* registry values.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Self

from netio.errors import DecodeError
from netio.wire._fields import FieldSpec, check_bytes, out_of_range


class LinkType(IntEnum):
    """LINKTYPE_* values (https://www.tcpdump.org/linktypes.html)."""

    ETHERNET = 1
    RAW = 101  # raw IP, version taken from the first nibble
    LINUX_SLL = 113  # Linux cooked capture v1
    IPV4 = 228
    IPV6 = 229
    LINUX_SLL2 = 276  # Linux cooked capture v2


class SllPacketType(IntEnum):
    """Direction/class of a cooked-capture packet (Linux ``PACKET_*``)."""

    HOST = 0
    BROADCAST = 1
    MULTICAST = 2
    OTHERHOST = 3
    OUTGOING = 4


_SLL = struct.Struct(">HHH8sH")
_SLL_FIELDS: FieldSpec = (("packet_type", 16), ("arphrd_type", 16), ("addr_len", 16),
                          ("protocol", 16))


@dataclass(frozen=True, slots=True)
class Sll:
    """Linux cooked capture v1 header (16 bytes); ``protocol`` is an EtherType."""

    packet_type: int
    arphrd_type: int
    addr_len: int
    addr: bytes  # 8 bytes, the first addr_len of them meaningful
    protocol: int

    SIZE_BYTES: ClassVar[int] = 16

    def __post_init__(self) -> None:
        try:
            ok = (0 <= self.packet_type <= 0xFFFF and 0 <= self.arphrd_type <= 0xFFFF
                  and 0 <= self.addr_len <= 0xFFFF and 0 <= self.protocol <= 0xFFFF)
        except TypeError:
            ok = False
        if not ok:
            raise out_of_range("SLL", self, _SLL_FIELDS)
        check_bytes("SLL", "addr", self.addr, 8)

    @property
    def link_address(self) -> bytes:
        """The meaningful part of ``addr`` (the MAC for Ethernet)."""
        return self.addr[: min(self.addr_len, 8)]

    def encode(self) -> bytes:
        return _SLL.pack(self.packet_type, self.arphrd_type, self.addr_len, self.addr,
                         self.protocol)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 16:
            raise DecodeError("SLL", offset, f"need 16 bytes, have {len(buf) - offset}")
        return cls(*_SLL.unpack_from(buf, offset))


_SLL2 = struct.Struct(">HHIHBB8s")
_SLL2_FIELDS: FieldSpec = (("protocol", 16), ("interface_index", 32), ("arphrd_type", 16),
                           ("packet_type", 8), ("addr_len", 8))


@dataclass(frozen=True, slots=True)
class Sll2:
    """Linux cooked capture v2 header (20 bytes); ``protocol`` is an EtherType."""

    protocol: int
    interface_index: int
    arphrd_type: int
    packet_type: int
    addr_len: int
    addr: bytes  # 8 bytes

    SIZE_BYTES: ClassVar[int] = 20

    def __post_init__(self) -> None:
        try:
            ok = (0 <= self.protocol <= 0xFFFF and 0 <= self.interface_index <= 0xFFFFFFFF
                  and 0 <= self.arphrd_type <= 0xFFFF and 0 <= self.packet_type <= 0xFF
                  and 0 <= self.addr_len <= 0xFF)
        except TypeError:
            ok = False
        if not ok:
            raise out_of_range("SLL2", self, _SLL2_FIELDS)
        check_bytes("SLL2", "addr", self.addr, 8)

    @property
    def link_address(self) -> bytes:
        return self.addr[: min(self.addr_len, 8)]

    def encode(self) -> bytes:
        return _SLL2.pack(self.protocol, 0, self.interface_index, self.arphrd_type,
                          self.packet_type, self.addr_len, self.addr)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 20:
            raise DecodeError("SLL2", offset, f"need 20 bytes, have {len(buf) - offset}")
        protocol, _reserved, ifindex, arphrd, ptype, alen, addr = _SLL2.unpack_from(buf, offset)
        return cls(protocol, ifindex, arphrd, ptype, alen, addr)
