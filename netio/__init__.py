"""netio: RDMA/RoCEv2 network IO, capture analysis, telemetry and performance models.

The IO API::

    import netio
    with netio.open("soft") as ctx:                      # or "verbs", "tcp", "auto"
        buf = bytearray(4096)
        region = ctx.register(buf)                       # in place, no copy
        ep = ctx.connect("10.0.0.2:7471").wait()         # or: ep = await ctx.connect(...)
        remote = netio.RemoteRegion.from_descriptor(descriptor_from_peer)
        ep.write(region[0:4096], remote[0:4096]).wait()  # RDMA WRITE; completion

Every operation returns a :class:`Pending` handle: ``await`` it, ``.wait()`` for it, or
poll it; :meth:`Endpoint.post` posts a batch. Errors are :mod:`netio.errors` classes
with a ``hint``.
"""

from netio.api.context import BACKENDS, Context, Listener, open
from netio.api.endpoint import Endpoint, Path, WorkRequest
from netio.api.handles import Pending, gather
from netio.api.region import LocalSlice, Region, RemoteRegion, RemoteSlice
from netio.api.types import Access, Completion, WcFlags, WcOpcode, WcStatus, WrOpcode
from netio.backends.base import Candidate, Description
from netio.errors import (
    BackendUnavailable,
    CaptureError,
    CaptureWarning,
    ClosedError,
    ConfigError,
    ConnectFailed,
    DecodeError,
    DeviceNotFound,
    DriverSocketError,
    EncodeError,
    ExchangeError,
    ExchangeMismatch,
    FlushedError,
    IoError,
    LocalError,
    NetioError,
    OperationError,
    PeerDisconnected,
    RegionBusy,
    RegistrationError,
    RegistrationLimit,
    RemoteAccessError,
    RemoteInvalidRequest,
    RemoteOperationError,
    RetryExceeded,
    RnrRetryExceeded,
    RoceError,
    ScenarioError,
    Timeout,
)

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "Access",
    "BackendUnavailable",
    "Candidate",
    "CaptureError",
    "CaptureWarning",
    "ClosedError",
    "Completion",
    "ConfigError",
    "ConnectFailed",
    "Context",
    "DecodeError",
    "Description",
    "DeviceNotFound",
    "DriverSocketError",
    "EncodeError",
    "Endpoint",
    "ExchangeError",
    "ExchangeMismatch",
    "FlushedError",
    "IoError",
    "Listener",
    "LocalError",
    "LocalSlice",
    "NetioError",
    "OperationError",
    "Path",
    "PeerDisconnected",
    "Pending",
    "Region",
    "RegionBusy",
    "RegistrationError",
    "RegistrationLimit",
    "RemoteAccessError",
    "RemoteInvalidRequest",
    "RemoteOperationError",
    "RemoteRegion",
    "RemoteSlice",
    "RetryExceeded",
    "RnrRetryExceeded",
    "RoceError",
    "ScenarioError",
    "Timeout",
    "WcFlags",
    "WcOpcode",
    "WcStatus",
    "WorkRequest",
    "WrOpcode",
    "__version__",
    "gather",
    "open",
]
