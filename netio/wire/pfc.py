"""IEEE 802.3x PAUSE (802.3 Annex 31B) and IEEE 802.1Qbb priority flow control.

Both are MAC Control frames (EtherType 0x8808) sent to 01:80:c2:00:00:01. Pause
times are in quanta of 512 bit times at the link speed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Self

from netio.errors import DecodeError, EncodeError
from netio.wire._fields import check_mac
from netio.wire.ethernet import Ethernet, EtherType, Vlan


class MacControlOpcode(IntEnum):
    PAUSE = 0x0001
    PFC = 0x0101


#: Reserved multicast address that MAC Control frames are sent to.
PAUSE_DST_MAC = b"\x01\x80\xc2\x00\x00\x01"
#: One pause quantum is 512 bit times (IEEE 802.3 §31B.2).
BITS_PER_QUANTUM = 512
#: MAC Control payload after the EtherType, padded to the 46-byte minimum frame body.
MAC_CONTROL_PAYLOAD_BYTES = 46
#: Number of priorities (traffic classes) PFC controls.
PFC_PRIORITIES = 8


def quanta_to_s(quanta: int, link_bps: float) -> float:
    """Pause time of ``quanta`` at ``link_bps`` bit/s, in seconds."""
    if link_bps <= 0:
        raise ValueError(f"link_bps must be positive, got {link_bps}")
    return quanta * BITS_PER_QUANTUM / link_bps


def quanta_to_ns(quanta: int, link_bps: int) -> int:
    """Pause time of ``quanta`` at ``link_bps`` bit/s, in nanoseconds (rounded to nearest)."""
    if link_bps <= 0:
        raise ValueError(f"link_bps must be positive, got {link_bps}")
    return (quanta * BITS_PER_QUANTUM * 1_000_000_000 + link_bps // 2) // link_bps


def s_to_quanta(duration_s: float, link_bps: float) -> int:
    """The quanta (rounded up, at most 65535) that pause for ``duration_s`` at ``link_bps``."""
    if link_bps <= 0:
        raise ValueError(f"link_bps must be positive, got {link_bps}")
    bits = duration_s * link_bps
    quanta = int(-(-bits // BITS_PER_QUANTUM))
    return max(0, min(0xFFFF, quanta))


def _pad(body: bytes) -> bytes:
    return body + bytes(MAC_CONTROL_PAYLOAD_BYTES - len(body))


_U16 = struct.Struct(">H")
_PAUSE = struct.Struct(">HH")
_PFC = struct.Struct(">HH8H")


@dataclass(frozen=True, slots=True)
class PauseFrame:
    """802.3x PAUSE: all traffic stops for ``quanta`` (0 = resume at once)."""

    quanta: int

    SIZE_BYTES: ClassVar[int] = 4  # opcode + pause time, before padding

    def __post_init__(self) -> None:
        if not isinstance(self.quanta, int) or not 0 <= self.quanta <= 0xFFFF:
            raise EncodeError("PAUSE", f"quanta={self.quanta!r} does not fit in 16 bits")

    def pause_s(self, link_bps: float) -> float:
        return quanta_to_s(self.quanta, link_bps)

    def encode_unpadded(self) -> bytes:
        """Opcode and pause time (4 bytes)."""
        return _PAUSE.pack(MacControlOpcode.PAUSE, self.quanta)

    def encode(self) -> bytes:
        """The MAC Control payload after the EtherType, padded to 46 bytes."""
        return _pad(self.encode_unpadded())

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 4:
            raise DecodeError("PAUSE", offset, f"need 4 bytes, have {len(buf) - offset}")
        opcode, quanta = _PAUSE.unpack_from(buf, offset)
        if opcode != MacControlOpcode.PAUSE:
            raise DecodeError("PAUSE", offset, f"MAC Control opcode 0x{opcode:04x} is not "
                                               "PAUSE (0x0001)")
        return cls(quanta)


@dataclass(frozen=True, slots=True)
class PfcFrame:
    """802.1Qbb PFC: priority ``p`` pauses for ``quanta[p]`` if bit ``p`` of the vector is set.

    A set bit with quanta 0 resumes that priority at once (XON).
    """

    class_enable_vector: int
    quanta: tuple[int, ...]

    SIZE_BYTES: ClassVar[int] = 20  # opcode + vector + 8 pause times, before padding

    def __post_init__(self) -> None:
        vector = self.class_enable_vector
        if not isinstance(vector, int) or not 0 <= vector <= 0xFF:
            raise EncodeError("PFC", f"class_enable_vector={self.class_enable_vector!r} does "
                                     "not fit in 8 bits")
        if not isinstance(self.quanta, tuple) or len(self.quanta) != PFC_PRIORITIES:
            raise EncodeError("PFC", f"quanta must be a tuple of 8 values, got {self.quanta!r}")
        for q in self.quanta:
            if not isinstance(q, int) or not 0 <= q <= 0xFFFF:
                raise EncodeError("PFC", f"quanta value {q!r} does not fit in 16 bits")

    def enabled(self, priority: int) -> bool:
        return (self.class_enable_vector >> priority) & 1 == 1

    @property
    def paused_priorities(self) -> tuple[int, ...]:
        """Priorities this frame pauses (enabled with non-zero quanta)."""
        return tuple(p for p in range(8) if self.enabled(p) and self.quanta[p])

    @property
    def resumed_priorities(self) -> tuple[int, ...]:
        """Priorities this frame resumes (enabled with zero quanta, "XON")."""
        return tuple(p for p in range(8) if self.enabled(p) and not self.quanta[p])

    def pause_s(self, priority: int, link_bps: float) -> float:
        """Pause time this frame asks of ``priority`` (0 if its bit is clear)."""
        return quanta_to_s(self.quanta[priority], link_bps) if self.enabled(priority) else 0.0

    def encode_unpadded(self) -> bytes:
        """Opcode, class-enable vector and the eight pause times (20 bytes)."""
        return _PFC.pack(MacControlOpcode.PFC, self.class_enable_vector, *self.quanta)

    def encode(self) -> bytes:
        """The MAC Control payload after the EtherType, padded to 46 bytes."""
        return _pad(self.encode_unpadded())

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 20:
            raise DecodeError("PFC", offset, f"need 20 bytes, have {len(buf) - offset}")
        opcode, vector, *quanta = _PFC.unpack_from(buf, offset)
        if opcode != MacControlOpcode.PFC:
            raise DecodeError("PFC", offset, f"MAC Control opcode 0x{opcode:04x} is not PFC "
                                             "(0x0101)")
        # 802.1Qbb: the vector's upper octet is reserved; only priorities 0..7 exist.
        return cls(vector & 0xFF, tuple(quanta))


def decode_mac_control(buf: bytes | bytearray | memoryview,
                       offset: int = 0) -> PauseFrame | PfcFrame | None:
    """The PAUSE or PFC frame at ``offset`` (just after the EtherType); None for other opcodes."""
    if len(buf) - offset < 2:
        raise DecodeError("MAC Control", offset, f"need 2 bytes, have {len(buf) - offset}")
    (opcode,) = _U16.unpack_from(buf, offset)
    if opcode == MacControlOpcode.PFC:
        return PfcFrame.decode(buf, offset)
    if opcode == MacControlOpcode.PAUSE:
        return PauseFrame.decode(buf, offset)
    return None


#: Frames shorter than this (without FCS) are padded to it (IEEE 802.3 minFrameSize).
MIN_FRAME_BYTES = 60


def _frame(src_mac: bytes, vlan: Vlan | None, body: bytes) -> bytes:
    check_mac("MAC Control", "src_mac", src_mac)
    if vlan is None:
        head = Ethernet(PAUSE_DST_MAC, src_mac, EtherType.MAC_CONTROL).encode()
    else:
        tag = Vlan(vlan.pcp, vlan.dei, vlan.vid, EtherType.MAC_CONTROL)
        head = Ethernet(PAUSE_DST_MAC, src_mac, EtherType.VLAN).encode() + tag.encode()
    frame = head + body
    return frame + bytes(max(0, MIN_FRAME_BYTES - len(frame)))


def build_pfc_frame(src_mac: bytes, class_enable_vector: int, quanta: tuple[int, ...],
                    vlan: Vlan | None = None) -> bytes:
    """A whole 802.1Qbb PFC Ethernet frame, zero-padded to 60 bytes (no FCS)."""
    return _frame(src_mac, vlan, PfcFrame(class_enable_vector, tuple(quanta)).encode_unpadded())


def build_pause_frame(src_mac: bytes, quanta: int, vlan: Vlan | None = None) -> bytes:
    """A whole 802.3x PAUSE Ethernet frame, zero-padded to 60 bytes (no FCS)."""
    return _frame(src_mac, vlan, PauseFrame(quanta).encode_unpadded())
