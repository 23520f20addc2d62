"""Out-of-band exchanges of the standard RDMA test tools, so that netio can be
the peer of the libibverbs examples (``ibv_rc_pingpong`` and friends) and of
perftest (``ib_write_bw`` ...) running on a kernel RoCE device.

``pingpong``: the libibverbs examples' TCP exchange and test loop.
``perftest``: perftest's TCP exchange (versions, MTU, ``pingpong_dest`` keys,
reports) and its bandwidth tests.
``oob``: the TCP connection both exchanges run on, every step with a deadline.
``backend``: how the tools open their netio context (soft, verbs or tcp).

Both tools are users of the IO API (:func:`netio.open`, ``ctx.endpoint`` and
``Endpoint.connect_to`` with the addresses their own exchanges carry). They raise
:class:`netio.errors.ExchangeError` when the exchange or the test fails.
"""
