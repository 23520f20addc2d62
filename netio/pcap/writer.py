"""``PcapWriter``: writes classic pcap files (µs or ns timestamps, little-endian)."""

from __future__ import annotations

import os
import struct
from types import TracebackType
from typing import BinaryIO, Self

from netio.errors import EncodeError
from netio.pcap.format import MAX_CAPLEN_BYTES
from netio.pcap.pcap import PcapHeader
from netio.wire.link import LinkType

_RECORD = struct.Struct("<IIII")
_TS_S_MAX = 0xFFFF_FFFF


class PcapWriter:
    """Write packets to a classic pcap file; a context manager.

    ``snaplen`` (1..MAX_CAPLEN_BYTES) caps the bytes kept of each frame: longer
    frames are truncated, their original length recorded. ``nanosecond`` picks
    the ns magic (0xA1B23C4D) over µs (timestamps are then floored to µs).
    A path is created (or truncated) and closed by the writer; a file object
    is written to from its current position and left open.
    """

    def __init__(self, target: str | os.PathLike[str] | BinaryIO,
                 linktype: int = LinkType.ETHERNET, snaplen: int = MAX_CAPLEN_BYTES,
                 nanosecond: bool = True) -> None:
        if not 1 <= snaplen <= MAX_CAPLEN_BYTES:
            raise EncodeError("pcap header", f"snaplen {snaplen} not in 1..{MAX_CAPLEN_BYTES}")
        if not 0 <= linktype <= 0xFFFF:
            raise EncodeError("pcap header", f"linktype {linktype} not in 0..65535")
        self.linktype = int(linktype)
        self.snaplen = snaplen
        self.nanosecond = nanosecond
        self.records_written = 0
        self._ts_unit_ns = 1 if nanosecond else 1000
        self._frac_per_s = 1_000_000_000 // self._ts_unit_ns
        if isinstance(target, str | os.PathLike):
            self._file: BinaryIO = open(target, "wb")  # noqa: SIM115 (closed in close())
            self._owns_file = True
        else:
            self._file = target
            self._owns_file = False
        header = PcapHeader(big_endian=False, nanosecond=nanosecond, snaplen=snaplen,
                            linktype=self.linktype)
        self._file.write(header.encode())

    def write(self, ts_ns: int, frame: bytes | bytearray | memoryview,
              orig_len: int | None = None) -> None:
        """Append one packet captured at ``ts_ns`` (ns since the epoch, >= 0).

        ``orig_len`` is the length on the wire; it defaults to ``len(frame)`` and
        must not be smaller.
        """
        if not 0 <= ts_ns <= (_TS_S_MAX + 1) * 1_000_000_000 - 1:
            raise EncodeError("pcap record", f"ts_ns {ts_ns} outside the pcap range (1970..2106)")
        caplen = len(frame)
        if orig_len is None:
            orig_len = caplen
        elif not caplen <= orig_len <= 0xFFFF_FFFF:
            raise EncodeError("pcap record",
                              f"orig_len {orig_len} not in {caplen} (captured)..4294967295")
        if caplen > self.snaplen:
            frame = memoryview(frame)[:self.snaplen]
            caplen = self.snaplen
        ts_s, frac = divmod(ts_ns // self._ts_unit_ns, self._frac_per_s)
        self._file.write(_RECORD.pack(ts_s, frac, caplen, orig_len))
        self._file.write(frame)
        self.records_written += 1

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if self._owns_file:
            self._file.close()
        else:
            self._file.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
