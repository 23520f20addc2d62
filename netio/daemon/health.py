"""Collector health: runs, faults, staleness, and what ``/healthz`` and ``/livez`` say.

* A run is *successful* when it returned a collection without faults; only a
  successful run moves ``last_success_unix_s``
  (``netio_collector_last_success_timestamp_seconds``), so
  ``time() - netio_collector_last_success_timestamp_seconds`` grows for a dead
  switch, a hung reader or a collector that faults on every poll.
* A collector is *fresh* when its last success is at most
  :func:`stale_after_s` old (three intervals, or one interval plus the
  collector timeout when that is longer).
* Readiness (``/healthz``, HTTP 200 or 503): ready when at least one
  configured collector is fresh.  ``status`` is ``ok`` (every collector fresh
  and up), ``degraded`` (ready, but some collector is not), ``starting`` (503:
  nothing has succeeded yet, within the first stale bound after start) or
  ``unhealthy`` (503: no collector is configured, or none is fresh).
* Liveness (``/livez``, 200 or 503): the event loop answers and every
  collector's scheduling task is running.  An orchestrator restarts on
  liveness and takes out of rotation on readiness.

Collectors that a reload removes are forgotten: their series disappear.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from netio.daemon import eventlog
from netio.telemetry import metrics as m
from netio.telemetry.sample import Fault, Sample


@dataclass
class CollectorHealth:
    interval_s: float = 1.0
    runs: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    up: bool = False
    duration_s: float = 0.0
    last_success_unix_s: float | None = None
    last_faults: tuple[Fault, ...] = ()


def stale_after_s(interval_s: float, timeout_s: float) -> float:
    """How old a collector's last success may be while it counts as fresh."""
    return max(3.0 * interval_s, interval_s + timeout_s)


class HealthBook:
    def __init__(self) -> None:
        self.collectors: dict[str, CollectorHealth] = {}

    def track(self, jobs: Iterable[tuple[str, float]]) -> None:
        """The collectors now configured, as (name, interval); the others are forgotten."""
        wanted = dict(jobs)
        for name in list(self.collectors):
            if name not in wanted:
                del self.collectors[name]
        for name, interval in wanted.items():
            self.collectors.setdefault(name, CollectorHealth()).interval_s = interval

    def get(self, name: str) -> CollectorHealth:
        return self.collectors.setdefault(name, CollectorHealth())

    def record(self, name: str, faults: tuple[Fault, ...], *,
               success_unix_s: float | None) -> None:
        """The outcome of one run: ``faults`` (logged when they start and when they
        clear), and ``success_unix_s``, the collection's time when the run returned
        one without faults (None otherwise)."""
        h = self.get(name)
        ok = success_unix_s is not None and not faults
        h.up = ok
        if ok:
            h.last_success_unix_s = success_unix_s
        for f in faults:
            h.faults[f.kind] = h.faults.get(f.kind, 0) + 1
        new = {(f.kind, f.source) for f in faults}
        old = {(f.kind, f.source) for f in h.last_faults}
        for f in faults:
            if (f.kind, f.source) not in old:  # log a fault when it starts, not every poll
                eventlog.emit("collector_fault", level=logging.WARNING, collector=name,
                              kind=f.kind, source=f.source, reason=f.reason)
        for kind, source in sorted(old - new):
            eventlog.emit("collector_fault_cleared", collector=name, kind=kind, source=source)
        h.last_faults = faults

    def samples(self) -> list[Sample]:
        out: list[Sample] = []
        for name, h in sorted(self.collectors.items()):
            out.append(Sample(m.COLLECTOR_UP, (name,), float(h.up)))
            out.append(Sample(m.COLLECTOR_DURATION, (name,), h.duration_s))
            out.append(Sample(m.COLLECTOR_RUNS, (name,), float(h.runs)))
            for kind, n in sorted(h.faults.items()):
                out.append(Sample(m.COLLECTOR_FAULTS, (name, kind), float(n)))
            if h.last_success_unix_s is not None:
                out.append(Sample(m.COLLECTOR_LAST_SUCCESS, (name,), h.last_success_unix_s))
        return out

    def readiness(self, names: list[str], timeout_s: float, now_unix_s: float,
                  uptime_s: float) -> tuple[bool, str, dict[str, Any]]:
        """(ready, status, per-collector detail) for the collectors in ``names``."""
        cols: dict[str, Any] = {}
        fresh_any = False
        all_good = True
        grace = 0.0
        for name in names:
            h = self.get(name)
            bound = stale_after_s(h.interval_s, timeout_s)
            grace = max(grace, bound)
            age = None if h.last_success_unix_s is None else now_unix_s - h.last_success_unix_s
            fresh = age is not None and age <= bound
            fresh_any |= fresh
            all_good &= fresh and h.up
            cols[name] = {"up": h.up, "fresh": fresh, "last_success_age_s": age,
                          "stale_after_s": bound,
                          "faults": [f"{f.kind} {f.source}: {f.reason}"
                                     for f in h.last_faults][:20]}
        if fresh_any:
            status = "ok" if all_good else "degraded"
        elif names and uptime_s <= grace and all(
                c["last_success_age_s"] is None for c in cols.values()):
            status = "starting"
        else:
            status = "unhealthy"
        return fresh_any, status, cols
