"""Compressed captures (gzip, xz, zstd), read as a stream as tshark reads them.

The compression is recognised by the file's first bytes (its magic number),
not by its name: gzip ``1f 8b`` (RFC 1952 §2.3.1), xz ``fd 37 7a 58 5a 00``
(the .xz file format §2.1.1.1), zstd frame ``28 b5 2f fd`` (RFC 8878 §3.1.1).
``open_decompressed`` returns a binary file object that decompresses as it is
read, so memory stays bounded by the reader's window whatever the size of
the capture. gzip and xz come with Python; zstd needs the ``zstandard``
package (the ``zstd`` extra: ``pip install netio[zstd]``).
"""

from __future__ import annotations

import gzip
import lzma
import os
import warnings
import zlib
from enum import IntEnum
from typing import BinaryIO, cast

from netio.errors import CaptureError, CaptureWarning


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    XZ = 2
    ZSTD = 3


_MAGIC: tuple[tuple[bytes, Compression], ...] = (
    (b"\x1f\x8b", Compression.GZIP),
    (b"\xfd7zXZ\x00", Compression.XZ),
    (b"\x28\xb5\x2f\xfd", Compression.ZSTD),
)

#: File name endings of compressed captures (to find them in a directory).
COMPRESSED_SUFFIXES: tuple[str, ...] = (".gz", ".xz", ".zst")


def sniff(head: bytes) -> Compression:
    """The compression of a file starting with ``head`` (at least 6 bytes to tell all)."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    return Compression.NONE


def compression_of(path: str | os.PathLike[str]) -> Compression:
    try:
        with open(path, "rb") as f:
            return sniff(f.read(6))
    except OSError as error:
        raise CaptureError(f"cannot open: {error.strerror}", path=os.fspath(path)) from error


def decompression_errors() -> tuple[type[BaseException], ...]:
    """What the decompressors raise on damaged or truncated input (readers turn it into
    damage: the records before it are kept, a warning says where reading stopped)."""
    errors: list[type[BaseException]] = [OSError, EOFError, lzma.LZMAError, zlib.error]
    try:
        import zstandard
        errors.append(zstandard.ZstdError)
    except ImportError:
        pass
    return tuple(errors)


def open_decompressed(path: str | os.PathLike[str]) -> BinaryIO | None:
    """A stream of the decompressed capture, or None when the file is not compressed.

    Raises ``CaptureError`` when it cannot be opened, or is zstd-compressed and the
    ``zstandard`` package is missing."""
    p = os.fspath(path)
    kind = compression_of(p)
    if kind is Compression.NONE:
        return None
    if kind is Compression.GZIP:
        return cast(BinaryIO, gzip.open(p, "rb"))
    if kind is Compression.XZ:
        return cast(BinaryIO, lzma.open(p, "rb"))
    try:
        import zstandard
    except ImportError:
        raise CaptureError("the capture is zstd-compressed; reading it needs the zstandard "
                           "package (pip install 'netio[zstd]')", path=p) from None
    raw = open(p, "rb")  # noqa: SIM115 (the stream reader closes it)
    stream: BinaryIO = zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
    return stream


def read_all(stream: BinaryIO, path: str) -> tuple[bytes, str | None]:
    """The whole decompressed stream (for the mapped, reference path), and why it ended
    early (None when it did not): the bytes before damage are kept."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CaptureWarning)
        tolerant = TolerantStream(stream, path)
        try:
            data = tolerant.read()
        finally:
            tolerant.close()
    return data, (str(caught[0].message) if caught else None)


class TolerantStream:
    """A decompressing stream whose damage reads as the end of the data, with a
    ``CaptureWarning`` saying where (the streaming reader then reports the cut record
    as it does for a truncated file)."""

    def __init__(self, stream: BinaryIO, path: str) -> None:
        self._stream = stream
        self._path = path
        self._done = 0
        self._errors = decompression_errors()
        self._failed = False
        self.name = path

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all with -1); short only at the end or at damage, which
        keeps every byte decompressed before it (``read1`` steps: a buffered ``read``
        would drop what it had gathered when the decompressor fails)."""
        parts: list[bytes] = []
        want = n if n >= 0 else 1 << 62
        while want > 0 and not self._failed:
            try:
                data = self._stream.read1(min(want, 1 << 20))  # type: ignore[attr-defined]
            except self._errors as error:
                self._failed = True
                warnings.warn(CaptureWarning(f"{self._path}: decompression failed after "
                                             f"{self._done} bytes: {error}"), stacklevel=2)
                break
            if not data:
                break
            parts.append(data)
            self._done += len(data)
            want -= len(data)
        return b"".join(parts)

    def close(self) -> None:
        self._stream.close()

    @property
    def closed(self) -> bool:
        return bool(self._stream.closed)


def strip_compression_suffix(name: str) -> str:
    """``a.pcap.gz`` → ``a.pcap``; other names unchanged."""
    for suffix in COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


__all__ = [
    "COMPRESSED_SUFFIXES",
    "Compression",
    "TolerantStream",
    "compression_of",
    "decompression_errors",
    "open_decompressed",
    "read_all",
    "sniff",
    "strip_compression_suffix",
]
