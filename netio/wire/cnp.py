"""RoCEv2 Congestion Notification Packet (IBTA Annex A17.9.3).

A CNP is a BTH with opcode 0x81 (BECN set, PSN 0), 16 reserved bytes, and the
ICRC. The reaction point reduces the rate of the QP named by ``dest_qp``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self

from netio.errors import DecodeError
from netio.wire._fields import check_bytes
from netio.wire.bth import DEFAULT_PKEY, Bth, Opcode

CNP_OPCODE = Opcode.CNP
_ZERO16 = bytes(16)


@dataclass(frozen=True, slots=True)
class Cnp:
    """The 16 reserved bytes that follow a CNP's BTH (sent as zeros)."""

    reserved: bytes = _ZERO16

    SIZE_BYTES: ClassVar[int] = 16

    def __post_init__(self) -> None:
        check_bytes("CNP", "reserved", self.reserved, 16)

    def encode(self) -> bytes:
        return self.reserved

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 16:
            raise DecodeError("CNP", offset, f"need 16 bytes of padding, have "
                                             f"{len(buf) - offset}")
        raw = bytes(buf[offset:offset + 16])
        return cls(_ZERO16 if raw == _ZERO16 else raw)


def cnp_bth(dest_qp: int, *, pkey: int = DEFAULT_PKEY) -> Bth:
    """The BTH of a CNP notifying QP ``dest_qp`` (BECN set, PSN 0, Annex A17.9.3)."""
    return Bth(Opcode.CNP, pkey=pkey, becn=True, dest_qp=dest_qp)
