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


# -- the IO API (``netio.open``): connections, operations, devices, memory ------------------


class IoError(NetioError):
    """Base of the IO API's errors. ``hint`` names the likely cause and the setting to
    check, with the values in use on both sides where they are known (empty when there
    is nothing to add to the message)."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        self.message = message
        self.hint = hint
        super().__init__(f"{message} ({hint})" if hint else message)


class Timeout(IoError, TimeoutError):
    """A connect, accept, exchange step or wait did not finish in time; ``step`` says
    which."""

    def __init__(self, step: str, timeout_s: float, *, hint: str = "") -> None:
        self.step = step
        self.timeout_s = timeout_s
        super().__init__(f"{step}: no answer within {timeout_s:g} s", hint=hint)


class PeerDisconnected(IoError, ConnectionError):
    """The peer closed the connection or went away (its process ended, its host
    became unreachable)."""


class ConnectFailed(IoError, ConnectionError):
    """A connection could not be set up (refused, unreachable, or the exchange failed);
    ``errno`` is the OS error where there was one."""

    def __init__(self, message: str, *, errno_value: int = 0, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.errno = errno_value  # after OSError's __init__, which resets it


class ExchangeMismatch(IoError):
    """The two sides of a connection cannot work together (protocol version, backend,
    transport, MTU or GID type); the message names both values."""


class DeviceNotFound(IoError):
    """No usable RDMA device, port or GID for the request; the hint says why each
    candidate was rejected and how to get one."""


class BackendUnavailable(IoError):
    """The backend cannot be loaded here (for example pyverbs is not importable)."""


class RegistrationLimit(IoError, MemoryError):
    """Registering memory failed because of a locked-memory limit; the hint names the
    limit (``ulimit -l`` / RLIMIT_MEMLOCK) and how to raise it. ``errno`` is the OS error."""

    def __init__(self, message: str, *, errno_value: int = 0, hint: str = "") -> None:
        self.errno = errno_value
        super().__init__(message, hint=hint)


class RegionBusy(IoError):
    """A memory region with operations in flight cannot be deregistered."""


class ClosedError(IoError):
    """The context, listener or endpoint is closed."""


class OperationError(IoError):
    """A work request completed with an error status. ``status`` is the
    ``ibv_wc_status`` number, ``status_name`` its name, ``wr_id`` the request,
    ``vendor_err`` the device's vendor syndrome (0 where none)."""

    def __init__(self, message: str, *, status: int, status_name: str, wr_id: int = 0,
                 vendor_err: int = 0, hint: str = "") -> None:
        self.status = status
        self.status_name = status_name
        self.wr_id = wr_id
        self.vendor_err = vendor_err
        super().__init__(f"{message} [{status_name} ({status})]", hint=hint)


class RetryExceeded(OperationError):
    """RETRY_EXC_ERR: the peer did not acknowledge within the retry count."""


class RnrRetryExceeded(OperationError):
    """RNR_RETRY_EXC_ERR: the peer had no receive posted for a SEND, every retry."""


class RemoteAccessError(OperationError):
    """REM_ACCESS_ERR: the peer refused a one-sided access (rkey, bounds or access flags)."""


class RemoteInvalidRequest(OperationError):
    """REM_INV_REQ_ERR: the peer found the request invalid (for example a message
    larger than its receive buffer, or a payload that does not match the path MTU)."""


class RemoteOperationError(OperationError):
    """REM_OP_ERR: the peer could not carry the request out."""


class LocalError(OperationError):
    """A local error completion (length, protection, QP operation, access)."""


class FlushedError(OperationError):
    """WR_FLUSH_ERR: the request was flushed because the endpoint entered the error
    state or was closed before it finished."""


class ModelInputError(NetioError, ValueError):
    """A netio-model input (system, model or execution file, or a preset) is invalid:
    an unknown, missing or wrongly typed key, or a value out of range.

    ``key`` is the dotted key (``accelerator.memory_bytes``; empty when the whole file
    is at fault), ``path`` the file or preset name.
    """

    def __init__(self, key: str, reason: str, *, path: str | None = None) -> None:
        self.key = key
        self.reason = reason
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(f"{where}{key}: {reason}" if key else f"{where}{reason}")


class FabricProfileError(ModelInputError):
    """A netio fabric profile (``netio bench --profile``) is invalid; ``key`` and ``path``
    as for ModelInputError."""


class VerbsError(IoError):
    """A verbs call (``ibv_*``, through pyverbs) failed. ``call`` names it, ``errno`` is
    the error number it returned (0 where rdma-core gave none)."""

    def __init__(self, call: str, message: str, *, errno_value: int = 0,
                 hint: str = "") -> None:
        import errno as errno_mod
        import os

        self.call = call
        self.errno = errno_value
        code = (f" [{errno_mod.errorcode.get(errno_value, '?')} ({errno_value}): "
                f"{os.strerror(errno_value)}]" if errno_value > 0 else "")
        super().__init__(f"{call}: {message}{code}", hint=hint)


class ClusterError(NetioError):
    """The analysis cluster (``netio-analyze --dask-scheduler``) cannot be used: Dask is
    not installed, or the scheduler cannot be reached."""
