"""The one netio error hierarchy.

Every error that netio raises on bad input derives from NetioError, and says
what was wrong and where (header and byte offset, or record and file offset).
"""

from __future__ import annotations


class NetioError(Exception):
    """Base of every error netio raises on purpose."""


class DecodeError(NetioError, ValueError):
    """A header was short or inconsistent.

    ``header`` names the header (for example ``"BTH"``), ``offset`` is the
    byte offset of that header in the buffer being decoded.
    """

    def __init__(self, header: str, offset: int, reason: str) -> None:
        self.header = header
        self.offset = offset
        self.reason = reason
        super().__init__(f"{header} at offset {offset}: {reason}")


class EncodeError(NetioError, ValueError):
    """A header field does not fit its wire format (for example a 25-bit PSN)."""

    def __init__(self, header: str, reason: str) -> None:
        self.header = header
        self.reason = reason
        super().__init__(f"{header}: {reason}")


class CaptureError(NetioError):
    """A capture file is unreadable or damaged at a known place.

    ``record_index`` is the 0-based index of the record (packet or block) where
    reading failed, ``byte_offset`` its offset in the file; ``path`` the file.
    """

    def __init__(
        self, reason: str, *, path: str | None = None, record_index: int | None = None,
        byte_offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.path = path
        self.record_index = record_index
        self.byte_offset = byte_offset
        where = []
        if path is not None:
            where.append(path)
        if record_index is not None:
            where.append(f"record {record_index}")
        if byte_offset is not None:
            where.append(f"byte offset {byte_offset}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {reason}" if prefix else reason)


class CaptureWarning(UserWarning):
    """Reading stopped early or skipped damage; the records before it are usable."""
