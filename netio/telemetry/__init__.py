"""Telemetry collectors: host NICs, RDMA ports, PFC configuration and switches.

Every collector is a small class with an injectable root path or client and one
method, ``collect()`` (or ``collect_async()`` for network collectors), that
returns a :class:`netio.telemetry.sample.Collection`: samples of the metrics
declared in :mod:`netio.telemetry.metrics` plus the faults met on the way.
"""
