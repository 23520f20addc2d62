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


class ConfigError(NetioError, ValueError):
    """A configuration (the netio-daemon TOML file, its web config, an option
    overriding them) is invalid.

    ``key`` is the dotted key (``collectors.netdev.interval_s``, ``--listen``;
    empty when the whole file is at fault), ``path`` the file when there is one.
    """

    def __init__(self, key: str, reason: str, *, path: str | None = None) -> None:
        self.key = key
        self.reason = reason
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(f"{where}{key}: {reason}" if key else f"{where}{reason}")


class ExchangeError(NetioError):
    """The peer of an out-of-band exchange (the libibverbs pingpong examples',
    perftest's) sent something we cannot use, or the exchange or the test it
    sets up failed; ``step`` names where (``"pingpong connect"``, ``"perftest mtu"``)."""

    def __init__(self, step: str, reason: str) -> None:
        self.step = step
        self.reason = reason
        super().__init__(f"{step}: {reason}")


class DriverSocketError(NetioError, OSError):
    """A soft RoCE driver socket could not be created or bound; ``errno`` is the OS error."""

    def __init__(self, what: str, err: OSError) -> None:
        super().__init__(err.errno or 0, f"{what}: {err.strerror or err}")

    def __str__(self) -> str:  # what and why, without OSError's "[Errno N]" prefix
        return str(self.strerror)


class RoceError(NetioError, ValueError):
    """A local verbs call was invalid (bad QP state or transition, bad work request)."""


class RegistrationError(NetioError, ValueError):
    """A local memory registration or scatter/gather entry is invalid."""


class DcbError(NetioError):
    """A DCB netlink request failed or its reply is malformed; ``errno`` is the
    kernel's error (``EOPNOTSUPP`` when the device has no DCB), or ``EBADMSG``."""

    def __init__(self, errno_value: int, reason: str) -> None:
        self.errno = errno_value
        super().__init__(reason)


class EthtoolUnsupported(NetioError):
    """The interface offers no ethtool statistics (lo, bridges, tun)."""


class SnmpError(NetioError):
    """An SNMP agent answered a request with an error (or did not answer)."""


class ScenarioError(NetioError, ValueError):
    """A scenario description (``netio scenario``) is invalid: unknown key, bad value,
    overlapping events."""


class ClusterError(NetioError):
    """The analysis cluster (``netio-analyze --dask-scheduler``) cannot be used: Dask is
    not installed, or the scheduler cannot be reached."""
