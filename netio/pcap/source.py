"""Forward-only buffered reads from a capture file, with the absolute file offset.

The streaming readers read through this so memory stays bounded by the chunk
size plus the largest record, whatever the size of the file; the file may be
a pipe (no seeking is needed).
"""

from __future__ import annotations

import mmap
from typing import BinaryIO

#: A capture already in memory: bytes, or the read-only mmap of a file.
Buffer = bytes | bytearray | memoryview | mmap.mmap

#: How much the source reads from the file at a time.
CHUNK_BYTES = 1 << 20


class ByteSource:
    """Reads exact byte counts from a binary file; short reads only at end of file."""

    __slots__ = ("_buf", "_eof", "_file", "_pos", "_start")

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self._buf = b""
        self._pos = 0
        self._start = 0  # file offset of _buf[0]
        self._eof = False

    @property
    def offset(self) -> int:
        """File offset of the next byte ``read`` returns."""
        return self._start + self._pos

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes; fewer only when the file ends first."""
        pos = self._pos
        end = pos + n
        if end <= len(self._buf):
            self._pos = end
            return self._buf[pos:end]
        self._fill(n)
        pos = self._pos
        data = self._buf[pos:pos + n]
        self._pos = pos + len(data)
        return data

    def peek(self, n: int) -> bytes:
        """The next ``n`` bytes (fewer at end of file), without consuming them."""
        if self._pos + n > len(self._buf):
            self._fill(n)
        return self._buf[self._pos:self._pos + n]

    def _fill(self, n: int) -> None:
        rest = self._buf[self._pos:]
        self._start += self._pos
        self._pos = 0
        parts = [rest]
        have = len(rest)
        while have < n and not self._eof:
            data = self._file.read(max(CHUNK_BYTES, n - have))
            if not data:
                self._eof = True
                break
            parts.append(data)
            have += len(data)
        self._buf = b"".join(parts)


class MemorySource:
    """The ``ByteSource`` interface over a buffer already in memory (an mmap)."""

    __slots__ = ("_buf", "_pos")

    def __init__(self, buf: Buffer, offset: int = 0) -> None:
        self._buf = memoryview(buf).cast("B")
        self._pos = offset

    @property
    def offset(self) -> int:
        return self._pos

    def read(self, n: int) -> bytes:
        data = bytes(self._buf[self._pos:self._pos + n])
        self._pos += len(data)
        return data
