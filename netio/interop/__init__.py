"""Out-of-band exchanges of the standard RDMA test tools, so that netio can be
the peer of the libibverbs examples (``ibv_rc_pingpong`` and friends) and of
perftest (``ib_write_bw`` ...) running on a kernel RoCE device.

``pingpong``: the libibverbs examples' TCP exchange and test loop.
``perftest``: perftest's TCP exchange (versions, MTU, ``pingpong_dest`` keys,
reports) and its bandwidth tests.

Both raise :class:`netio.errors.ExchangeError` when the exchange or the test fails.
"""
