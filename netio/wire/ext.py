"""InfiniBand extension transport headers (IBTA vol 1 §9.3 and §9.4).

RETH (RDMA), AETH (acknowledge), AtomicETH / AtomicAckETH (atomics), ImmDt
(immediate data), IETH (invalidate), DETH (datagram, UD) and FETH (flush,
IBTA 1.5). All multi-byte fields are big-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Self

from netio.errors import DecodeError, EncodeError
from netio.wire._fields import FieldSpec, out_of_range


def _short(header: str, offset: int, need: int, avail: int) -> DecodeError:
    return DecodeError(header, offset, f"need {need} bytes, have {avail}")


_RETH = struct.Struct(">QII")
_RETH_FIELDS: FieldSpec = (("virtual_address", 64), ("rkey", 32), ("dma_length", 32))


@dataclass(frozen=True, slots=True)
class Reth:
    """RDMA Extended Transport Header (16 bytes, §9.3.3)."""

    virtual_address: int
    rkey: int
    dma_length: int

    SIZE_BYTES: ClassVar[int] = 16

    def __post_init__(self) -> None:
        try:
            ok = (0 <= self.virtual_address <= 0xFFFFFFFFFFFFFFFF and 0 <= self.rkey <= 0xFFFFFFFF
                  and 0 <= self.dma_length <= 0xFFFFFFFF)
        except TypeError:
            ok = False
        if not ok:
            raise out_of_range("RETH", self, _RETH_FIELDS)

    def encode(self) -> bytes:
        return _RETH.pack(self.virtual_address, self.rkey, self.dma_length)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 16:
            raise _short("RETH", offset, 16, len(buf) - offset)
        return cls(*_RETH.unpack_from(buf, offset))


class AckType(IntEnum):
    """AETH syndrome bits 6..5 (IBTA §9.3.5 Table 43)."""

    ACK = 0
    RNR_NAK = 1
    RESERVED = 2
    NAK = 3


class NakCode(IntEnum):
    """NAK codes in the low five syndrome bits (IBTA Table 43)."""

    PSN_SEQUENCE_ERROR = 0
    INVALID_REQUEST = 1
    REMOTE_ACCESS_ERROR = 2
    REMOTE_OPERATIONAL_ERROR = 3
    INVALID_RD_REQUEST = 4


#: Credit count meaning "no credit information" (end-to-end flow control off).
CREDITS_INVALID = 31

# IBTA §9.7.5.2.8 Table 45: RNR NAK timer field -> minimum delay, in microseconds.
_RNR_TIMER_US: tuple[int, ...] = (
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680,
    491520,
)


def rnr_timer_ns(code: int) -> int:
    """Minimum RNR NAK delay of timer ``code`` (0..31) in nanoseconds (IBTA Table 45)."""
    if not isinstance(code, int) or not 0 <= code <= 31:
        raise EncodeError("AETH", f"RNR timer code {code!r} is not in 0..31")
    return _RNR_TIMER_US[code] * 1000


def rnr_timer_s(code: int) -> float:
    """Minimum RNR NAK delay of timer ``code`` (0..31) in seconds (IBTA Table 45)."""
    return rnr_timer_ns(code) / 1e9


def rnr_timer_code(delay_s: float) -> int:
    """The timer code with the smallest delay that is at least ``delay_s``.

    Codes 1..31 grow from 0.01 ms to 491.52 ms; code 0 is the longest (655.36 ms)
    and is returned for anything longer than 491.52 ms.
    """
    delay_us = delay_s * 1e6
    for code in range(1, 32):
        if _RNR_TIMER_US[code] >= delay_us:
            return code
    return 0


_AETH = struct.Struct(">I")
_ACK_TYPES: tuple[AckType, ...] = tuple(AckType(i) for i in range(4))
_AETH_FIELDS: FieldSpec = (("syndrome", 8), ("msn", 24))


@dataclass(frozen=True, slots=True)
class Aeth:
    """ACK Extended Transport Header (4 bytes, §9.3.5): syndrome + 24-bit MSN."""

    syndrome: int
    msn: int

    SIZE_BYTES: ClassVar[int] = 4

    def __post_init__(self) -> None:
        try:
            ok = 0 <= self.syndrome <= 0x7F and 0 <= self.msn <= 0xFFFFFF
        except TypeError:
            ok = False
        if not ok:
            if isinstance(self.syndrome, int) and 0x80 <= self.syndrome <= 0xFF:
                raise EncodeError("AETH", f"syndrome=0x{self.syndrome:02x} sets the reserved bit 7")
            raise out_of_range("AETH", self, _AETH_FIELDS)

    @classmethod
    def ack(cls, msn: int, credits: int = CREDITS_INVALID) -> Self:
        if not isinstance(credits, int) or not 0 <= credits <= 31:
            raise EncodeError("AETH", f"credit count {credits!r} is not in 0..31")
        return cls(credits, msn)

    @classmethod
    def rnr_nak(cls, msn: int, timer_code: int) -> Self:
        if not isinstance(timer_code, int) or not 0 <= timer_code <= 31:
            raise EncodeError("AETH", f"RNR timer code {timer_code!r} is not in 0..31")
        return cls(0x20 | timer_code, msn)

    @classmethod
    def nak(cls, msn: int, code: NakCode | int) -> Self:
        if not isinstance(code, int) or not 0 <= code <= 31:
            raise EncodeError("AETH", f"NAK code {code!r} is not in 0..31")
        return cls(0x60 | code, msn)

    @property
    def ack_type(self) -> AckType:
        return _ACK_TYPES[(self.syndrome >> 5) & 3]

    @property
    def credit_count(self) -> int | None:
        """Credits advertised by an ACK (31 = no information), else None."""
        return self.syndrome & 0x1F if self.syndrome & 0x60 == 0 else None

    @property
    def rnr_timer_code(self) -> int | None:
        return self.syndrome & 0x1F if self.syndrome & 0x60 == 0x20 else None

    @property
    def nak_code(self) -> NakCode | int | None:
        """The NAK code (a NakCode when defined, the raw value when reserved), else None."""
        if self.syndrome & 0x60 != 0x60:
            return None
        code = self.syndrome & 0x1F
        return NakCode(code) if code <= 4 else code

    def encode(self) -> bytes:
        return _AETH.pack((self.syndrome << 24) | self.msn)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 4:
            raise _short("AETH", offset, 4, len(buf) - offset)
        (word,) = _AETH.unpack_from(buf, offset)
        if word & 0x80000000:
            raise DecodeError("AETH", offset, f"syndrome 0x{word >> 24:02x} sets the reserved "
                                              "bit 7")
        return cls(word >> 24, word & 0xFFFFFF)


_ATOMIC = struct.Struct(">QIQQ")
_ATOMIC_FIELDS: FieldSpec = (("virtual_address", 64), ("rkey", 32), ("swap_add_data", 64),
                             ("compare_data", 64))
_U64 = 0xFFFFFFFFFFFFFFFF


@dataclass(frozen=True, slots=True)
class AtomicEth:
    """Atomic Extended Transport Header (28 bytes, §9.3.4).

    ``swap_add_data`` is the value to add (FETCH_ADD) or swap in (COMPARE_SWAP).
    """

    virtual_address: int
    rkey: int
    swap_add_data: int
    compare_data: int = 0

    SIZE_BYTES: ClassVar[int] = 28

    def __post_init__(self) -> None:
        try:
            ok = (0 <= self.virtual_address <= _U64 and 0 <= self.rkey <= 0xFFFFFFFF
                  and 0 <= self.swap_add_data <= _U64 and 0 <= self.compare_data <= _U64)
        except TypeError:
            ok = False
        if not ok:
            raise out_of_range("AtomicETH", self, _ATOMIC_FIELDS)

    def encode(self) -> bytes:
        return _ATOMIC.pack(self.virtual_address, self.rkey, self.swap_add_data,
                            self.compare_data)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 28:
            raise _short("AtomicETH", offset, 28, len(buf) - offset)
        return cls(*_ATOMIC.unpack_from(buf, offset))


_U64S = struct.Struct(">Q")
_U32S = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class AtomicAckEth:
    """Atomic Acknowledge Extended Transport Header (8 bytes, §9.5.3)."""

    original_remote_data: int

    SIZE_BYTES: ClassVar[int] = 8

    def __post_init__(self) -> None:
        value = self.original_remote_data
        if not isinstance(value, int) or not 0 <= value <= _U64:
            raise out_of_range("AtomicAckETH", self, (("original_remote_data", 64),))

    def encode(self) -> bytes:
        return _U64S.pack(self.original_remote_data)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 8:
            raise _short("AtomicAckETH", offset, 8, len(buf) - offset)
        return cls(_U64S.unpack_from(buf, offset)[0])


@dataclass(frozen=True, slots=True)
class ImmDt:
    """Immediate Data Extended Transport Header (4 bytes, §9.3.6), as a big-endian u32."""

    immediate_data: int

    SIZE_BYTES: ClassVar[int] = 4

    def __post_init__(self) -> None:
        if not isinstance(self.immediate_data, int) or not 0 <= self.immediate_data <= 0xFFFFFFFF:
            raise out_of_range("ImmDt", self, (("immediate_data", 32),))

    def encode(self) -> bytes:
        return _U32S.pack(self.immediate_data)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 4:
            raise _short("ImmDt", offset, 4, len(buf) - offset)
        return cls(_U32S.unpack_from(buf, offset)[0])


@dataclass(frozen=True, slots=True)
class Ieth:
    """Invalidate Extended Transport Header (4 bytes, §9.3.7): the R_Key to invalidate."""

    rkey: int

    SIZE_BYTES: ClassVar[int] = 4

    def __post_init__(self) -> None:
        if not isinstance(self.rkey, int) or not 0 <= self.rkey <= 0xFFFFFFFF:
            raise out_of_range("IETH", self, (("rkey", 32),))

    def encode(self) -> bytes:
        return _U32S.pack(self.rkey)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 4:
            raise _short("IETH", offset, 4, len(buf) - offset)
        return cls(_U32S.unpack_from(buf, offset)[0])


_DETH = struct.Struct(">II")
_DETH_FIELDS: FieldSpec = (("qkey", 32), ("src_qp", 24))


@dataclass(frozen=True, slots=True)
class Deth:
    """Datagram Extended Transport Header (8 bytes, §9.3.2): Q_Key + source QP."""

    qkey: int
    src_qp: int

    SIZE_BYTES: ClassVar[int] = 8

    def __post_init__(self) -> None:
        try:
            ok = 0 <= self.qkey <= 0xFFFFFFFF and 0 <= self.src_qp <= 0xFFFFFF
        except TypeError:
            ok = False
        if not ok:
            raise out_of_range("DETH", self, _DETH_FIELDS)

    def encode(self) -> bytes:
        return _DETH.pack(self.qkey, self.src_qp)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 8:
            raise _short("DETH", offset, 8, len(buf) - offset)
        qkey, word = _DETH.unpack_from(buf, offset)
        return cls(qkey, word & 0xFFFFFF)


class FlushPlacement(IntEnum):
    """FETH placement type bits (IBTA 1.5 memory placement extensions)."""

    GLOBAL_VISIBILITY = 1
    PERSISTENCE = 2


@dataclass(frozen=True, slots=True)
class Feth:
    """Flush Extended Transport Header (4 bytes): selectivity level + placement type."""

    selectivity_level: int = 0
    placement_type: int = FlushPlacement.GLOBAL_VISIBILITY

    SIZE_BYTES: ClassVar[int] = 4

    def __post_init__(self) -> None:
        try:
            ok = 0 <= self.selectivity_level <= 3 and 0 <= self.placement_type <= 15
        except TypeError:
            ok = False
        if not ok:
            raise out_of_range("FETH", self, (("selectivity_level", 2), ("placement_type", 4)))

    def encode(self) -> bytes:
        return _U32S.pack((self.selectivity_level << 4) | self.placement_type)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 4:
            raise _short("FETH", offset, 4, len(buf) - offset)
        word = _U32S.unpack_from(buf, offset)[0]
        return cls((word >> 4) & 3, word & 0xF)
