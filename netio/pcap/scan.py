"""The fast path: scan a capture into numpy columns without per-packet objects.

``netio_pcap_scan`` (native/pcapscan.c, the one record walker) fills
caller-provided arrays with ``ts_ns``, ``frame_offset``, ``caplen``,
``orig_len``, ``linktype`` and ``interface_id``; it returns how many it
filled, where it stopped and why. pcapng Section Header and Interface
Description Blocks are handed back to Python (``ScanStatus.BLOCK``) and
parsed by ``netio.pcap.pcapng``, so the C code only walks packet blocks.

Two ways to get the bytes to it, one contract for records and damage:

- ``CaptureScanner`` (mapped): the file is mapped into memory; every frame
  stays addressable (``frame_offset`` into ``buffer``) until ``close``.
  Takes a path or an in-memory buffer; native or pure-Python scanning.
- ``WindowScanner`` (streaming): the file is read with ``readinto`` into a
  reused window (2 MiB, grown only for a record or block larger than it);
  a batch's frames are addressable until the next batch. Resident memory is
  the window whatever the capture's size, and the bytes of a batch are still
  in the CPU caches when the caller analyses them (over a mapping, page
  faults, page-table teardown and the prefetcher stopping at every 4 KiB page
  cost more than the copy). Native scanning only.

Both yield the same records and report damage in the same words (file,
record index, byte offset) as ``open_capture``: ``CaptureWarning`` after the
good records (``CaptureError`` when strict; ``tests/test_pcap_window.py``
proves the two modes equal at every truncation and under corruption).

``scan_reference`` is the pure-Python reference of ``netio_pcap_scan`` (the
same contract, built on the streaming readers' decoders); ``NETIO_PURE=1`` or
``native_scan=False`` selects it for ``CaptureScanner``.
"""

from __future__ import annotations

import io
import mmap
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, BinaryIO, Self

import numpy as np
import numpy.typing as npt

from netio import native
from netio.errors import CaptureError, CaptureWarning
from netio.pcap import pcap, pcapng
from netio.pcap.compressed import decompression_errors, open_decompressed, read_all
from netio.pcap.format import BlockType, CaptureFormat, Damage, ScanStatus
from netio.pcap.pcap import PcapHeader
from netio.pcap.pcapng import Interface, Walker
from netio.pcap.source import Buffer, MemorySource

#: Records per chunk when ``scan_capture`` collects a whole file.
CHUNK_RECORDS = 1 << 20
#: ``WindowScanner``'s initial window: a few MiB keep a batch's frames in the
#: L2/L3 caches and make refills rare; it grows only for a record or block
#: larger than itself.
DEFAULT_WINDOW_BYTES = 2 << 20

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


def _c_interfaces(ffi: Any, interfaces: tuple[Interface, ...]) -> Any:
    """The pcapng interfaces as the C scanner's ``netio_pcap_iface[]``."""
    out = ffi.new("netio_pcap_iface[]", max(1, len(interfaces)))
    for slot, iface in zip(out, interfaces, strict=False):
        slot.linktype = iface.linktype
        slot.snaplen = iface.snaplen
        slot.ts_mul, slot.ts_div, slot.ts_shift = iface.ts_scale
        slot.tsoffset_s = iface.tsoffset_s
    return out


def _open_state(head: bytes, path: str | None) -> tuple[PcapHeader | None, ScanState]:
    """Where a scan starts, from the file's first bytes (CaptureError: not a capture)."""
    if not head:
        raise CaptureError("empty file, not a capture", path=path, record_index=0,
                           byte_offset=0)
    if pcapng.is_pcapng_magic(head):
        return None, ScanState(CaptureFormat.PCAPNG, 0)
    header = PcapHeader.decode(head, path=path)
    return header, ScanState(CaptureFormat.PCAP, PcapHeader.SIZE_BYTES,
                             big_endian=header.big_endian, ts_unit_ns=header.ts_unit_ns,
                             linktype=header.linktype)


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
            self._cifaces = _c_interfaces(ffi, key)
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
        stream = open_decompressed(path)
        if stream is not None:  # compressed: the decompressed bytes, held in memory
            data, damage = read_all(stream, path)
            if damage is not None:
                self.warnings.append(CaptureWarning(damage))
            return data
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
        self.pcap_header, self.state = _open_state(bytes(self.buffer[:PcapHeader.SIZE_BYTES]),
                                                   self.path)
        self.format = self.state.format

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


_NEEDS_MORE = (ScanStatus.TRUNCATED_HEADER, ScanStatus.TRUNCATED_DATA)


class WindowScanner:
    """Batches of scanned records of one capture file, read through a reused window.

    ``next_batch(out)`` fills ``out`` (``ScanColumns``) from its start and
    returns how many records it wrote (0 once ``done``); their frames are at
    ``frame_offset`` in ``buffer`` (``cbuffer`` for C callers) until the next
    call, which may move or refill the window. Damage ends the scan with a
    ``CaptureWarning`` in ``warnings`` (``damage`` holds the error), as
    ``CaptureScanner`` in its default, non-strict mode. Opening raises
    ``CaptureError`` for a file that cannot be read or is not a capture.
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 window_bytes: int = DEFAULT_WINDOW_BYTES) -> None:
        if not native.AVAILABLE:
            raise RuntimeError("netio._native is not built (run tools/rebuild)")
        self.path = os.fspath(path)
        self.warnings: list[CaptureWarning] = []
        self.damage: CaptureError | None = None
        self.done = False
        self.base = 0  # file offset of buffer[0]
        self.have = 0  # valid bytes in buffer
        self.eof = False
        self.buffer: npt.NDArray[np.uint8] = np.empty(max(64, window_bytes), np.uint8)
        self._ffi, self._lib = native.ffi, native.lib
        self._damage_errors = decompression_errors()
        self._decompression_damage: str | None = None
        stream = open_decompressed(self.path)  # gzip/xz/zstd: decompressed as read
        self.compressed = stream is not None
        try:
            self._file: BinaryIO = stream if stream is not None else io.FileIO(self.path, "rb")
        except OSError as error:
            raise CaptureError(f"cannot open: {error.strerror}", path=self.path) from error
        try:
            if hasattr(os, "posix_fadvise") and not self.compressed:
                os.posix_fadvise(self._file.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            self._read_more()
            self._start()
        except BaseException:
            self._file.close()
            raise
        self._walker = Walker()
        self._ifaces: Any = None
        self._ifaces_key: tuple[Interface, ...] = ()
        self._cbuf = self._ffi.from_buffer("uint8_t[]", self.buffer)

    def _start(self) -> None:
        """The C scan state at the first record or block (the Python twin's fields)."""
        _, state = _open_state(bytes(self.buffer[:min(self.have, PcapHeader.SIZE_BYTES)]),
                               self.path)
        self.format = state.format
        st = self._state = self._ffi.new("netio_pcap_scan_state *")
        st.format = state.format
        st.big_endian = state.big_endian
        st.ts_unit_ns = state.ts_unit_ns
        st.linktype = state.linktype
        st.offset = state.offset
        st.record_index = 0

    def _read_more(self) -> None:
        """Fill the free end of the window from the file (sets ``eof`` at its end)."""
        view = self.buffer.data
        while self.have < len(self.buffer):
            try:
                if self.compressed:  # read1: what was decompressed before damage is kept
                    data = self._file.read1(len(self.buffer) - self.have)  # type: ignore[attr-defined]
                    view[self.have:self.have + len(data)] = data
                    got = len(data)
                else:
                    got = self._file.readinto(view[self.have:])  # type: ignore[attr-defined]
            except self._damage_errors as error:  # a damaged or cut compressed stream
                self.eof = True
                self._decompression_damage = (
                    f"decompression failed after {self.base + self.have} bytes: {error}")
                break
            if not got:
                self.eof = True
                break
            self.have += got

    def _refill(self) -> None:
        """Drop the scanned bytes before the scan offset, grow if needed, read on."""
        st = self._state
        off = int(st.offset)
        keep = self.have - off
        if off == 0 and self.have == len(self.buffer):  # one record or block fills it
            bigger = np.empty(2 * len(self.buffer), np.uint8)
            bigger[:keep] = self.buffer[:keep]
            self._ffi.release(self._cbuf)
            self.buffer = bigger
            self._cbuf = self._ffi.from_buffer("uint8_t[]", self.buffer)
        elif off:
            self.buffer[:keep] = self.buffer[off:self.have]
        self.base += off
        self.have = keep
        st.offset = 0
        self._read_more()

    @property
    def offset(self) -> int:
        """File offset of the next unscanned byte."""
        return self.base + int(self._state.offset)

    @property
    def cbuffer(self) -> Any:
        """``buffer`` as a cffi ``uint8_t[]`` (valid until the next ``next_batch``)."""
        return self._cbuf

    def next_batch(self, out: ScanColumns) -> int:
        """Scan up to ``len(out)`` records into ``out``; 0 once ``done``."""
        ffi, st = self._ffi, self._state
        ptrs = [ffi.from_buffer(ctype, getattr(out, name), require_writable=True)
                for name, ctype in zip(_COLUMNS, _C_TYPES, strict=True)]
        while not self.done:
            self._sync_interfaces()
            n: int = self._lib.netio_pcap_scan(self._cbuf, self.have, st, len(out), *ptrs)
            status = ScanStatus(st.status)
            if status is ScanStatus.FULL or n:
                return n  # a stop is handled on the next call, which finds it again
            if status is ScanStatus.END:
                if self.eof:
                    self.done = True
                    self._report_decompression()
                else:
                    self._refill()
            elif status in _NEEDS_MORE and not self.eof:
                self._refill()
            elif status is ScanStatus.BLOCK:
                self._control_block()
            else:
                block_type = None if self.format is CaptureFormat.PCAP else int(st.block_type)
                self._stop(Damage.of(status, block_type=block_type, value=int(st.value),
                                     limit=int(st.limit)))
        return 0

    def _sync_interfaces(self) -> None:
        key = tuple(self._walker.interfaces)
        if self._ifaces is None or key != self._ifaces_key:
            self._ifaces = _c_interfaces(self._ffi, key)
            self._ifaces_key = key
            self._state.ifaces = self._ifaces
            self._state.n_ifaces = len(key)

    def _control_block(self) -> None:
        """Parse the SHB or IDB the scan stopped at (refilling while it is cut short)."""
        st = self._state
        while True:
            src = MemorySource(self.buffer.data[:self.have], int(st.offset))
            try:
                block = pcapng.read_block(src, bool(st.big_endian))
                if block is None:  # pragma: no cover - the scanner stops on a whole header
                    self.done = True
                    return
                block_type, big_endian, data = block
                self._walker.big_endian = bool(st.big_endian)
                self._walker.control_block(block_type, data, big_endian)
            except Damage as damage:
                if damage.status in _NEEDS_MORE and not self.eof:
                    self._refill()
                    continue
                self._stop(damage)
                return
            break
        st.big_endian = self._walker.big_endian
        st.offset = src.offset

    def _stop(self, damage: Damage) -> None:
        self.done = True
        error = damage.at(path=self.path, record_index=int(self._state.record_index),
                          byte_offset=self.offset)
        self.damage = error
        self.warnings.append(CaptureWarning(str(error)))
        self._report_decompression()

    def _report_decompression(self) -> None:
        """Say why a compressed capture ended early (its records before that were read)."""
        if self._decompression_damage is not None:
            self.warnings.append(CaptureWarning(f"{self.path}: {self._decompression_damage}"))
            self._decompression_damage = None

    def close(self) -> None:
        """Close the file and release the window's C view (``buffer`` stays readable)."""
        if self._file.closed:
            return
        self._ffi.release(self._cbuf)
        self._file.close()

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
