"""netio: RDMA/RoCEv2 network IO, capture analysis, telemetry and performance models."""

from netio.errors import (
    CaptureError,
    CaptureWarning,
    ConfigError,
    DecodeError,
    DriverSocketError,
    EncodeError,
    ExchangeError,
    NetioError,
    RegistrationError,
    RoceError,
    ScenarioError,
)

__version__ = "0.1.0"

__all__ = [
    "CaptureError",
    "CaptureWarning",
    "ConfigError",
    "DecodeError",
    "DriverSocketError",
    "EncodeError",
    "ExchangeError",
    "NetioError",
    "RegistrationError",
    "RoceError",
    "ScenarioError",
    "__version__",
]
