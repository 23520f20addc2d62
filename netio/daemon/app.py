"""The daemon: collectors on a schedule, a snapshot store, the HTTP API, the
storm watchdog, alarms and triggered captures, and signal handling.

Threads: each blocking collector runs in its own long-lived worker thread, so a
hung collector (a sysfs read stuck in a driver) blocks neither the event loop
nor the other collectors nor shutdown; while it hangs, its later runs are
skipped and reported as ``hung`` faults.  Everything else runs on the loop.

Each poll publishes a :class:`Snapshot` (collectors that finish together share
one).  What is derived from it (derived gauges, watchdog and alarm series, the
fabric profile) is computed only when a scrape or ``/api/profile`` first asks,
and its exposition is rendered once per snapshot (in a worker thread) and
shared by all concurrent scrapers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from netio.daemon import eventlog
from netio.daemon.capture import CaptureManager
from netio.daemon.config import Alarm, Config, check_paths, load_config
from netio.daemon.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, Renderer
from netio.daemon.http import HttpServer, Request, Response
from netio.daemon.watchdog import PfcWatchdog, StormEventKind, StormKey, StormState, WatchdogConfig
from netio.daemon.webconfig import BasicAuth, WebConfig, load_web_config
from netio.errors import ConfigError
from netio.telemetry import derived
from netio.telemetry import metrics as m
from netio.telemetry.profile import FabricProfile, empty_profile, to_json_dict
from netio.telemetry.sample import Collection, Fault, Sample

VERSION = "0.1.0"
# Collectors on the same interval finish within milliseconds of each other:
# one snapshot for all of them.
PUBLISH_DELAY_S = 0.05


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


@dataclass
class _Health:
    runs: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    up: bool = False
    duration_s: float = 0.0
    last_success_unix_s: float | None = None
    last_faults: tuple[Fault, ...] = ()


@dataclass
class Job:
    """One scheduled collector."""

    name: str
    collector: Any  # Collector or AsyncCollector
    interval_s: float
    is_async: bool


def build_jobs(config: Config) -> list[Job]:
    """The collectors the configuration asks for."""
    from netio.telemetry.dcb import DcbCollector, NetlinkDcbClient
    from netio.telemetry.ethtool import EthtoolCollector, EthtoolTextSource, IoctlEthtoolSource
    from netio.telemetry.netdev import NetdevCollector, NetlinkLinkSource, SysfsLinkSource
    from netio.telemetry.rdma import RdmaSysfsCollector

    root = config.daemon.sysfs_root
    live = os.path.realpath(root) == "/sys"
    jobs: list[Job] = []
    if config.netdev.enabled:
        # auto: rtnetlink stats64 on a live host; a fixture tree has no kernel to ask,
        # so it is read as sysfs (also selectable live: about 1/4 of netlink's CPU).
        nsrc = config.netdev.source
        if nsrc == "auto":
            nsrc = "netlink" if live else "sysfs"
        src: Any = NetlinkLinkSource(root) if nsrc == "netlink" \
            else SysfsLinkSource(root, keep_open=config.netdev.keep_files_open,
                                 devices=config.netdev.devices)
        jobs.append(Job("netdev", NetdevCollector(src, devices=config.netdev.devices),
                        config.netdev.interval_s, False))
    wd_poll = config.watchdog.poll_interval_s if config.watchdog.enabled else None
    esrc_kind = config.ethtool.source
    if esrc_kind == "auto":
        # A fixture sysfs tree has no kernel behind it to ask by ioctl.
        esrc_kind = "ioctl" if live else "text" if config.ethtool.text_dir else "off"
    if config.ethtool.enabled and esrc_kind != "off":
        esrc: Any = IoctlEthtoolSource(root) if esrc_kind == "ioctl" \
            else EthtoolTextSource(config.ethtool.text_dir or "")
        interval = config.ethtool.interval_s if wd_poll is None \
            else min(config.ethtool.interval_s, wd_poll)
        jobs.append(Job("ethtool", EthtoolCollector(
            esrc, interfaces=config.ethtool.devices, stats=config.ethtool.stats,
            passthrough_unknown=config.ethtool.passthrough_unknown), interval, False))
    if config.rdma.enabled:
        jobs.append(Job("rdma", RdmaSysfsCollector(
            root, devices=config.rdma.devices,
            passthrough_unknown=config.rdma.passthrough_unknown,
            keep_open=config.rdma.keep_files_open), config.rdma.interval_s, False))
    if config.dcb.enabled and live:
        jobs.append(Job("dcb", DcbCollector(NetlinkDcbClient(root), devices=config.dcb.devices),
                        config.dcb.interval_s, False))
    if config.snmp:
        from netio.telemetry.snmp import SnmpCollector

        for tgt in config.snmp:
            jobs.append(Job(f"snmp:{tgt.name}", SnmpCollector(tgt), tgt.interval_s, True))
    return jobs


class _Worker:
    """The long-lived thread that runs one blocking collector.

    A run is handed over through a queue and its result comes back to the loop
    with ``call_soon_threadsafe``: two wake-ups per poll, where starting a thread
    per run costs a clone, a start handshake and an exit.  While a run hangs the
    daemon hands over nothing else (it reports ``hung``), so a stuck collector
    keeps only its own thread.
    """

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._queue: queue.SimpleQueue[
            tuple[Callable[[], Collection], asyncio.Future[Collection]] | None
        ] = queue.SimpleQueue()
        self._then: Callable[[], object] | None = None
        self._thread = threading.Thread(target=self._main, name=f"netio-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Collection]) -> asyncio.Future[Collection]:
        fut: asyncio.Future[Collection] = self.loop.create_future()
        self._queue.put((fn, fut))
        return fut

    def retire(self, then: Callable[[], object] | None) -> None:
        """End the thread once its current run (if any) has returned, calling
        ``then`` (the collector's ``close``) on the way out."""
        self._then = then
        self._queue.put(None)

    def _main(self) -> None:
        while (item := self._queue.get()) is not None:
            fn, fut = item
            try:
                res = fn()
            except BaseException as e:  # reported as a fault of this collector
                self._settle(fut, None, e)
            else:
                self._settle(fut, res, None)
            del item, fn, fut
        if self._then is not None:
            try:
                self._then()
            except Exception as e:  # a collector that fails to close is only logged
                eventlog.emit("collector_close_failed", level=logging.WARNING,
                              error=f"{type(e).__name__}: {e}")

    def _settle(self, fut: asyncio.Future[Collection], result: Collection | None,
                exc: BaseException | None) -> None:
        def settle() -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)  # type: ignore[arg-type]

        with contextlib.suppress(RuntimeError):  # loop closed during shutdown
            self.loop.call_soon_threadsafe(settle)


async def _result_within(fut: asyncio.Future[Collection], timeout_s: float) -> Collection:
    """``fut``'s result, or TimeoutError after ``timeout_s``; ``fut`` itself is
    left running either way (a worker thread cannot be interrupted).  Cheaper than
    ``wait_for(shield(fut))``, and a cancellation of the caller is never lost."""
    if not fut.done():
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()

        def wake(_f: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        fut.add_done_callback(wake)
        handle = loop.call_later(timeout_s, wake)
        try:
            await waiter
        finally:
            handle.cancel()
            fut.remove_done_callback(wake)
        if not fut.done():
            raise TimeoutError
    return fut.result()


@dataclass
class _AlarmState:
    firing: bool = False


class Daemon:
    def __init__(self, config: Config, *, config_path: str | None = None,
                 jobs_factory: Callable[[Config], list[Job]] = build_jobs,
                 web_config: WebConfig | None = None) -> None:
        self.config = config
        self.config_path = config_path
        self.jobs_factory = jobs_factory
        self.web_config = web_config if web_config is not None else self._load_web(config)
        self.host = config.daemon.hostname or socket.gethostname()
        self.jobs = jobs_factory(config)
        self.health: dict[str, _Health] = {}
        self.collections: dict[str, Collection] = {}
        self.derivation = derived.Derivation(self._alarm_metrics(config))
        self.watchdog = PfcWatchdog(self._wd_config(config))
        self.capture = CaptureManager(config.capture)
        self.alarms: dict[str, _AlarmState] = {}
        self.scrapes: dict[tuple[str, str], int] = {}
        self.reloads = {"success": 0, "failure": 0}
        self.last_reload_ok = True
        self._version = 0
        first = ((), empty_profile(self.host, time.time()))
        self.snapshot = Snapshot(0, {}, lambda: first)
        self._render_cache: dict[bool, tuple[int, bytes]] = {}
        self._render_lock = asyncio.Lock()
        # one per part: each bounds its remembered series by what it renders
        self._renderer = Renderer()
        self._health_renderer = Renderer()
        self.render_duration_s = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: dict[str, asyncio.Future[Collection]] = {}
        self._workers: dict[str, tuple[Job, _Worker]] = {}  # by job name
        self._generation = 0  # of the running jobs; _stop_jobs starts a new one
        self._stop = asyncio.Event()
        self._publish_handle: asyncio.TimerHandle | None = None
        self.server: HttpServer | None = None
        self.started = asyncio.Event()

    # ---- configuration ------------------------------------------------------------------
    @staticmethod
    def _load_web(config: Config) -> WebConfig:
        path = config.daemon.web_config_file
        return load_web_config(path) if path else WebConfig()

    @staticmethod
    def _alarm_metrics(config: Config) -> frozenset[str]:
        return frozenset(a.metric for a in config.alarms if a.rate_above is not None)

    @staticmethod
    def _wd_config(config: Config) -> WatchdogConfig:
        w = config.watchdog
        return WatchdogConfig(w.detection_time_s, w.restoration_time_s, w.poll_interval_s,
                              w.min_paused_ratio)

    async def reload(self) -> bool:
        """Re-read the configuration file; a bad file keeps the running configuration."""
        if self.config_path is None:
            return False
        try:
            new = load_config(self.config_path)
            check_paths(new)
            web = self._load_web(new)
        except ConfigError as e:
            self._reload_failed(str(e))
            return False
        # A new listen address (or TLS settings) is bound before anything else
        # changes, so that a busy port leaves the running daemon as it was.
        if new.daemon.listen != self.config.daemon.listen or web.ssl_context is not None \
                or self.web_config.ssl_context is not None:
            try:
                await self._restart_server(new.daemon.listen, web)
            except OSError as e:
                self._reload_failed(f"daemon.listen: cannot listen on {new.daemon.listen}: "
                                    f"{e.strerror or e}")
                return False
        self._stop_jobs()
        self.config = new
        self.web_config = web
        self.jobs = self.jobs_factory(new)
        self.watchdog.config = self._wd_config(new)
        self.derivation.wanted = derived.RATE_SPECS | self._alarm_metrics(new)
        self.capture.config = new.capture
        self.collections = {k: v for k, v in self.collections.items()
                            if k in {j.name for j in self.jobs}}
        self._start_jobs()
        if self.server is not None:
            self.server.auth = BasicAuth(web.users) if web.auth_required else None
        self.reloads["success"] += 1
        self.last_reload_ok = True
        eventlog.emit("config_reloaded", path=self.config_path,
                      collectors=[j.name for j in self.jobs])
        self._publish()
        return True

    def _reload_failed(self, error: str) -> None:
        self.reloads["failure"] += 1
        self.last_reload_ok = False
        eventlog.emit("config_reload_failed", level=logging.ERROR, error=error)

    # ---- lifecycle ----------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig, fn in ((signal.SIGTERM, self.stop), (signal.SIGINT, self.stop),
                        (signal.SIGHUP, lambda: loop.create_task(self.reload()))):
            # Signal handlers exist only in the main thread of a Unix event loop; a daemon
            # embedded in a test thread runs without them and is stopped by stop().
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, fn)
        await self._restart_server(self.config.daemon.listen, self.web_config)
        self._start_jobs()
        self._publish()
        eventlog.emit("started", listen=self.config.daemon.listen, port=self.port,
                      tls=self.web_config.ssl_context is not None,
                      collectors=[j.name for j in self.jobs], version=VERSION)
        self.started.set()
        try:
            await self._stop.wait()
        finally:
            self._stop_jobs()
            await self.capture.close()
            if self.server is not None:
                await self.server.close()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(sig)
            eventlog.emit("stopped")

    def stop(self) -> None:
        self._stop.set()

    @property
    def port(self) -> int:
        return self.server.port if self.server is not None else 0

    async def _restart_server(self, listen: str, web: WebConfig) -> None:
        """Serve on ``listen`` with ``web``'s TLS and users.  Raises OSError when
        the address cannot be bound; the server that was running keeps running
        (on a new address it is closed only once the new one listens)."""
        host, _, port_text = listen.rpartition(":")
        host, port = host.strip("[]"), int(port_text)
        old = self.server
        new = HttpServer({
            "/metrics": self._metrics, "/healthz": self._healthz, "/api/profile": self._profile,
            "/api/captures": self._captures, "/": self._index,
        }, auth=BasicAuth(web.users) if web.auth_required else None,
            on_request=self._count_request)
        if old is None or listen != self.config.daemon.listen:
            await new.start(host, port, web.ssl_context)
            if old is not None:
                await old.close()
        else:  # the same address: it must be released first
            await old.close()
            try:
                await new.start(host, port, web.ssl_context)
            except OSError:
                self.server = HttpServer(old.routes, auth=old.auth, on_request=old.on_request)
                await self.server.start(host, port, self.web_config.ssl_context)
                raise
        self.server = new

    def _start_jobs(self) -> None:
        for job in self.jobs:
            self.health.setdefault(job.name, _Health())
            self._tasks.append(asyncio.get_running_loop().create_task(
                self._job_loop(job, self._generation), name=f"collector-{job.name}"))

    def _stop_jobs(self) -> None:
        # Loops of an older generation end even where a cancellation is lost (an
        # asyncio.wait_for whose inner future completed at the same moment swallows it).
        self._generation += 1
        for t in self._tasks:
            t.cancel()
        self._tasks = []
        # The collectors are being replaced (reload) or the daemon stops: each
        # worker closes its collector (kept descriptors) once a run in flight returns.
        for job, worker in self._workers.values():
            worker.retire(getattr(job.collector, "close", None))
        self._workers = {}

    # ---- collection ---------------------------------------------------------------------
    async def _job_loop(self, job: Job, generation: int) -> None:
        loop = asyncio.get_running_loop()
        timeout = min(self.config.daemon.collector_timeout_s, max(job.interval_s * 5, 1.0))
        next_at = loop.time()
        while generation == self._generation:
            await self._run_once(job, timeout, generation)
            next_at += job.interval_s
            now = loop.time()
            if next_at < now:  # fell behind (slow collector): skip missed ticks
                next_at = now + job.interval_s - (now - next_at) % job.interval_s
            await asyncio.sleep(next_at - now)

    async def _run_once(self, job: Job, timeout: float, generation: int | None = None) -> None:
        """One run of ``job``; its result is dropped when the jobs were replaced
        meanwhile (``generation`` no longer current)."""
        h = self.health.setdefault(job.name, _Health())
        pending = self._pending.get(job.name)
        if pending is not None and not pending.done():
            self._faults(job.name, (Fault(job.name, "hung", job.name,
                                          "previous run has not returned"),), ok=False)
            return
        h.runs += 1
        t0 = time.perf_counter()
        try:
            if job.is_async:
                col = await asyncio.wait_for(job.collector.collect_async(), timeout)
            else:
                fut = self._worker(job).submit(job.collector.collect)
                self._pending[job.name] = fut
                col = await _result_within(fut, timeout)
        except TimeoutError:
            h.duration_s = time.perf_counter() - t0
            self._faults(job.name, (Fault(job.name, "timeout", job.name,
                                          f"no result within {timeout:g} s"),), ok=False)
            return
        except asyncio.CancelledError:
            raise
        except Exception as e:
            h.duration_s = time.perf_counter() - t0
            self._faults(job.name, (Fault(job.name, "error", job.name,
                                          f"{type(e).__name__}: {e}"),), ok=False)
            return
        h.duration_s = time.perf_counter() - t0
        if generation is not None and generation != self._generation:
            return  # from a collector that has been replaced
        self.ingest(col, job_name=job.name)

    def _worker(self, job: Job) -> _Worker:
        held = self._workers.get(job.name)
        if held is None or held[0] is not job:
            if held is not None:
                held[1].retire(None)
            held = self._workers[job.name] = (job, _Worker(job.name,
                                                           asyncio.get_running_loop()))
        return held[1]

    async def collect_once(self) -> Snapshot:
        """Run every collector once and publish the snapshot now (``--once``)."""
        for job in self.jobs:
            await self._run_once(job, self.config.daemon.collector_timeout_s)
        if self._publish_handle is not None:
            self._publish_handle.cancel()
        self._publish()
        return self.snapshot

    def _faults(self, name: str, faults: tuple[Fault, ...], *, ok: bool) -> None:
        h = self.health.setdefault(name, _Health())
        h.up = ok
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
        if not ok:
            self._request_publish()

    def ingest(self, col: Collection, *, job_name: str | None = None) -> None:
        """Take one collection (also the entry point for tests and benchmarks)."""
        name = job_name or col.collector
        if name != col.collector:
            col = Collection(name, col.samples, col.faults, col.ts_ns, col.duration_s,
                             col.sources)
        h = self.health.setdefault(name, _Health())
        self._faults(name, col.faults, ok=not col.faults)
        h.last_success_unix_s = col.ts_ns / 1e9
        rates = self.derivation.ingest(col)
        self.collections[name] = col
        if name in ("ethtool", "dcb") and self.config.watchdog.enabled:
            self._watch(col, rates)
        if self.config.alarms:
            self._check_alarms(col, rates)
        self._request_publish()

    def _request_publish(self) -> None:
        """Publish soon, once for all collectors that finish together (on a loop), or now."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._publish()
            return
        if self._publish_handle is None:
            self._publish_handle = loop.call_later(PUBLISH_DELAY_S, self._publish)

    def _watch(self, col: Collection, rates: Mapping[tuple[str, tuple[str, ...]], float]) -> None:
        for w in derived.watch_inputs(col, rates):
            key = StormKey(w.device, w.direction, w.priority)
            ev = self.watchdog.observe(key, col.ts_ns, w.pause_frames, w.paused_ratio,
                                       w.tx_progress)
            if ev is None:
                continue
            eventlog.emit(**ev.as_log(), level=logging.WARNING)  # type: ignore[arg-type]
            if ev.kind is StormEventKind.DETECTED:
                self.capture.trigger(w.device, f"pfc_storm {w.direction} priority "
                                     f"{w.priority}")

    def _check_alarms(self, col: Collection,
                      rates: Mapping[tuple[str, tuple[str, ...]], float]) -> None:
        for alarm in self.config.alarms:
            hits = self._alarm_hits(alarm, col, rates)
            if hits is None:
                continue
            st = self.alarms.setdefault(alarm.name, _AlarmState())
            if hits and not st.firing:
                st.firing = True
                labels, value = hits[0]
                eventlog.emit("alarm_firing", level=logging.WARNING, alarm=alarm.name,
                              metric=alarm.metric, labels=labels, value=value)
                iface = labels.get(alarm.interface_label)
                if alarm.capture and iface:
                    self.capture.trigger(iface, f"alarm {alarm.name}")
            elif not hits and st.firing:
                st.firing = False
                eventlog.emit("alarm_resolved", alarm=alarm.name)

    @staticmethod
    def _alarm_hits(alarm: Alarm, col: Collection,
                    rates: Mapping[tuple[str, tuple[str, ...]], float]
                    ) -> list[tuple[dict[str, str], float]] | None:
        hits: list[tuple[dict[str, str], float]] = []
        seen = False
        for s in col.samples:
            if s.spec.name != alarm.metric:
                continue
            labels = dict(zip(s.spec.labels, s.labels, strict=True))
            if any(labels.get(k) != v for k, v in alarm.labels):
                continue
            seen = True
            if alarm.rate_above is not None:
                r = rates.get(s.key)
                if r is not None and r > alarm.rate_above:
                    hits.append((labels, r))
            elif alarm.value_above is not None and s.value > alarm.value_above:
                hits.append((labels, s.value))
        return hits if seen else None

    # ---- snapshot -----------------------------------------------------------------------
    def _publish(self) -> None:
        self._publish_handle = None
        # What the derived part needs, captured now (each is replaced, not mutated,
        # by later polls); the work itself waits until something reads it.
        now = time.time()
        collections = dict(self.collections)
        rates = self.derivation.snapshot()
        queues = self.watchdog.queues()
        alarms: list[tuple[str, bool]] = []
        for a in self.config.alarms:
            state = self.alarms.get(a.name)
            alarms.append((a.name, state is not None and state.firing))
        host = self.host

        def derive() -> tuple[tuple[Sample, ...], FabricProfile]:
            storms = {(k.device, k.direction, k.priority): since / 1e9
                      for k, st, _d, _r, _l, since in queues if st is StormState.STORMED}
            dsamples, profile = derived.build(collections, rates, storms, host, now)
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

        self._version += 1
        self.snapshot = Snapshot(self._version, collections, derive)

    def health_samples(self) -> list[Sample]:
        out: list[Sample] = [Sample(m.BUILD_INFO, (VERSION,), 1.0)]
        for name, h in sorted(self.health.items()):
            out.append(Sample(m.COLLECTOR_UP, (name,), float(h.up)))
            out.append(Sample(m.COLLECTOR_DURATION, (name,), h.duration_s))
            out.append(Sample(m.COLLECTOR_RUNS, (name,), float(h.runs)))
            for kind, n in sorted(h.faults.items()):
                out.append(Sample(m.COLLECTOR_FAULTS, (name, kind), float(n)))
            if h.last_success_unix_s is not None:
                out.append(Sample(m.COLLECTOR_LAST_SUCCESS, (name,), h.last_success_unix_s))
        for (path, code), n in sorted(self.scrapes.items()):
            out.append(Sample(m.SCRAPES, (path, code), float(n)))
        for outcome, n in sorted(self.reloads.items()):
            out.append(Sample(m.CONFIG_RELOADS, (outcome,), float(n)))
        out.append(Sample(m.CONFIG_LAST_RELOAD_OK, (), float(self.last_reload_ok)))
        out.append(Sample(m.SCRAPE_DURATION, (), self.render_duration_s))
        out.extend(self.capture.samples())
        return out

    async def render_body(self, openmetrics: bool) -> bytes:
        snap = self.snapshot
        cached = self._render_cache.get(openmetrics)
        if cached is None or cached[0] != snap.version:
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
        health = self._health_renderer.render(self.health_samples(), openmetrics=openmetrics)
        return cached[1] + health

    # ---- HTTP handlers --------------------------------------------------------------------
    def _count_request(self, path: str, code: int) -> None:
        k = (path, str(code))
        self.scrapes[k] = self.scrapes.get(k, 0) + 1

    async def _metrics(self, req: Request) -> Response:
        om = "application/openmetrics-text" in req.headers.get("accept", "")
        body = await self.render_body(om)
        return Response(200, body, OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE)

    def health_report(self) -> tuple[bool, dict[str, Any]]:
        now = time.time()
        cols: dict[str, Any] = {}
        stale = False
        for job in self.jobs:
            h = self.health.get(job.name, _Health())
            age = None if h.last_success_unix_s is None else now - h.last_success_unix_s
            cols[job.name] = {"up": h.up, "last_success_age_s": age,
                              "faults": [f"{f.kind} {f.source}: {f.reason}"
                                         for f in h.last_faults][:20]}
        degraded = any(not c["up"] for c in cols.values())
        # Serving but never collecting (scheduler dead) is unhealthy.
        if self.jobs and all(c["last_success_age_s"] is None for c in cols.values()) \
                and self.snapshot.version > len(self.jobs) * 3:
            stale = True
        status = "unhealthy" if stale else "degraded" if degraded else "ok"
        return not stale, {"status": status, "version": VERSION, "collectors": cols,
                           "captures_in_progress": self.capture.in_progress()}

    async def _healthz(self, req: Request) -> Response:
        ok, doc = self.health_report()
        return Response(200 if ok else 503, json.dumps(doc, indent=1).encode() + b"\n",
                        "application/json")

    async def _profile(self, req: Request) -> Response:
        return Response(200, json.dumps(to_json_dict(self.snapshot.profile), indent=1).encode()
                        + b"\n", "application/json")

    async def _captures(self, req: Request) -> Response:
        return Response(200, json.dumps(self.capture.records_json(), indent=1).encode() + b"\n",
                        "application/json")

    async def _index(self, req: Request) -> Response:
        return Response(200, b"netio-daemon: /metrics /healthz /api/profile /api/captures\n")

