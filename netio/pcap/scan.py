"""The fast path: scan a whole capture into numpy columns without per-packet objects.

The file is mapped into memory and ``netio_pcap_scan`` (native/pcapscan.c)
walks its records in chunks, filling caller-provided arrays with ``ts_ns``,
``frame_offset`` (into the mapping), ``caplen``, ``orig_len``, ``linktype``
and ``interface_id``; it returns how many it filled, where it stopped and
why. pcapng Section Header and Interface Description Blocks are handed back
to Python (``ScanStatus.BLOCK``) and parsed by ``netio.pcap.pcapng``, so the
C code only walks packet blocks.

``scan_reference`` is the pure-Python reference of ``netio_pcap_scan`` (the
same contract, built on the streaming readers' decoders); ``NETIO_PURE=1`` or
``native=False`` selects it. Damage is reported exactly as ``open_capture``
reports it: ``CaptureWarning`` after the good records, ``CaptureError`` when
strict.
"""

from __future__ import annotations

import mmap
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from netio import native
from netio.errors import CaptureError, CaptureWarning
from netio.pcap import pcap, pcapng
from netio.pcap.format import BlockType, CaptureFormat, Damage, ScanStatus
from netio.pcap.pcap import PcapHeader
from netio.pcap.pcapng import Interface, Walker
from netio.pcap.source import Buffer, MemorySource

#: Records per chunk when ``scan_capture`` collects a whole file.
CHUNK_RECORDS = 1 << 20

# Smallest possible record (pcap record header; pcapng SPB): bounds the record count.
_MIN_RECORD_BYTES = 16


@dataclass(frozen=True, slots=True)
class ScanColumns:
    """Per-record columns for records ``first_record_index`` onward."""

    ts_ns: npt.NDArray[np.int64]
    frame_offset: npt.NDArray[np.int64]
    caplen: npt.NDArray[np.uint32]
    orig_len: npt.NDArray[np.uint32]
    linktype: npt.NDArray[np.uint16]
    interface_id: npt.NDArray[np.uint32]
    first_record_index: int = 0

    @classmethod
    def empty(cls, n: int, first_record_index: int = 0) -> Self:
        return cls(np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.uint32),
                   np.empty(n, np.uint32), np.empty(n, np.uint16), np.empty(n, np.uint32),
                   first_record_index)

    def __len__(self) -> int:
        return len(self.ts_ns)

    def head(self, n: int) -> ScanColumns:
        """The first ``n`` records (views, no copy)."""
        return ScanColumns(self.ts_ns[:n], self.frame_offset[:n], self.caplen[:n],
                           self.orig_len[:n], self.linktype[:n], self.interface_id[:n],
                           self.first_record_index)

    @classmethod
    def concatenate(cls, parts: list[ScanColumns]) -> ScanColumns:
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls.empty(0)
        return cls(np.concatenate([p.ts_ns for p in parts]),
                   np.concatenate([p.frame_offset for p in parts]),
                   np.concatenate([p.caplen for p in parts]),
                   np.concatenate([p.orig_len for p in parts]),
                   np.concatenate([p.linktype for p in parts]),
                   np.concatenate([p.interface_id for p in parts]),
                   parts[0].first_record_index)


_COLUMNS = ("ts_ns", "frame_offset", "caplen", "orig_len", "linktype", "interface_id")
_C_TYPES = ("int64_t[]", "int64_t[]", "uint32_t[]", "uint32_t[]", "uint16_t[]", "uint32_t[]")


@dataclass(slots=True)
class ScanState:
    """Where a scan stands; the Python twin of ``netio_pcap_scan_state``."""

    format: CaptureFormat
    offset: int
    big_endian: bool = False
    ts_unit_ns: int = 1000
    linktype: int = 0
    interfaces: list[Interface] = field(default_factory=list)
    record_index: int = 0
    status: ScanStatus = ScanStatus.FULL
    block_type: int = 0
    value: int = 0
    limit: int = 0


def scan_reference(buf: Buffer, state: ScanState, out: ScanColumns, start: int,
                   max_records: int) -> int:
    """Pure-Python ``netio_pcap_scan``: fill ``out[start:start + n]``, return ``n``.

    Same contract as the C function: stops when ``max_records`` are filled
    (FULL), at the end (END), at an SHB or IDB (BLOCK, offset left on it) or
    at damage (offset left on the damaged record or block).
    """
    src = MemorySource(buf, state.offset)
    size = len(buf)
    n = 0
    state.status = ScanStatus.FULL
    state.block_type = 0
    try:
        while n < max_records:
            offset = src.offset
            if state.format is CaptureFormat.PCAP:
                got = pcap.read_record(src, pcap.record_struct(state.big_endian),
                                       state.ts_unit_ns)
                if got is None:
                    state.status = ScanStatus.END
                    break
                ts_ns, orig_len, frame = got
                caplen, iface, linktype, data_offset = len(frame), 0, state.linktype, 16
            else:
                if offset == size:
                    state.status = ScanStatus.END
                    break
                if size - offset >= 8 and pcapng.is_pcapng_magic(bytes(buf[offset:offset + 4])):
                    state.status = ScanStatus.BLOCK
                    state.block_type = BlockType.SECTION_HEADER
                    break
                block = pcapng.read_block(src, state.big_endian)
                if block is None:  # pragma: no cover - offset == size handled above
                    state.status = ScanStatus.END
                    break
                block_type, _, data = block
                if block_type == BlockType.INTERFACE_DESCRIPTION:
                    state.status, state.block_type = ScanStatus.BLOCK, block_type
                    src = MemorySource(buf, offset)
                    break
                packet = pcapng.decode_packet(block_type, data, state.big_endian,
                                              state.interfaces)
                if packet is None:
                    continue
                iface, ts_ns, orig_len, data_offset, caplen = packet
                linktype = state.interfaces[iface].linktype
            out.ts_ns[start + n] = ts_ns
            out.frame_offset[start + n] = offset + data_offset
            out.caplen[start + n] = caplen
            out.orig_len[start + n] = orig_len
            out.linktype[start + n] = linktype
            out.interface_id[start + n] = iface
            n += 1
    except Damage as damage:
        if damage.status is None:  # pragma: no cover - SHB/IDB content is parsed by the caller
            raise
        state.status = damage.status
        state.block_type = 0 if damage.block_type is None else damage.block_type
        state.value, state.limit = damage.value, damage.limit
        src = MemorySource(buf, offset)
    state.offset = src.offset
    state.record_index += n
    return n


class _NativeScan:
    """Drives ``lib.netio_pcap_scan`` with a ScanState."""

    def __init__(self, buf: Buffer) -> None:
        self._ffi = native.ffi
        self._lib = native.lib
        self._cbuf = self._ffi.from_buffer("uint8_t[]", buf)
        self._size = len(buf)
        self._cstate = self._ffi.new("netio_pcap_scan_state *")
        self._cifaces: Any = None
        self._ifaces_key: tuple[Interface, ...] = ()

    def __call__(self, state: ScanState, out: ScanColumns, start: int, max_records: int) -> int:
        ffi, cs = self._ffi, self._cstate
        key = tuple(state.interfaces)
        if key != self._ifaces_key or self._cifaces is None:
            self._cifaces = ffi.new("netio_pcap_iface[]", max(1, len(key)))
            for slot, iface in zip(self._cifaces, key, strict=False):
                slot.linktype = iface.linktype
                slot.snaplen = iface.snaplen
                slot.ts_mul, slot.ts_div, slot.ts_shift = iface.ts_scale
                slot.tsoffset_s = iface.tsoffset_s
            self._ifaces_key = key
        cs.format = state.format
        cs.big_endian = state.big_endian
        cs.ts_unit_ns = state.ts_unit_ns
        cs.linktype = state.linktype
        cs.ifaces = self._cifaces
        cs.n_ifaces = len(key)
        cs.offset = state.offset
        cs.record_index = state.record_index
        n: int = self._lib.netio_pcap_scan(
            self._cbuf, self._size, cs, max_records,
            *(ffi.from_buffer(ctype, getattr(out, name)[start:], require_writable=True)
              for name, ctype in zip(_COLUMNS, _C_TYPES, strict=True)))
        state.offset = cs.offset
        state.record_index = cs.record_index
        state.status = ScanStatus(cs.status)
        state.block_type = cs.block_type
        state.value = cs.value
        state.limit = cs.limit
        return n

    def release(self) -> None:
        self._ffi.release(self._cbuf)


class CaptureScanner:
    """Chunked scanning of one capture (path or in-memory buffer); a context manager.

    ``fill(columns)`` fills caller-provided arrays and returns how many records
    it wrote (0 once ``done``); ``chunks(n)`` yields fresh columns of up to
    ``n`` records. ``native`` picks the C scanner (default: when built) or the
    pure-Python reference. The mapping (``buffer``) stays valid until ``close``.
    """

    def __init__(self, source: str | os.PathLike[str] | Buffer, *, strict: bool = False,
                 native_scan: bool | None = None) -> None:
        self.strict = strict
        self.warnings: list[CaptureWarning] = []
        self.damage: CaptureError | None = None
        self.done = False
        self._mmap: mmap.mmap | None = None
        if isinstance(source, str | os.PathLike):
            self.path: str | None = os.fspath(source)
            self.buffer: Buffer = self._map(self.path)
        else:
            self.path = None
            self.buffer = source
        if native_scan is None:
            native_scan = native.AVAILABLE
        elif native_scan and not native.AVAILABLE:
            raise RuntimeError("netio._native is not built (run tools/rebuild)")
        try:
            self._start()
            self._step = _NativeScan(self.buffer) if native_scan else self._reference_step
        except BaseException:
            self.close()
            raise
        self._native = native_scan
        self._walker = Walker()

    def _map(self, path: str) -> Buffer:
        try:
            with open(path, "rb") as file:
                if os.fstat(file.fileno()).st_size == 0:
                    return b""
                self._mmap = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as error:
            raise CaptureError(f"cannot open: {error.strerror}", path=path) from error
        if hasattr(self._mmap, "madvise"):
            self._mmap.madvise(mmap.MADV_SEQUENTIAL)
        return self._mmap

    def _start(self) -> None:
        head = bytes(self.buffer[:PcapHeader.SIZE_BYTES])
        if not head:
            raise CaptureError("empty file, not a capture", path=self.path, record_index=0,
                               byte_offset=0)
        if pcapng.is_pcapng_magic(head):
            self.format = CaptureFormat.PCAPNG
            self.pcap_header: PcapHeader | None = None
            self.state = ScanState(CaptureFormat.PCAPNG, 0)
        else:
            header = PcapHeader.decode(head, path=self.path)
            self.format = CaptureFormat.PCAP
            self.pcap_header = header
            self.state = ScanState(CaptureFormat.PCAP, PcapHeader.SIZE_BYTES,
                                   big_endian=header.big_endian, ts_unit_ns=header.ts_unit_ns,
                                   linktype=header.linktype)

    def _reference_step(self, state: ScanState, out: ScanColumns, start: int,
                        max_records: int) -> int:
        return scan_reference(self.buffer, state, out, start, max_records)

    @property
    def native(self) -> bool:
        """True when the C scanner is in use."""
        return self._native

    def fill(self, out: ScanColumns) -> int:
        """Fill ``out`` from its start with the next records; return how many."""
        filled = 0
        capacity = len(out)
        state = self.state
        while filled < capacity and not self.done:
            filled += self._step(state, out, filled, capacity - filled)
            status = state.status
            if status is ScanStatus.FULL:
                continue
            if status is ScanStatus.END:
                self.done = True
            elif status is ScanStatus.BLOCK:
                self._control_block()
            else:
                block_type = None if self.format is CaptureFormat.PCAP else state.block_type
                self._stop(Damage.of(status, block_type=block_type, value=state.value,
                                     limit=state.limit))
        return filled

    def _control_block(self) -> None:
        """Parse the SHB or IDB the scan stopped at, with the streaming reader's code."""
        state = self.state
        src = MemorySource(self.buffer, state.offset)
        try:
            block = pcapng.read_block(src, state.big_endian)
            if block is None:  # pragma: no cover - the scanner only stops on a whole header
                self.done = True
                return
            block_type, big_endian, data = block
            self._walker.big_endian = state.big_endian
            self._walker.control_block(block_type, data, big_endian)
        except Damage as damage:
            self._stop(damage)
            return
        state.big_endian = self._walker.big_endian
        state.interfaces = list(self._walker.interfaces)
        state.offset = src.offset

    def _stop(self, damage: Damage) -> None:
        self.done = True
        error = damage.at(path=self.path, record_index=self.state.record_index,
                          byte_offset=self.state.offset)
        self.damage = error
        if self.strict:
            raise error
        warning = CaptureWarning(str(error))
        self.warnings.append(warning)
        warnings.warn(warning, stacklevel=4)

    def chunks(self, chunk_records: int = CHUNK_RECORDS) -> Iterator[ScanColumns]:
        """Yield columns of up to ``chunk_records`` records until the end (or damage)."""
        if chunk_records < 1:
            raise ValueError(f"chunk_records must be positive, not {chunk_records}")
        bound = len(self.buffer) // _MIN_RECORD_BYTES + 1
        while not self.done:
            out = ScanColumns.empty(min(chunk_records, bound), self.state.record_index)
            n = self.fill(out)
            if n:
                yield out.head(n)

    def close(self) -> None:
        """Release the mapping (no views into ``buffer`` may remain)."""
        step = getattr(self, "_step", None)
        if isinstance(step, _NativeScan):
            step.release()
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class ScanResult:
    """Every record of a capture as columns, with the mapping the offsets point into."""

    path: str | None
    format: CaptureFormat
    ts_ns: npt.NDArray[np.int64]
    frame_offset: npt.NDArray[np.int64]
    caplen: npt.NDArray[np.uint32]
    orig_len: npt.NDArray[np.uint32]
    linktype: npt.NDArray[np.uint16]
    interface_id: npt.NDArray[np.uint32]
    buffer: Buffer
    warnings: tuple[CaptureWarning, ...]
    damage: CaptureError | None
    _scanner: CaptureScanner = field(repr=False)

    def __len__(self) -> int:
        return len(self.ts_ns)

    def frame(self, i: int) -> bytes:
        """The captured bytes of record ``i`` (a copy)."""
        start = int(self.frame_offset[i])
        return bytes(self.buffer[start:start + int(self.caplen[i])])

    def close(self) -> None:
        """Unmap the file (frames are no longer readable afterwards)."""
        self._scanner.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def scan_capture(source: str | os.PathLike[str] | Buffer, *, strict: bool = False,
                 native_scan: bool | None = None,
                 chunk_records: int = CHUNK_RECORDS) -> ScanResult:
    """Scan a whole pcap or pcapng capture into columns (see ``ScanResult``)."""
    scanner = CaptureScanner(source, strict=strict, native_scan=native_scan)
    try:
        columns = ScanColumns.concatenate(list(scanner.chunks(chunk_records)))
    except BaseException:
        scanner.close()
        raise
    return ScanResult(scanner.path, scanner.format, columns.ts_ns, columns.frame_offset,
                      columns.caplen, columns.orig_len, columns.linktype, columns.interface_id,
                      scanner.buffer, tuple(scanner.warnings), scanner.damage, scanner)
