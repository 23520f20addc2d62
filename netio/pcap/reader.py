"""``open_capture``: the one streaming capture reader (pcap and pcapng).

Reads with plain buffered reads, so memory stays bounded whatever the size of
the file, and works on pipes. Damage after the file header stops reading: in
the default mode a ``CaptureWarning`` is issued (and kept in ``warnings``,
with the structured error in ``damage``) after the last good record; with
``strict=True`` the ``CaptureError`` is raised there instead. A file that is
no capture at all raises ``CaptureError`` from ``open_capture`` in both modes.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from types import TracebackType
from typing import BinaryIO, Self, cast

from netio.errors import CaptureError, CaptureWarning
from netio.pcap import pcap, pcapng
from netio.pcap.compressed import TolerantStream, open_decompressed
from netio.pcap.format import CaptureFormat
from netio.pcap.pcap import PcapHeader
from netio.pcap.record import Record
from netio.pcap.source import ByteSource

CaptureSource = str | os.PathLike[str] | BinaryIO


class CaptureReader:
    """Iterator of ``Record`` over one capture file; also a context manager.

    ``format`` is the container format; ``pcap_header`` the classic pcap file
    header (None for pcapng).
    """

    def __init__(self, file: BinaryIO, *, path: str | None, strict: bool, owns_file: bool) -> None:
        self.path = path
        self.strict = strict
        self.warnings: list[CaptureWarning] = []
        self.damage: CaptureError | None = None
        self._file = file
        self._owns_file = owns_file
        src = ByteSource(file)
        head = src.peek(PcapHeader.SIZE_BYTES)
        if not head:
            raise CaptureError("empty file, not a capture", path=path, record_index=0,
                               byte_offset=0)
        if pcapng.is_pcapng_magic(head):
            self.format = CaptureFormat.PCAPNG
            self.pcap_header: PcapHeader | None = None
            records = pcapng.iter_records(src, path=path)
        else:
            self.pcap_header = PcapHeader.decode(head, path=path)
            self.format = CaptureFormat.PCAP
            src.read(PcapHeader.SIZE_BYTES)
            records = pcap.iter_records(src, self.pcap_header, path=path)
        self._records = self._guard(records)

    def _guard(self, records: Iterator[Record]) -> Iterator[Record]:
        try:
            yield from records
        except CaptureError as error:
            self.damage = error
            if self.strict:
                raise
            warning = CaptureWarning(str(error))
            self.warnings.append(warning)
            warnings.warn(warning, stacklevel=3)

    def __iter__(self) -> Iterator[Record]:
        return self

    def __next__(self) -> Record:
        return next(self._records)

    def close(self) -> None:
        if self._owns_file:
            self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def open_capture(source: CaptureSource, *, strict: bool = False) -> CaptureReader:
    """Open a pcap or pcapng file (path or binary file object) for streaming reads.

    Raises ``CaptureError`` when the file cannot be opened or is no capture.
    """
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        stream = open_decompressed(path)  # gzip/xz/zstd: decompressed as it is read
        try:
            file: BinaryIO = cast(BinaryIO, TolerantStream(stream, path)) if stream else \
                open(path, "rb")  # noqa: SIM115 (the reader owns and closes it)
        except OSError as error:
            raise CaptureError(f"cannot open: {error.strerror}", path=path) from error
        try:
            return CaptureReader(file, path=path, strict=strict, owns_file=True)
        except BaseException:
            file.close()
            raise
    name = getattr(source, "name", None)
    return CaptureReader(source, path=name if isinstance(name, str) else None, strict=strict,
                         owns_file=False)
