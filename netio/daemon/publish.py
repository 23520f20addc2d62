"""Snapshots and their exposition.

Each poll publishes a :class:`Snapshot` (collectors that finish together share
one).  What is derived from it (derived gauges, watchdog and alarm series, the
fabric profile) is computed only when a scrape or ``/api/profile`` first asks,
and its exposition is rendered once per snapshot (in a worker thread) and
shared by all concurrent scrapers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping

from netio.daemon.exposition import Renderer
from netio.daemon.watchdog import StormKey, StormState
from netio.telemetry import derived
from netio.telemetry import metrics as m
from netio.telemetry.profile import FabricProfile, empty_profile
from netio.telemetry.sample import Collection, Sample

# Collectors on the same interval finish within milliseconds of each other:
# one snapshot for all of them.
PUBLISH_DELAY_S = 0.05

Queues = list[tuple[StormKey, StormState, int, int, float | None, int]]


class Snapshot:
    """What scrapes and ``/api/profile`` read: the latest collections, and what is
    derived from them (derived gauges, watchdog and alarm series, the fabric
    profile).  The derived part is computed when first asked for, once per
    snapshot: most polls are never scraped."""

    __slots__ = ("_derive", "_derived", "_lock", "collections", "version")

    def __init__(self, version: int, collections: Mapping[str, Collection],
                 derive: Callable[[], tuple[tuple[Sample, ...], FabricProfile]]) -> None:
        self.version = version
        self.collections = collections
        self._derive = derive
        self._derived: tuple[tuple[Sample, ...], FabricProfile] | None = None
        self._lock = threading.Lock()  # a render thread and the loop may ask at once

    def _get(self) -> tuple[tuple[Sample, ...], FabricProfile]:
        with self._lock:
            if self._derived is None:
                self._derived = self._derive()
            return self._derived

    @property
    def extra(self) -> tuple[Sample, ...]:
        return self._get()[0]

    @property
    def profile(self) -> FabricProfile:
        return self._get()[1]


def derive_snapshot(collections: Mapping[str, Collection], rates: derived.RatesSnapshot,
                    queues: Queues, alarms: list[tuple[str, bool]], host: str,
                    now_unix_s: float) -> tuple[tuple[Sample, ...], FabricProfile]:
    storms = {(k.device, k.direction, k.priority): since / 1e9
              for k, st, _d, _r, _l, since in queues if st is StormState.STORMED}
    dsamples, profile = derived.build(collections, rates, storms, host, now_unix_s)
    extra: list[Sample] = list(dsamples)
    for k, st, det, res, last, _since in queues:
        lv = (k.device, k.direction, str(k.priority))
        extra.append(Sample(m.WD_STORM_ACTIVE, lv, float(st is StormState.STORMED)))
        extra.append(Sample(m.WD_DETECTED, lv, float(det)))
        extra.append(Sample(m.WD_RESTORED, lv, float(res)))
        if last is not None:
            extra.append(Sample(m.WD_LAST_DURATION, lv, last))
    for name, firing in alarms:
        extra.append(Sample(m.ALARM_FIRING, (name,), float(firing)))
    return tuple(extra), profile


class Publisher:
    """Holds the current snapshot; publishes a new one soon after asked (once for
    all collectors that finish together) and renders each once per format."""

    def __init__(self, host: str) -> None:
        self.host = host
        first = ((), empty_profile(host, time.time()))
        self.snapshot = Snapshot(0, {}, lambda: first)
        self._version = 0
        self._handle: asyncio.TimerHandle | None = None
        self._render_cache: dict[bool, tuple[int, bytes]] = {}
        self._render_lock: asyncio.Lock | None = None
        # one per part: each bounds its remembered series by what it renders
        self._renderer = Renderer()
        self._health_renderer = Renderer()
        self.render_duration_s = 0.0

    def publish(self, collections: Mapping[str, Collection],
                derive: Callable[[], tuple[tuple[Sample, ...], FabricProfile]]) -> Snapshot:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._version += 1
        self.snapshot = Snapshot(self._version, collections, derive)
        return self.snapshot

    def request(self, publish: Callable[[], object]) -> None:
        """Call ``publish`` soon (on a loop), once for all requests until then; or now."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            publish()
            return
        if self._handle is None:
            self._handle = loop.call_later(PUBLISH_DELAY_S, publish)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    async def render_body(self, openmetrics: bool, health: Callable[[], list[Sample]]
                          ) -> bytes:
        """The exposition: the snapshot's part (cached), then ``health()``'s series
        (the daemon's own, made fresh on every scrape)."""
        snap = self.snapshot
        cached = self._render_cache.get(openmetrics)
        if cached is None or cached[0] != snap.version:
            if self._render_lock is None:
                self._render_lock = asyncio.Lock()
            async with self._render_lock:
                cached = self._render_cache.get(openmetrics)
                if cached is None or cached[0] != snap.version:
                    def work() -> bytes:
                        t0 = time.perf_counter()
                        groups = [c.samples for c in snap.collections.values()]
                        groups.append(snap.extra)
                        body = self._renderer.render_all(groups, openmetrics=openmetrics,
                                                         eof=False)
                        self.render_duration_s = time.perf_counter() - t0
                        return body
                    body = await asyncio.to_thread(work)
                    cached = (snap.version, body)
                    self._render_cache[openmetrics] = cached
        return cached[1] + self._health_renderer.render(health(), openmetrics=openmetrics)
