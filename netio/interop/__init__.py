"""Out-of-band exchanges of the standard RDMA test tools, so that netio can be
the peer of the libibverbs examples (``ibv_rc_pingpong`` and friends) and of
perftest (``ib_write_bw`` ...) running on a kernel RoCE device.

``pingpong``: the libibverbs examples' TCP exchange and test loop.
``perftest``: perftest's TCP exchange (versions, MTU, ``pingpong_dest`` keys,
reports) and its bandwidth tests.
"""

from __future__ import annotations

from netio.errors import NetioError


class ExchangeError(NetioError):
    """The peer of an out-of-band exchange sent something we cannot use, or
    the exchange or the test it sets up failed (``step`` names where)."""

    def __init__(self, step: str, reason: str) -> None:
        self.step = step
        self.reason = reason
        super().__init__(f"{step}: {reason}")


__all__ = ["ExchangeError"]
