"""Captured records → ``PacketColumns``, natively or with the reference decoder.

``extract_reference`` decodes each frame with ``netio.wire.packet.decode_frame``
(the one codec) and fills the columns; ``extract_native`` does the same in C
(``native/analyze_extract.c``) straight from the mapped capture. Tests prove
the two produce identical columns on generated, real (rxe) and fuzzed frames.

``FlowIndex`` numbers RoCE flows (src IP, dst IP, dest QP) in order of first
appearance, natively (a C hash table) or with a dict; both give the same ids.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv6Address
from typing import Any

import numpy as np
import numpy.typing as npt

from netio import native
from netio.analyze.columns import (
    COLUMN_DTYPES,
    COLUMN_NAMES,
    WIDE_COLUMNS,
    Flag,
    FlowKey,
    Kind,
    PacketColumns,
    flow_keys,
    key_of_words,
)
from netio.errors import CaptureError, CaptureWarning, DecodeError
from netio.pcap.format import SUPPORTED_LINKTYPES
from netio.pcap.scan import CaptureScanner, ScanColumns
from netio.wire.bth import OPCODE_TABLE
from netio.wire.packet import decode_frame
from netio.wire.udp import ROCEV2_UDP_PORT

#: Records per chunk in the analysis pipeline (memory: ~90 bytes per record
#: of columns plus the scanner's 40).
CHUNK_RECORDS = 1 << 18


def extract_one(cols: PacketColumns, i: int, frame: bytes | memoryview, linktype: int,
                orig_len: int, verify_icrc: bool = True) -> None:
    """Fill row ``i`` of ``cols`` from one captured frame (reference semantics)."""
    cols.frame_bytes[i] = orig_len
    flags = Flag.TRUNCATED if len(frame) < orig_len else Flag(0)
    try:
        f = decode_frame(frame, linktype, allow_truncated=True)
    except DecodeError:
        cols.kind[i] = Kind.MALFORMED
        cols.flags[i] = flags
        return
    if f.ethernet is not None:
        cols.src_mac[i] = int.from_bytes(f.ethernet.src_mac, "big")
        cols.dst_mac[i] = int.from_bytes(f.ethernet.dst_mac, "big")
    if f.vlans:
        flags |= Flag.VLAN
        cols.pcp[i] = f.vlans[0].pcp
        cols.vlan[i] = f.vlans[0].vid
    if f.pfc is not None:
        cols.kind[i] = Kind.PFC
        cols.pfc_cev[i] = f.pfc.class_enable_vector
        cols.quanta[i] = f.pfc.quanta
        cols.flags[i] = flags
        return
    if f.pause is not None:
        cols.kind[i] = Kind.PAUSE
        cols.quanta[i, 0] = f.pause.quanta
        cols.flags[i] = flags
        return
    ip = f.ip
    if ip is not None:
        if isinstance(ip.src_ip, IPv6Address):
            cols.src_ip6[i] = np.frombuffer(ip.src_ip.packed, np.uint8)
            cols.dst_ip6[i] = np.frombuffer(ip.dst_ip.packed, np.uint8)
            flags |= Flag.IPV6
        else:
            cols.src_ip[i] = int(ip.src_ip)
            cols.dst_ip[i] = int(ip.dst_ip)
        cols.ecn[i] = int(ip.ecn)
    udp = f.udp
    if udp is None or udp.dst_port != ROCEV2_UDP_PORT:
        cols.kind[i] = Kind.OTHER
        cols.flags[i] = flags
        return
    if f.roce is None:  # cut by the snap length before the end of its headers
        for name in COLUMN_NAMES:
            if name not in ("ts_ns", "frame_bytes"):
                getattr(cols, name)[i] = 0
        cols.kind[i] = Kind.MALFORMED
        cols.flags[i] = Flag.TRUNCATED if len(frame) < orig_len else Flag(0)
        return
    bth = f.roce.bth
    info = OPCODE_TABLE[bth.opcode]
    cols.kind[i] = Kind.ROCE
    cols.opcode[i] = int(bth.opcode)
    cols.dest_qp[i] = bth.dest_qp
    cols.psn[i] = bth.psn
    if bth.fecn:
        flags |= Flag.FECN
    if bth.becn:
        flags |= Flag.BECN
    if bth.ack_req:
        flags |= Flag.ACK_REQ
    aeth = f.roce.aeth
    if aeth is not None:
        cols.syndrome[i] = aeth.syndrome
        cols.msn[i] = aeth.msn
    reth = f.roce.reth
    if reth is not None:
        cols.reth_len[i] = reth.dma_length
    if info is not None:
        cols.payload_bytes[i] = (udp.length - 8 - 12 - info.header_bytes - bth.pad_count - 4)
    if verify_icrc and f.icrc is not None:
        flags |= Flag.ICRC_CHECKED
        if f.icrc_ok():
            flags |= Flag.ICRC_OK
    cols.flags[i] = flags


def extract_reference(frames: Sequence[tuple[bytes | memoryview, int, int]], ts_ns: Any = None,
                      *, verify_icrc: bool = True) -> PacketColumns:
    """Columns for ``frames`` given as (captured bytes, linktype, orig_len)."""
    cols = PacketColumns.empty(len(frames))
    for i, (frame, linktype, orig_len) in enumerate(frames):
        extract_one(cols, i, frame, linktype, orig_len, verify_icrc)
    if ts_ns is not None:
        cols.ts_ns[:] = ts_ns
    return cols


_CTYPES = {np.int64: "int64_t *", np.uint64: "uint64_t *", np.uint32: "uint32_t *",
           np.uint16: "uint16_t *", np.uint8: "uint8_t *"}


def c_columns(cols: PacketColumns) -> tuple[Any, list[Any]]:
    """A ``netio_analyze_columns`` pointing into ``cols`` (keep the list alive with it)."""
    ffi = native.ffi
    out = ffi.new("netio_analyze_columns *")
    keep = []
    for name, dt in (*COLUMN_DTYPES, *((n, d) for n, d, _ in WIDE_COLUMNS)):
        ptr = ffi.cast(_CTYPES[dt], ffi.from_buffer(getattr(cols, name)))
        keep.append(ptr)
        setattr(out, name, ptr)
    return out, keep


def extract_native(buffer: Any, scan: ScanColumns, *, verify_icrc: bool = True) -> PacketColumns:
    """Columns for the records of ``scan`` whose frames lie in ``buffer`` (C extractor)."""
    if not native.AVAILABLE:
        raise RuntimeError("netio._native is not built (run tools/rebuild)")
    ffi, lib = native.ffi, native.lib
    n = len(scan)
    cols = PacketColumns.empty(n)
    cols.ts_ns[:] = scan.ts_ns
    if n == 0:
        return cols
    out, _keep = c_columns(cols)
    off = np.ascontiguousarray(scan.frame_offset, dtype=np.int64)
    cap = np.ascontiguousarray(scan.caplen, dtype=np.uint32)
    orig = np.ascontiguousarray(scan.orig_len, dtype=np.uint32)
    lt = np.ascontiguousarray(scan.linktype, dtype=np.uint16)
    lib.netio_analyze_extract(
        ffi.from_buffer("uint8_t[]", buffer), len(buffer),
        ffi.cast("int64_t *", ffi.from_buffer(off)), ffi.cast("uint32_t *", ffi.from_buffer(cap)),
        ffi.cast("uint32_t *", ffi.from_buffer(orig)), ffi.cast("uint16_t *", ffi.from_buffer(lt)),
        n, 1 if verify_icrc else 0, out)
    return cols


def extract_scan_reference(buffer: Any, scan: ScanColumns, *,
                           verify_icrc: bool = True) -> PacketColumns:
    """The reference twin of ``extract_native`` (same inputs)."""
    mv = memoryview(buffer)
    frames = [(mv[o:o + c], int(lt), int(ol)) for o, c, lt, ol in
              zip(scan.frame_offset.tolist(), scan.caplen.tolist(), scan.linktype.tolist(),
                  scan.orig_len.tolist(), strict=True)]
    return extract_reference(frames, scan.ts_ns, verify_icrc=verify_icrc)


@dataclass(slots=True)
class CaptureChunks:
    """Iterates a capture as ``PacketColumns`` chunks; records damage as warnings."""

    path: str
    native_path: bool
    chunk_records: int = CHUNK_RECORDS
    verify_icrc: bool = True
    warnings: tuple[str, ...] = ()
    records: int = 0
    file_bytes: int = 0
    bytes_done: int = 0
    #: Records of each link type netio does not read (decoded as malformed).
    unsupported: dict[int, int] = field(default_factory=dict)

    def __iter__(self) -> Iterator[PacketColumns]:
        import warnings as _w

        with _w.catch_warnings(record=True) as caught:
            _w.simplefilter("always", CaptureWarning)
            scanner = CaptureScanner(self.path, native_scan=self.native_path and
                                     native.AVAILABLE)
            try:
                self.file_bytes = len(scanner.buffer)
                for scan in scanner.chunks(self.chunk_records):
                    count_unsupported(scan.linktype, self.unsupported)
                    if self.native_path and native.AVAILABLE:
                        cols = extract_native(scanner.buffer, scan,
                                              verify_icrc=self.verify_icrc)
                    else:
                        cols = extract_scan_reference(scanner.buffer, scan,
                                                      verify_icrc=self.verify_icrc)
                    self.records += len(cols)
                    self.bytes_done = scanner.state.offset
                    yield cols
                    _release(scanner.buffer, self.bytes_done)
            finally:
                scanner.close()
                self.warnings = tuple(str(w.message) for w in caught
                                      if issubclass(w.category, CaptureWarning))


def count_unsupported(linktypes: npt.NDArray[np.uint16], into: dict[int, int]) -> None:
    """Add the records of link types netio does not read to ``into`` (per link type)."""
    bad = ~np.isin(linktypes, _SUPPORTED)
    if bad.any():
        values, counts = np.unique(linktypes[bad], return_counts=True)
        for lt, n in zip(values.tolist(), counts.tolist(), strict=True):
            into[lt] = into.get(lt, 0) + n


_SUPPORTED = np.array(sorted(SUPPORTED_LINKTYPES), np.uint16)


def _release(buffer: Any, upto: int) -> None:
    """Drop the already-analysed pages of a mapped capture from this process's RSS.

    The columns are copies, so nothing points into those pages any more; they
    stay in the page cache. Keeps resident memory bounded by the chunk size.
    """
    if isinstance(buffer, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        end = upto - upto % mmap.PAGESIZE
        if end > 0:
            buffer.madvise(mmap.MADV_DONTNEED, 0, end)


class FlowIndex:
    """Dense ids for RoCE flows (``FlowKey``), in order of first appearance."""

    def __init__(self, *, use_native: bool | None = None) -> None:
        self.native = native.AVAILABLE if use_native is None else use_native
        self.keys: list[FlowKey] = []
        self._ids: dict[FlowKey, int] = {}
        self._table: Any = None
        if self.native:
            self._table = native.ffi.gc(native.lib.netio_flow_table_new(),
                                        native.lib.netio_flow_table_free)

    def __len__(self) -> int:
        return len(self.keys)

    def ids(self, cols: PacketColumns) -> npt.NDArray[np.int32]:
        """Flow id of every row (-1 for non-RoCE rows)."""
        n = len(cols)
        out = np.full(n, -1, dtype=np.int32)
        if n == 0:
            return out
        if self.native:
            ffi, lib = native.ffi, native.lib
            before = lib.netio_flow_table_len(self._table)
            ccols, _keep = c_columns(cols)
            if lib.netio_flow_ids(self._table, ccols, n,
                                  ffi.cast("int32_t *", ffi.from_buffer(out))) < 0:
                raise MemoryError("flow table allocation failed")
            after = lib.netio_flow_table_len(self._table)
            if after > before:
                buf = np.empty((after - before, 5), dtype=np.uint64)
                lib.netio_flow_table_keys(self._table, before, after,
                                          ffi.cast("uint64_t *", ffi.from_buffer(buf)))
                self.keys.extend(key_of_words(*w) for w in buf.tolist())
            return out
        roce = np.nonzero(cols.kind == Kind.ROCE)[0]
        ids = self._ids
        for i, key in zip(roce.tolist(), flow_keys(cols, roce), strict=True):
            fid = ids.get(key)
            if fid is None:
                fid = ids[key] = len(self.keys)
                self.keys.append(key)
            out[i] = fid
        return out


__all__ = ["CHUNK_RECORDS", "CaptureChunks", "CaptureError", "FlowIndex", "c_columns",
           "extract_native", "extract_one", "extract_reference", "extract_scan_reference"]
