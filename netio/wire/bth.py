"""InfiniBand Base Transport Header and the opcode table (IBTA vol 1 §9.2, Table 38).

RoCEv2 (IBTA Annex A17) carries the BTH right after the UDP header. The
opcode's top three bits name the transport service, the low five the
operation; :func:`opcode_info` says which extension headers follow the BTH
and in which order (IBTA §9.2 Table 39 / Linux ``rxe_opcode.c``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Self

from netio.errors import DecodeError, EncodeError
from netio.wire._fields import FieldSpec, out_of_range


class Transport(IntEnum):
    """Transport service: the opcode's top three bits."""

    RC = 0
    UC = 1
    RD = 2
    UD = 3
    CNP = 4  # RoCEv2 congestion notification (Annex A17.9.3)


class Opcode(IntEnum):
    """Every RC, UC and UD opcode, plus the RoCEv2 CNP."""

    RC_SEND_FIRST = 0x00
    RC_SEND_MIDDLE = 0x01
    RC_SEND_LAST = 0x02
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03
    RC_SEND_ONLY = 0x04
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05
    RC_RDMA_WRITE_FIRST = 0x06
    RC_RDMA_WRITE_MIDDLE = 0x07
    RC_RDMA_WRITE_LAST = 0x08
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09
    RC_RDMA_WRITE_ONLY = 0x0A
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B
    RC_RDMA_READ_REQUEST = 0x0C
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E
    RC_RDMA_READ_RESPONSE_LAST = 0x0F
    RC_RDMA_READ_RESPONSE_ONLY = 0x10
    RC_ACKNOWLEDGE = 0x11
    RC_ATOMIC_ACKNOWLEDGE = 0x12
    RC_COMPARE_SWAP = 0x13
    RC_FETCH_ADD = 0x14
    RC_SEND_LAST_WITH_INVALIDATE = 0x16
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17
    RC_FLUSH = 0x1C  # IBTA 1.5 (memory placement extensions)
    RC_ATOMIC_WRITE = 0x1D  # IBTA 1.5
    UC_SEND_FIRST = 0x20
    UC_SEND_MIDDLE = 0x21
    UC_SEND_LAST = 0x22
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23
    UC_SEND_ONLY = 0x24
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25
    UC_RDMA_WRITE_FIRST = 0x26
    UC_RDMA_WRITE_MIDDLE = 0x27
    UC_RDMA_WRITE_LAST = 0x28
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29
    UC_RDMA_WRITE_ONLY = 0x2A
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B
    UD_SEND_ONLY = 0x64
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65
    CNP = 0x81


class Operation(IntEnum):
    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ_REQUEST = 2
    RDMA_READ_RESPONSE = 3
    ACKNOWLEDGE = 4
    ATOMIC_ACKNOWLEDGE = 5
    COMPARE_SWAP = 6
    FETCH_ADD = 7
    FLUSH = 8
    ATOMIC_WRITE = 9
    CNP = 10


class Position(IntEnum):
    """Where a packet sits in its message (single-packet operations are ONLY)."""

    ONLY = 0
    FIRST = 1
    MIDDLE = 2
    LAST = 3


class ExtHeader(IntEnum):
    """Extension headers that can follow the BTH (IBTA §9.3)."""

    RETH = 0
    AETH = 1
    ATOMIC_ETH = 2
    ATOMIC_ACK_ETH = 3
    IMM_DT = 4
    IETH = 5
    DETH = 6
    FETH = 7
    CNP_PADDING = 8


EXT_HEADER_BYTES: dict[ExtHeader, int] = {
    ExtHeader.RETH: 16, ExtHeader.AETH: 4, ExtHeader.ATOMIC_ETH: 28,
    ExtHeader.ATOMIC_ACK_ETH: 8, ExtHeader.IMM_DT: 4, ExtHeader.IETH: 4, ExtHeader.DETH: 8,
    ExtHeader.FETH: 4, ExtHeader.CNP_PADDING: 16,
}


@dataclass(frozen=True, slots=True)
class OpcodeInfo:
    """What an opcode implies for the packet layout and for the transport."""

    opcode: Opcode
    transport: Transport
    operation: Operation
    position: Position
    headers: tuple[ExtHeader, ...]  # in wire order after the BTH
    has_payload: bool
    header_bytes: int  # extension headers only (the BTH's 12 not included)

    @property
    def is_first(self) -> bool:
        return self.position is Position.FIRST

    @property
    def is_middle(self) -> bool:
        return self.position is Position.MIDDLE

    @property
    def is_last(self) -> bool:
        return self.position is Position.LAST

    @property
    def is_only(self) -> bool:
        return self.position is Position.ONLY

    @property
    def ends_message(self) -> bool:
        """LAST or ONLY: the packet completes a message."""
        return self.position in (Position.LAST, Position.ONLY)

    @property
    def has_immediate(self) -> bool:
        return ExtHeader.IMM_DT in self.headers

    @property
    def has_invalidate(self) -> bool:
        return ExtHeader.IETH in self.headers

    @property
    def is_response(self) -> bool:
        """Sent by the responder (read responses and acknowledgements)."""
        return self.operation in (Operation.RDMA_READ_RESPONSE, Operation.ACKNOWLEDGE,
                                  Operation.ATOMIC_ACKNOWLEDGE)


_R = ExtHeader
# (low five opcode bits, operation, position, headers, has payload) for RC and UC (IBTA Table 39).
_RC_UC_LAYOUT: tuple[tuple[int, Operation, Position, tuple[ExtHeader, ...], bool], ...] = (
    (0x00, Operation.SEND, Position.FIRST, (), True),
    (0x01, Operation.SEND, Position.MIDDLE, (), True),
    (0x02, Operation.SEND, Position.LAST, (), True),
    (0x03, Operation.SEND, Position.LAST, (_R.IMM_DT,), True),
    (0x04, Operation.SEND, Position.ONLY, (), True),
    (0x05, Operation.SEND, Position.ONLY, (_R.IMM_DT,), True),
    (0x06, Operation.RDMA_WRITE, Position.FIRST, (_R.RETH,), True),
    (0x07, Operation.RDMA_WRITE, Position.MIDDLE, (), True),
    (0x08, Operation.RDMA_WRITE, Position.LAST, (), True),
    (0x09, Operation.RDMA_WRITE, Position.LAST, (_R.IMM_DT,), True),
    (0x0A, Operation.RDMA_WRITE, Position.ONLY, (_R.RETH,), True),
    (0x0B, Operation.RDMA_WRITE, Position.ONLY, (_R.RETH, _R.IMM_DT), True),
    (0x0C, Operation.RDMA_READ_REQUEST, Position.ONLY, (_R.RETH,), False),
    (0x0D, Operation.RDMA_READ_RESPONSE, Position.FIRST, (_R.AETH,), True),
    (0x0E, Operation.RDMA_READ_RESPONSE, Position.MIDDLE, (), True),
    (0x0F, Operation.RDMA_READ_RESPONSE, Position.LAST, (_R.AETH,), True),
    (0x10, Operation.RDMA_READ_RESPONSE, Position.ONLY, (_R.AETH,), True),
    (0x11, Operation.ACKNOWLEDGE, Position.ONLY, (_R.AETH,), False),
    (0x12, Operation.ATOMIC_ACKNOWLEDGE, Position.ONLY, (_R.AETH, _R.ATOMIC_ACK_ETH), False),
    (0x13, Operation.COMPARE_SWAP, Position.ONLY, (_R.ATOMIC_ETH,), False),
    (0x14, Operation.FETCH_ADD, Position.ONLY, (_R.ATOMIC_ETH,), False),
    (0x16, Operation.SEND, Position.LAST, (_R.IETH,), True),
    (0x17, Operation.SEND, Position.ONLY, (_R.IETH,), True),
    (0x1C, Operation.FLUSH, Position.ONLY, (_R.FETH, _R.RETH), False),
    (0x1D, Operation.ATOMIC_WRITE, Position.ONLY, (_R.RETH,), True),
)


def _build_table() -> tuple[OpcodeInfo | None, ...]:
    table: list[OpcodeInfo | None] = [None] * 256
    valid = {int(op) for op in Opcode}

    def add(value: int, transport: Transport, operation: Operation, position: Position,
            headers: tuple[ExtHeader, ...], has_payload: bool) -> None:
        if value in valid:
            table[value] = OpcodeInfo(Opcode(value), transport, operation, position, headers,
                                      has_payload, sum(EXT_HEADER_BYTES[h] for h in headers))

    for low, operation, position, headers, has_payload in _RC_UC_LAYOUT:
        add(low, Transport.RC, operation, position, headers, has_payload)
        add(0x20 | low, Transport.UC, operation, position, headers, has_payload)
    add(0x64, Transport.UD, Operation.SEND, Position.ONLY, (_R.DETH,), True)
    add(0x65, Transport.UD, Operation.SEND, Position.ONLY, (_R.DETH, _R.IMM_DT), True)
    add(0x81, Transport.CNP, Operation.CNP, Position.ONLY, (_R.CNP_PADDING,), False)
    return tuple(table)


#: OpcodeInfo per opcode byte, None for RD, reserved and manufacturer opcodes.
OPCODE_TABLE: tuple[OpcodeInfo | None, ...] = _build_table()


def opcode_info(opcode: int) -> OpcodeInfo:
    """Layout and meaning of ``opcode``; EncodeError if netio does not know it."""
    info = OPCODE_TABLE[opcode] if 0 <= opcode <= 0xFF else None
    if info is None:
        raise EncodeError("BTH", f"opcode 0x{opcode:02x} is not an RC, UC, UD or CNP opcode")
    return info


_BTH = struct.Struct(">BBHII")
_BTH_FIELDS: FieldSpec = (("opcode", 8), ("pad_count", 2), ("tver", 4), ("pkey", 16),
                          ("dest_qp", 24), ("psn", 24))

#: PSNs are 24-bit; arithmetic on them wraps modulo this.
PSN_MODULUS = 1 << 24
#: The default (full-member) partition key.
DEFAULT_PKEY = 0xFFFF


@dataclass(frozen=True, slots=True)
class Bth:
    """Base Transport Header (12 bytes, IBTA §9.2).

    ``pad_count`` is the number of pad bytes (0..3) that align the payload to
    4 bytes; ``fecn``/``becn`` are the congestion bits that RoCEv2 leaves to
    IP ECN and CNPs (BECN is set in CNPs).
    """

    opcode: Opcode
    solicited: bool = False
    mig_req: bool = False
    pad_count: int = 0
    tver: int = 0
    pkey: int = DEFAULT_PKEY
    fecn: bool = False
    becn: bool = False
    dest_qp: int = 0
    ack_req: bool = False
    psn: int = 0

    SIZE_BYTES: ClassVar[int] = 12

    def __post_init__(self) -> None:
        try:
            ok = (0 <= self.psn <= 0xFFFFFF and 0 <= self.dest_qp <= 0xFFFFFF
                  and 0 <= self.pad_count <= 3 and 0 <= self.pkey <= 0xFFFF
                  and 0 <= self.tver <= 15 and 0 <= self.opcode <= 0xFF)
        except TypeError:
            ok = False
        if not ok:
            raise out_of_range("BTH", self, _BTH_FIELDS)
        if OPCODE_TABLE[self.opcode] is None:
            raise EncodeError("BTH", f"opcode 0x{self.opcode:02x} is not an RC, UC, UD or "
                                     "CNP opcode")

    @property
    def info(self) -> OpcodeInfo:
        info = OPCODE_TABLE[self.opcode]
        if info is None:  # unreachable: __post_init__ rejects unknown opcodes
            raise EncodeError("BTH", f"opcode 0x{self.opcode:02x} is unknown")
        return info

    @property
    def transport(self) -> Transport:
        return self.info.transport

    def encode(self) -> bytes:
        return _BTH.pack(
            self.opcode,
            (self.solicited << 7) | (self.mig_req << 6) | (self.pad_count << 4) | self.tver,
            self.pkey,
            (self.fecn << 31) | (self.becn << 30) | self.dest_qp,
            (self.ack_req << 31) | self.psn,
        )

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 12:
            raise DecodeError("BTH", offset, f"need 12 bytes, have {len(buf) - offset}")
        op, flags, pkey, qpw, psnw = _BTH.unpack_from(buf, offset)
        info = OPCODE_TABLE[op]
        if info is None:
            raise DecodeError("BTH", offset, f"opcode 0x{op:02x} is not an RC, UC, UD or CNP "
                                             "opcode")
        return cls(info.opcode, (flags & 0x80) != 0, (flags & 0x40) != 0, (flags >> 4) & 3,
                   flags & 0xF, pkey, (qpw & 0x80000000) != 0, (qpw & 0x40000000) != 0,
                   qpw & 0xFFFFFF, (psnw & 0x80000000) != 0, psnw & 0xFFFFFF)
