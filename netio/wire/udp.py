"""UDP header (RFC 768); RoCEv2 runs over UDP destination port 4791 (IBTA Annex A17.2)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Self

from netio.errors import DecodeError
from netio.wire._fields import FieldSpec, out_of_range

#: IANA-assigned RoCEv2 destination port.
ROCEV2_UDP_PORT = 4791

_UDP = struct.Struct(">HHHH")
_UDP_FIELDS: FieldSpec = (("src_port", 16), ("dst_port", 16), ("length", 16), ("checksum", 16))


@dataclass(frozen=True, slots=True)
class Udp:
    """UDP header. ``length`` covers header + payload; RoCEv2 sends checksum 0."""

    src_port: int
    dst_port: int = ROCEV2_UDP_PORT
    length: int = 8
    checksum: int = 0

    SIZE_BYTES: ClassVar[int] = 8

    def __post_init__(self) -> None:
        try:
            ok = (0 <= self.src_port <= 0xFFFF and 0 <= self.dst_port <= 0xFFFF
                  and 0 <= self.length <= 0xFFFF and 0 <= self.checksum <= 0xFFFF)
        except TypeError:
            ok = False
        if not ok:
            raise out_of_range("UDP", self, _UDP_FIELDS)

    @property
    def payload_bytes(self) -> int:
        return self.length - 8

    def encode(self) -> bytes:
        return _UDP.pack(self.src_port, self.dst_port, self.length, self.checksum)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 8:
            raise DecodeError("UDP", offset, f"need 8 bytes, have {len(buf) - offset}")
        src, dst, length, csum = _UDP.unpack_from(buf, offset)
        if length < 8:
            raise DecodeError("UDP", offset, f"length {length} is below the 8-byte header")
        return cls(src, dst, length, csum)
