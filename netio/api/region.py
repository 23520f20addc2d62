"""Registered memory: local regions, their descriptors, and remote regions.

``Context.register(buffer)`` registers any contiguous writable buffer object in place
(bytearray, memoryview, numpy array, mmap): the backend sees the caller's bytes, no
copy. ``region[a:b]`` names part of it for an operation. ``region.descriptor()`` is
the bytes a peer needs for one-sided access (address, rkey, length, transport), and
``RemoteRegion.from_descriptor`` reads them back, so users pass descriptors around
however they like and never handle raw rkeys unless they want to.

Descriptor layout (big-endian): ``b"NTMR"``, version (1 byte), transport (1 byte:
1 RoCEv2, 2 tcp), 2 reserved bytes, address (8), rkey (4), length (8): 28 bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Protocol

from netio.api.types import Access
from netio.backends.base import BackendRegion, Segment, Transport
from netio.errors import IoError, RegionBusy, RegistrationError

_DESCRIPTOR = struct.Struct("!4sBBHQIQ")
_DESCRIPTOR_MAGIC = b"NTMR"
_DESCRIPTOR_VERSION = 1
_TRANSPORT_CODE = {Transport.ROCE: 1, Transport.TCP: 2}
_TRANSPORT_OF_CODE = {v: k for k, v in _TRANSPORT_CODE.items()}
DESCRIPTOR_BYTES = _DESCRIPTOR.size


@dataclass(frozen=True, slots=True)
class LocalSlice:
    """``length`` bytes at ``offset`` of a registered region (``region[a:b]``)."""

    region: Region
    offset: int
    length: int

    def segment(self) -> Segment:
        return Segment(self.region.backend_region, self.offset, self.length)


@dataclass(frozen=True, slots=True)
class RemoteSlice:
    """``length`` bytes at ``offset`` of a peer's region (``remote[a:b]``)."""

    remote: RemoteRegion
    offset: int
    length: int

    @property
    def addr(self) -> int:
        return self.remote.addr + self.offset


def _slice(total: int, key: slice | int, what: str) -> tuple[int, int]:
    if isinstance(key, int):
        start, stop = key, key + 1
    else:
        if key.step not in (None, 1):
            raise IoError(f"{what}: a slice with a step is not a contiguous range")
        start = 0 if key.start is None else key.start
        stop = total if key.stop is None else key.stop
    if not 0 <= start <= stop <= total:
        raise IoError(f"{what}: range [{start}, {stop}) is outside its {total} bytes")
    return start, stop - start


class RegionOwner(Protocol):
    """What a region needs of the context that registered it."""

    @property
    def transport(self) -> str: ...

    def deregister(self, region: Region) -> None: ...


@dataclass(eq=False)
class Region:
    """A registered memory region of a context. Index or slice it to name a part."""

    context: RegionOwner = field(repr=False)
    backend_region: BackendRegion = field(repr=False)
    access: Access
    view: memoryview = field(repr=False)
    base: object = field(repr=False)  # keeps the caller's object alive while registered
    in_flight: int = 0
    registered: bool = True
    # the whole region as a slice, made once: every operation on a bare region names it
    _whole: LocalSlice | None = field(default=None, init=False, repr=False)

    @property
    def length(self) -> int:
        return self.backend_region.length

    @property
    def addr(self) -> int:
        return self.backend_region.addr

    @property
    def rkey(self) -> int:
        return self.backend_region.rkey

    @property
    def lkey(self) -> int:
        return self.backend_region.lkey

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: slice | int) -> LocalSlice:
        # (the backend's length directly: the property is one more call per operation)
        offset, length = _slice(self.backend_region.length, key, "region")
        return LocalSlice(self, offset, length)

    def whole(self) -> LocalSlice:
        whole = self._whole
        if whole is None:
            whole = self._whole = LocalSlice(self, 0, self.length)
        return whole

    def descriptor(self) -> bytes:
        """The bytes a peer needs to READ/WRITE/atomically access this region."""
        if not self.access & (Access.REMOTE_READ | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC):
            raise RegistrationError("this region grants no remote access; register it with "
                                    "access=Access.REMOTE_WRITE/REMOTE_READ/REMOTE_ATOMIC")
        return _DESCRIPTOR.pack(_DESCRIPTOR_MAGIC, _DESCRIPTOR_VERSION,
                                _TRANSPORT_CODE[self.context.transport], 0, self.addr,
                                self.rkey, self.length)

    def deregister(self) -> None:
        """Release the registration; :class:`RegionBusy` while operations use it."""
        self.context.deregister(self)

    def __repr__(self) -> str:
        return (f"Region(addr={self.addr:#x}, length={self.length}, rkey={self.rkey:#x}, "
                f"access={self.access!r}, registered={self.registered})")


@dataclass(frozen=True, slots=True)
class RemoteRegion:
    """A peer's region, from its :meth:`Region.descriptor`. Slice it to name a part."""

    addr: int
    rkey: int
    length: int
    transport: str

    @classmethod
    def from_descriptor(cls, data: bytes | bytearray | memoryview) -> RemoteRegion:
        raw = bytes(data)
        if len(raw) != DESCRIPTOR_BYTES:
            raise IoError(f"region descriptor: {len(raw)} bytes, expected {DESCRIPTOR_BYTES}")
        magic, version, transport, _, addr, rkey, length = _DESCRIPTOR.unpack(raw)
        if magic != _DESCRIPTOR_MAGIC:
            raise IoError(f"region descriptor: bad magic {magic!r}")
        if version != _DESCRIPTOR_VERSION:
            raise IoError(f"region descriptor: version {version}, this netio reads "
                          f"{_DESCRIPTOR_VERSION}")
        if transport not in _TRANSPORT_OF_CODE:
            raise IoError(f"region descriptor: unknown transport code {transport}")
        return cls(addr, rkey, length, _TRANSPORT_OF_CODE[transport])

    def __getitem__(self, key: slice | int) -> RemoteSlice:
        offset, length = _slice(self.length, key, "remote region")
        return RemoteSlice(self, offset, length)

    def whole(self) -> RemoteSlice:
        return RemoteSlice(self, 0, self.length)


def check_region_busy(region: Region) -> None:
    if region.in_flight:
        raise RegionBusy(f"region at {region.addr:#x} ({region.length} bytes) has "
                         f"{region.in_flight} operation(s) in flight; wait for them before "
                         "deregistering")


__all__ = [
    "DESCRIPTOR_BYTES",
    "LocalSlice",
    "Region",
    "RegionOwner",
    "RemoteRegion",
    "RemoteSlice",
    "check_region_busy",
]
