"""The soft RoCE backend: netio's sans-I/O RoCEv2 engine on real UDP sockets.

``SoftRoceDriver`` (driver.py) runs a ``netio.roce.RoceEngine`` on the asyncio
loop; sockets.py holds the socket set-up (predictable IPv4 header on send, raw
or UDP receive) and rx_icrc.py the receive-side ICRC checks. Socket failures
raise :class:`netio.errors.DriverSocketError`.
"""

from netio.backends.soft.driver import DriverConfig, DriverStats, SoftRoceDriver
from netio.backends.soft.rx_icrc import HeaderlessVerifier
from netio.backends.soft.sockets import ROCEV2_UDP_PORT, RxMode

__all__ = [
    "ROCEV2_UDP_PORT",
    "DriverConfig",
    "DriverStats",
    "HeaderlessVerifier",
    "RxMode",
    "SoftRoceDriver",
]
