"""The analyzer's capture input: the native scanner over a reused read() window.

``WindowScanner`` drives ``netio_pcap_scan`` (``native/pcapscan.c``, the one
record walker) over a window of the file that it refills with ``readinto``;
the file header, pcapng SHB/IDB blocks and damage are handled with
``netio.pcap``'s own decoders (``PcapHeader``, ``pcapng.read_block``,
``Walker``, ``Damage``), so it yields the same records and reports the same
damage, in the same words, as ``netio.pcap.scan.CaptureScanner`` (proven in
tests/test_analyze_window.py). Only the way bytes reach memory differs: they
are copied into a buffer small enough to stay in the CPU caches while the
batch is scanned and analysed. Over a mapping of a large capture, page faults,
page-table teardown and the hardware prefetcher stopping at every 4 KiB page
cost more than that copy; and resident memory stays the window, whatever the
capture's size.

A record's frame lies in ``buffer`` at its ``frame_offset`` until the next
``next_batch`` call, which may move or refill the window.
"""

from __future__ import annotations

import io
import os
from types import TracebackType
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from netio import native
from netio.errors import CaptureError, CaptureWarning
from netio.pcap import pcapng
from netio.pcap.format import CaptureFormat, Damage, ScanStatus
from netio.pcap.pcap import PcapHeader
from netio.pcap.scan import ScanColumns
from netio.pcap.source import MemorySource

#: Initial window: a few MiB keep a batch's frames in the L2/L3 caches and make
#: refills rare; it grows only for a record or block larger than itself.
DEFAULT_WINDOW_BYTES = 2 << 20

_NEEDS_MORE = (ScanStatus.TRUNCATED_HEADER, ScanStatus.TRUNCATED_DATA)
_COLUMNS = (("ts_ns", "int64_t[]"), ("frame_offset", "int64_t[]"), ("caplen", "uint32_t[]"),
            ("orig_len", "uint32_t[]"), ("linktype", "uint16_t[]"),
            ("interface_id", "uint32_t[]"))


class WindowScanner:
    """Batches of scanned records of one capture file, read through a window.

    ``next_batch(out)`` fills ``out`` (``ScanColumns``) from its start and
    returns how many records it wrote (0 once ``done``); their frames are at
    ``frame_offset`` in ``buffer`` until the next call. Damage ends the scan
    with a ``CaptureWarning`` in ``warnings`` (``damage`` holds the error), as
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
        try:
            self._file: io.FileIO = io.FileIO(self.path, "rb")
        except OSError as error:
            raise CaptureError(f"cannot open: {error.strerror}", path=self.path) from error
        try:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(self._file.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            self._read_more()
            self._start()
        except BaseException:
            self._file.close()
            raise
        self._walker = pcapng.Walker()
        self._ifaces: Any = None
        self._ifaces_key: tuple[pcapng.Interface, ...] = ()
        self._cbuf = self._ffi.from_buffer("uint8_t[]", self.buffer)

    # ---------------------------------------------------------------- setup
    def _start(self) -> None:
        head = bytes(self.buffer[:min(self.have, PcapHeader.SIZE_BYTES)])
        if not head:
            raise CaptureError("empty file, not a capture", path=self.path, record_index=0,
                               byte_offset=0)
        st = self._state = self._ffi.new("netio_pcap_scan_state *")
        if pcapng.is_pcapng_magic(head):
            self.format = CaptureFormat.PCAPNG
            st.format = CaptureFormat.PCAPNG
            st.offset = 0
        else:
            header = PcapHeader.decode(head, path=self.path)
            self.format = CaptureFormat.PCAP
            st.format = CaptureFormat.PCAP
            st.big_endian = header.big_endian
            st.ts_unit_ns = header.ts_unit_ns
            st.linktype = header.linktype
            st.offset = PcapHeader.SIZE_BYTES
        st.record_index = 0

    def _read_more(self) -> None:
        """Fill the free end of the window from the file (sets ``eof`` at its end)."""
        view = self.buffer.data
        while self.have < len(self.buffer):
            got = self._file.readinto(view[self.have:])
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

    # ----------------------------------------------------------------- scan
    def next_batch(self, out: ScanColumns) -> int:
        """Scan up to ``len(out)`` records into ``out``; 0 once ``done``."""
        ffi, st = self._ffi, self._state
        ptrs = [ffi.from_buffer(ctype, getattr(out, name), require_writable=True)
                for name, ctype in _COLUMNS]
        while not self.done:
            self._sync_interfaces()
            n: int = self._lib.netio_pcap_scan(self._cbuf, self.have, st, len(out), *ptrs)
            status = ScanStatus(st.status)
            if status is ScanStatus.FULL or n:
                return n  # a stop is handled on the next call, which finds it again
            if status is ScanStatus.END:
                if self.eof:
                    self.done = True
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
            self._ifaces = self._ffi.new("netio_pcap_iface[]", max(1, len(key)))
            for slot, iface in zip(self._ifaces, key, strict=False):
                slot.linktype = iface.linktype
                slot.snaplen = iface.snaplen
                slot.ts_mul, slot.ts_div, slot.ts_shift = iface.ts_scale
                slot.tsoffset_s = iface.tsoffset_s
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

    # -------------------------------------------------------------- closing
    def close(self) -> None:
        if self._file.closed:
            return
        self._ffi.release(self._cbuf)
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


__all__ = ["DEFAULT_WINDOW_BYTES", "WindowScanner"]
