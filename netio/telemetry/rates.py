"""Per-second rates of counters, robust to resets and 32-bit wrap.

A counter that goes down either wrapped (a 32-bit counter, such as SNMP
Counter32 or IFLA_CARRIER_CHANGES, passing 2**32) or was reset (driver reload,
device re-created).  A wrap is assumed only for 32-bit counters when the
wrapped increase is less than half the range; otherwise the counter restarted
from zero and the new value is the increase since the reset, as Prometheus'
``rate()`` does.
"""

from __future__ import annotations

from collections.abc import Hashable

_WRAP_32 = 1 << 32


def counter_delta(prev: float, cur: float, width_bits: int) -> float:
    if cur >= prev:
        return cur - prev
    if width_bits == 32 and prev < _WRAP_32:
        wrapped = cur + _WRAP_32 - prev
        if wrapped < _WRAP_32 / 2:
            return wrapped
    return cur


class CounterRates:
    """Remembers the last value of each series and turns the next into a rate."""

    def __init__(self) -> None:
        # (value, ts_ns): a tuple of numbers, which the garbage collector stops tracking
        self._last: dict[Hashable, tuple[float, int]] = {}

    def update(self, key: Hashable, value: float, ts_ns: int, width_bits: int = 64) -> float | None:
        """Record a value; return the per-second rate since the previous one (None at first)."""
        prev = self._last.get(key)
        if prev is not None and ts_ns == prev[1]:
            return None  # the same collection seen twice
        self._last[key] = (value, ts_ns)
        if prev is None or ts_ns < prev[1]:
            return None
        prev_value, prev_ts_ns = prev
        return counter_delta(prev_value, value, width_bits) / ((ts_ns - prev_ts_ns) / 1e9)

    def forget_except(self, keep: set[Hashable]) -> None:
        """Drop series that no longer exist, so a re-created device starts afresh."""
        for k in [k for k in self._last if k not in keep]:
            del self._last[k]
