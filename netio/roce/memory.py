"""Protection domains and memory regions (IBTA vol 1 §10.6).

A MemoryRegion wraps any Python buffer (bytearray, numpy array, mmap...)
as a zero-copy ``memoryview``. Keys follow rxe: the lkey equals the rkey and is
``index << 8 | key_byte``. The virtual address advertised to peers is either
given by the caller or a synthetic, page-aligned address unique within the PD.

Remote accesses (RDMA READ/WRITE/atomics arriving at a responder) are checked by
``ProtectionDomain.check_remote``: rkey, access flags and bounds (IBTA §9.7.4.1.4 /
rxe ``check_rkey``); a violation is reported, never raised, so that the responder
can NAK and leave memory untouched.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from netio.api.types import Access
from netio.errors import RegistrationError

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

_PAGE_BYTES = 4096
_SYNTHETIC_BASE_ADDR = 0x0000_7E00_0000_0000
_MAX_ADDR = (1 << 64) - 1


class RemoteAccessError(enum.IntEnum):
    """Why a remote access was refused; maps to a NAK code in the responder."""

    OK = 0
    INVALID_RKEY = 1
    ACCESS_DENIED = 2
    OUT_OF_BOUNDS = 3
    MISALIGNED_ATOMIC = 4


@dataclass(frozen=True, slots=True, eq=False)
class MemoryRegion:
    """A registered buffer. ``buffer`` is a byte-format memoryview of the caller's object."""

    lkey: int
    rkey: int
    addr: int
    length: int
    access: Access
    buffer: memoryview = field(repr=False)
    pd: ProtectionDomain = field(repr=False)

    @property
    def registered(self) -> bool:
        """False once the region has been deregistered."""
        return self.pd.lookup_rkey(self.rkey) is self

    def sge(self, offset: int = 0, length: int | None = None) -> Sge:
        """A scatter/gather entry covering ``[offset, offset + length)`` of this region."""
        if length is None:
            length = self.length - offset
        return Sge(self, offset, length)


@dataclass(frozen=True, slots=True)
class Sge:
    """A local scatter/gather entry: ``length`` bytes at ``offset`` inside ``mr``."""

    mr: MemoryRegion
    offset: int
    length: int

    def __post_init__(self) -> None:
        if self.offset < 0 or self.length < 0 or self.offset + self.length > self.mr.length:
            raise RegistrationError(
                f"SGE [{self.offset}, {self.offset + self.length}) outside MR of "
                f"{self.mr.length} bytes (lkey {self.mr.lkey:#x})"
            )

    @property
    def view(self) -> memoryview:
        """The bytes this entry covers, without copying."""
        return self.mr.buffer[self.offset : self.offset + self.length]


class ProtectionDomain:
    """Holds memory regions; remote keys are resolved within one PD (IBTA §10.2.3)."""

    _pd_ids = itertools.count(1)

    def __init__(self) -> None:
        self.pd_id = next(self._pd_ids)
        self._by_key: dict[int, MemoryRegion] = {}
        self._next_index = 1
        self._next_addr = _SYNTHETIC_BASE_ADDR

    def register(self, buffer: ReadableBuffer, access: Access,
                 addr: int | None = None) -> MemoryRegion:
        """Register ``buffer`` without copying; ``addr`` is the address advertised to peers."""
        view = memoryview(buffer)
        if not view.contiguous:
            raise RegistrationError("memory region buffer must be contiguous")
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        access = Access(access)
        needs_write = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC
        if view.readonly and access & needs_write:
            raise RegistrationError(f"read-only buffer cannot be registered with {access!r}")
        if access & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) and not (
            access & Access.LOCAL_WRITE
        ):
            # IBTA §10.6.3.1 / ibv_reg_mr: remote write or atomic requires local write.
            raise RegistrationError("REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE")
        length = view.nbytes
        if addr is None:
            addr = self._next_addr
            pages = (length + _PAGE_BYTES - 1) // _PAGE_BYTES + 1
            self._next_addr += pages * _PAGE_BYTES
        if not 0 <= addr <= _MAX_ADDR - length:
            raise RegistrationError(f"address {addr:#x} + {length} does not fit 64 bits")
        index = self._next_index
        self._next_index += 1
        key = ((index << 8) | ((index * 0x9D + self.pd_id) & 0xFF)) & 0xFFFFFFFF
        mr = MemoryRegion(key, key, addr, length, access, view, self)
        self._by_key[key] = mr
        return mr

    def deregister(self, mr: MemoryRegion) -> None:
        """Invalidate ``mr``: later remote accesses with its rkey are refused."""
        if self._by_key.get(mr.rkey) is not mr:
            raise RegistrationError(f"memory region lkey {mr.lkey:#x} is not registered in this PD")
        del self._by_key[mr.rkey]

    def lookup_rkey(self, rkey: int) -> MemoryRegion | None:
        """The registered region with this key, if any."""
        return self._by_key.get(rkey)

    def check_remote(
        self, rkey: int, va: int, length: int, access: Access
    ) -> tuple[RemoteAccessError, MemoryRegion | None, int]:
        """Validate a remote access; return (verdict, region, byte offset into the region).

        IBTA §9.7.4.1.4 / rxe ``check_rkey``: the rkey must name a valid region of
        this PD that grants ``access`` and contains ``[va, va + length)``.
        """
        mr = self._by_key.get(rkey)
        if mr is None:
            return RemoteAccessError.INVALID_RKEY, None, 0
        if (mr.access & access) != access:
            return RemoteAccessError.ACCESS_DENIED, None, 0
        offset = va - mr.addr
        if offset < 0 or length < 0 or offset + length > mr.length:
            return RemoteAccessError.OUT_OF_BOUNDS, None, 0
        return RemoteAccessError.OK, mr, offset


def gather(sg_list: tuple[Sge, ...], offset: int, length: int) -> bytes:
    """Copy ``length`` bytes starting ``offset`` bytes into the scatter/gather list."""
    if len(sg_list) == 1:
        sge = sg_list[0]
        start = sge.offset + offset
        return bytes(sge.mr.buffer[start : start + length])
    parts: list[bytes] = []
    for sge in sg_list:
        if length <= 0:
            break
        if offset >= sge.length:
            offset -= sge.length
            continue
        take = min(sge.length - offset, length)
        start = sge.offset + offset
        parts.append(bytes(sge.mr.buffer[start : start + take]))
        length -= take
        offset = 0
    return b"".join(parts)


def scatter(sg_list: tuple[Sge, ...], offset: int, data: bytes | memoryview) -> bool:
    """Write ``data`` at ``offset`` bytes into the scatter list; False (nothing written) if it
    does not fit."""
    total = sum(s.length for s in sg_list)
    if offset < 0 or offset + len(data) > total:
        return False
    if len(sg_list) == 1:
        sge = sg_list[0]
        start = sge.offset + offset
        sge.mr.buffer[start : start + len(data)] = data
        return True
    pos = 0
    view = memoryview(data)
    for sge in sg_list:
        if pos >= len(view):
            break
        if offset >= sge.length:
            offset -= sge.length
            continue
        take = min(sge.length - offset, len(view) - pos)
        start = sge.offset + offset
        sge.mr.buffer[start : start + take] = view[pos : pos + take]
        pos += take
        offset = 0
    return True
