"""Ethernet II and IEEE 802.1Q VLAN tags."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Self

from netio.errors import DecodeError, EncodeError
from netio.wire._fields import FieldSpec, check_mac, out_of_range


class EtherType(IntEnum):
    IPV4 = 0x0800
    ARP = 0x0806
    VLAN = 0x8100  # IEEE 802.1Q C-tag
    IPV6 = 0x86DD
    MAC_CONTROL = 0x8808  # IEEE 802.3 Annex 31B: PAUSE, PFC
    QINQ = 0x88A8  # IEEE 802.1ad S-tag
    LLDP = 0x88CC
    ROCE_V1 = 0x8915


#: EtherTypes announcing a 4-byte VLAN tag (802.1Q, 802.1ad and the old 0x9100 QinQ).
VLAN_ETHERTYPES: frozenset[int] = frozenset({0x8100, 0x88A8, 0x9100})

_ETHERTYPE_BY_VALUE: dict[int, EtherType] = {int(e): e for e in EtherType}


def ethertype_of(value: int) -> int:
    """``value`` as an EtherType member when it names one, else the plain int."""
    return _ETHERTYPE_BY_VALUE.get(value, value)


def format_mac(mac: bytes) -> str:
    """``b'\\x52\\x54..'`` -> ``"52:54:.."``."""
    return ":".join(f"{b:02x}" for b in mac)


def parse_mac(text: str) -> bytes:
    """``"52:54:00:77:00:0a"`` (also ``-`` separated) -> 6 bytes; EncodeError if malformed."""
    parts = text.replace("-", ":").split(":")
    if len(parts) != 6:
        raise EncodeError("MAC", f"{text!r} is not a MAC address")
    try:
        values = [int(p, 16) for p in parts]
    except ValueError:
        raise EncodeError("MAC", f"{text!r} is not a MAC address") from None
    if any(not 0 <= v <= 0xFF or len(p) > 2 or not p for v, p in zip(values, parts, strict=True)):
        raise EncodeError("MAC", f"{text!r} is not a MAC address")
    return bytes(values)


_ETH = struct.Struct(">6s6sH")


@dataclass(frozen=True, slots=True)
class Ethernet:
    """Ethernet II header (no FCS: captures and sockets do not carry it)."""

    dst_mac: bytes
    src_mac: bytes
    ethertype: int

    SIZE_BYTES: ClassVar[int] = 14

    def __post_init__(self) -> None:
        try:
            ok = (type(self.dst_mac) is bytes and len(self.dst_mac) == 6
                  and type(self.src_mac) is bytes and len(self.src_mac) == 6
                  and 0 <= self.ethertype <= 0xFFFF)
        except TypeError:
            ok = False
        if not ok:
            check_mac("Ethernet", "dst_mac", self.dst_mac)
            check_mac("Ethernet", "src_mac", self.src_mac)
            raise EncodeError("Ethernet", f"ethertype={self.ethertype!r} does not fit in 16 bits")

    def encode(self) -> bytes:
        return _ETH.pack(self.dst_mac, self.src_mac, self.ethertype)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 14:
            raise DecodeError("Ethernet", offset, f"need 14 bytes, have {len(buf) - offset}")
        dst, src, etype = _ETH.unpack_from(buf, offset)
        return cls(dst, src, _ETHERTYPE_BY_VALUE.get(etype, etype))


_VLAN = struct.Struct(">HH")
_VLAN_FIELDS: FieldSpec = (("pcp", 3), ("dei", 1), ("vid", 12), ("ethertype", 16))


@dataclass(frozen=True, slots=True)
class Vlan:
    """IEEE 802.1Q tag (TCI + the EtherType that follows it).

    ``pcp`` is the priority code point that PFC pauses per class.
    """

    pcp: int = 0
    dei: bool = False
    vid: int = 0
    ethertype: int = EtherType.IPV4

    SIZE_BYTES: ClassVar[int] = 4

    def __post_init__(self) -> None:
        try:
            ok = (0 <= self.pcp <= 7 and 0 <= self.dei <= 1 and 0 <= self.vid <= 0xFFF
                  and 0 <= self.ethertype <= 0xFFFF)
        except TypeError:
            ok = False
        if not ok:
            raise out_of_range("VLAN", self, _VLAN_FIELDS)

    def encode(self) -> bytes:
        return _VLAN.pack((self.pcp << 13) | (self.dei << 12) | self.vid, self.ethertype)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 4:
            raise DecodeError("VLAN", offset, f"need 4 bytes, have {len(buf) - offset}")
        tci, etype = _VLAN.unpack_from(buf, offset)
        return cls(tci >> 13, (tci & 0x1000) != 0, tci & 0xFFF,
                   _ETHERTYPE_BY_VALUE.get(etype, etype))
