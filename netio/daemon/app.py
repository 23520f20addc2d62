"""The daemon: puts the parts together and runs them.

Each part owns one concern: :mod:`~netio.daemon.jobs` (which collectors, from a
name -> factory registry), :mod:`~netio.daemon.scheduler` and
:mod:`~netio.daemon.workers` (running them), :mod:`~netio.daemon.health`
(runs, faults, staleness, readiness), :mod:`~netio.daemon.alarms`,
:mod:`~netio.daemon.watchdog` (PFC storms), :mod:`~netio.daemon.publish`
(snapshots and their exposition), :mod:`~netio.daemon.api` (HTTP endpoints)
and :mod:`~netio.daemon.capture`.  This module holds the lifecycle
(start, SIGHUP reload, stop) and :meth:`Daemon.ingest`, where a collection
reaches rates, the watchdog, alarms and the next snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from netio.daemon import alarms as alarm_mod
from netio.daemon import eventlog
from netio.daemon.alarms import AlarmBook
from netio.daemon.api import Api
from netio.daemon.auth import BasicAuth
from netio.daemon.capture import CaptureManager
from netio.daemon.config import Config, check_paths, load_config
from netio.daemon.health import CollectorHealth, HealthBook
from netio.daemon.http import HttpServer
from netio.daemon.jobs import Job, JobRole, build_jobs
from netio.daemon.publish import Publisher, Snapshot, derive_snapshot
from netio.daemon.scheduler import Scheduler
from netio.daemon.watchdog import PfcWatchdog, StormEventKind, StormKey, WatchdogConfig
from netio.daemon.webconfig import WebConfig, load_web_config
from netio.errors import ConfigError
from netio.telemetry import derived
from netio.telemetry import metrics as m
from netio.telemetry.profile import FabricProfile
from netio.telemetry.sample import Collection, Fault, Sample

__all__ = ["VERSION", "Daemon", "Job", "JobRole", "Snapshot", "build_jobs"]

VERSION = "0.1.0"


def _wd_config(config: Config) -> WatchdogConfig:
    w = config.watchdog
    return WatchdogConfig(w.detection_time_s, w.restoration_time_s, w.poll_interval_s,
                          w.min_paused_ratio)


def _load_web(config: Config) -> WebConfig:
    path = config.daemon.web_config_file
    return load_web_config(path) if path else WebConfig()


def _auth(web: WebConfig) -> BasicAuth | None:
    return BasicAuth(web.users) if web.auth_required else None


class Daemon:
    def __init__(self, config: Config, *, config_path: str | None = None,
                 jobs_factory: Callable[[Config], list[Job]] = build_jobs,
                 web_config: WebConfig | None = None) -> None:
        self.config = config
        self.config_path = config_path
        self.jobs_factory = jobs_factory
        self.web_config = web_config if web_config is not None else _load_web(config)
        self.host = config.daemon.hostname or socket.gethostname()
        self.jobs = jobs_factory(config)
        self._watched = self._watch_sources(self.jobs)
        self.healthbook = HealthBook()
        self.healthbook.track((j.name, j.interval_s) for j in self.jobs)
        self.collections: dict[str, Collection] = {}
        self.derivation = derived.Derivation(alarm_mod.rate_metrics(config.alarms))
        self.watchdog = PfcWatchdog(_wd_config(config))
        self.capture = CaptureManager(config.capture)
        self.alarms = AlarmBook(config.alarms, self.capture.trigger)
        self.reloads = {"success": 0, "failure": 0}
        self.last_reload_ok = True
        self.publisher = Publisher(self.host)
        self.api = Api(self)
        self.scheduler = Scheduler(self.healthbook, config.daemon.collector_timeout_s,
                                   self._on_collection, self._on_failure)
        self._started_mono = time.monotonic()
        self._stop = asyncio.Event()
        self.server: HttpServer | None = None
        self.started = asyncio.Event()

    # ---- views ----------------------------------------------------------------------------
    @property
    def health(self) -> dict[str, CollectorHealth]:
        return self.healthbook.collectors

    @property
    def snapshot(self) -> Snapshot:
        return self.publisher.snapshot

    @property
    def port(self) -> int:
        return self.server.port if self.server is not None else 0

    @staticmethod
    def _watch_sources(jobs: list[Job]) -> frozenset[str]:
        """The collections that feed the storm watchdog: the fast PFC job when there
        is one (the full ethtool collection then does not, so that the watchdog
        sees one time line per counter), else the ethtool collection; and DCB."""
        if any(j.role is JobRole.WATCH for j in jobs):
            return frozenset(j.name for j in jobs if j.role is JobRole.WATCH) | {"dcb"}
        return frozenset({"ethtool", "dcb"})

    # ---- configuration --------------------------------------------------------------------
    async def reload(self) -> bool:
        """Re-read the configuration file; a bad file keeps the running configuration."""
        if self.config_path is None:
            return False
        try:
            new = load_config(self.config_path)
            check_paths(new)
            web = _load_web(new)
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
        self.scheduler.stop()
        self.config = new
        self.web_config = web
        self.jobs = self.jobs_factory(new)
        self._watched = self._watch_sources(self.jobs)
        self.watchdog.config = _wd_config(new)
        self.derivation.wanted = derived.RATE_SPECS | alarm_mod.rate_metrics(new.alarms)
        self.alarms.configure(new.alarms)
        self.capture.config = new.capture
        # A removed (or disabled) collector is forgotten: its series disappear.
        names = {j.name for j in self.jobs}
        self.collections = {k: v for k, v in self.collections.items() if k in names}
        self.derivation.forget_except(names)
        self.scheduler.timeout_s = new.daemon.collector_timeout_s
        self.scheduler.start(self.jobs)
        if self.server is not None:
            old_auth = self.server.auth
            self.server.auth = _auth(web)
            if old_auth is not None:
                old_auth.close()
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

    # ---- lifecycle ------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig, fn in ((signal.SIGTERM, self.stop), (signal.SIGINT, self.stop),
                        (signal.SIGHUP, lambda: loop.create_task(self.reload()))):
            # Signal handlers exist only in the main thread of a Unix event loop; a daemon
            # embedded in a test thread runs without them and is stopped by stop().
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, fn)
        await self._restart_server(self.config.daemon.listen, self.web_config)
        self._started_mono = time.monotonic()
        self.scheduler.start(self.jobs)
        self._publish()
        eventlog.emit("started", listen=self.config.daemon.listen, port=self.port,
                      tls=self.web_config.ssl_context is not None,
                      collectors=[j.name for j in self.jobs], version=VERSION)
        self.started.set()
        try:
            await self._stop.wait()
        finally:
            self.scheduler.stop()
            self.publisher.cancel()
            await self.capture.close()
            if self.server is not None:
                await self.server.close()
                if self.server.auth is not None:
                    self.server.auth.close()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(sig)
            eventlog.emit("stopped")

    def stop(self) -> None:
        self._stop.set()

    async def _restart_server(self, listen: str, web: WebConfig) -> None:
        """Serve on ``listen`` with ``web``'s TLS and users.  Raises OSError when
        the address cannot be bound; the server that was running keeps running
        (on a new address it is closed only once the new one listens)."""
        host, _, port_text = listen.rpartition(":")
        host, port = host.strip("[]"), int(port_text)
        old = self.server
        new = HttpServer(self.api.routes(), auth=_auth(web), on_request=self.api.count)
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
        if old is not None and old.auth is not None and old.auth is not new.auth:
            old.auth.close()
        self.server = new

    # ---- collection -----------------------------------------------------------------------
    async def collect_once(self) -> Snapshot:
        """Run every collector once and publish the snapshot now (``--once``)."""
        self.healthbook.track((j.name, j.interval_s) for j in self.jobs)
        for job in self.jobs:
            await self.scheduler.run_once(job)
        self._publish()
        return self.snapshot

    def _on_collection(self, job: Job, col: Collection) -> None:
        if job.role is JobRole.WATCH:
            self._ingest_watch(col, job.name)
        else:
            self.ingest(col, job_name=job.name)

    def _on_failure(self, job: Job, faults: tuple[Fault, ...]) -> None:
        self.healthbook.record(job.name, faults, success_unix_s=None)
        self.publisher.request(self._publish)

    def ingest(self, col: Collection, *, job_name: str | None = None) -> None:
        """Take one collection (also the entry point for tests and benchmarks)."""
        name = job_name or col.collector
        if name != col.collector:
            col = Collection(name, col.samples, col.faults, col.ts_ns, col.duration_s,
                             col.sources)
        self.healthbook.record(name, col.faults, success_unix_s=col.ts_ns / 1e9)
        rates = self.derivation.ingest(col)
        self.collections[name] = col
        if name in self._watched and self.config.watchdog.enabled:
            self._watch(col, rates)
        if self.config.alarms:
            self.alarms.check(col, rates)
        self.publisher.request(self._publish)

    def _ingest_watch(self, col: Collection, name: str) -> None:
        """A collection that only feeds the watchdog: not exported, and a new
        snapshot only when a storm starts or ends."""
        self.healthbook.record(name, col.faults, success_unix_s=col.ts_ns / 1e9)
        rates = self.derivation.ingest(col)
        if self.config.watchdog.enabled and self._watch(col, rates):
            self.publisher.request(self._publish)

    def _watch(self, col: Collection, rates: Mapping[tuple[str, tuple[str, ...]], float]
               ) -> bool:
        """Feed the watchdog; True when a storm was detected or restored."""
        changed = False
        for w in derived.watch_inputs(col, rates):
            key = StormKey(w.device, w.direction, w.priority)
            ev = self.watchdog.observe(key, col.ts_ns, w.pause_frames, w.paused_ratio,
                                       w.tx_progress)
            if ev is None:
                continue
            changed = True
            eventlog.emit(**ev.as_log(), level=logging.WARNING)  # type: ignore[arg-type]
            if ev.kind is StormEventKind.DETECTED:
                self.capture.trigger(w.device, f"pfc_storm {w.direction} priority "
                                     f"{w.priority}")
        return changed

    # ---- snapshot -------------------------------------------------------------------------
    def _publish(self) -> None:
        # What the derived part needs, captured now (each is replaced, not mutated,
        # by later polls); the work itself waits until something reads it.
        now = time.time()
        collections = dict(self.collections)
        rates = self.derivation.snapshot()
        queues = self.watchdog.queues()
        states = self.alarms.states()
        host = self.host
        self.publisher.publish(
            collections, lambda: derive_snapshot(collections, rates, queues, states, host, now))

    def health_samples(self) -> list[Sample]:
        out: list[Sample] = [Sample(m.BUILD_INFO, (VERSION,), 1.0)]
        out.extend(self.healthbook.samples())
        out.extend(self.api.samples())
        for outcome, n in sorted(self.reloads.items()):
            out.append(Sample(m.CONFIG_RELOADS, (outcome,), float(n)))
        out.append(Sample(m.CONFIG_LAST_RELOAD_OK, (), float(self.last_reload_ok)))
        out.append(Sample(m.SCRAPE_DURATION, (), self.publisher.render_duration_s))
        out.extend(self.capture.samples())
        return out

    # ---- what the endpoints serve ---------------------------------------------------------
    async def render_body(self, openmetrics: bool) -> bytes:
        return await self.publisher.render_body(openmetrics, self.health_samples)

    def health_report(self) -> tuple[bool, dict[str, Any]]:
        """Readiness: see :mod:`netio.daemon.health`."""
        ready, status, cols = self.healthbook.readiness(
            [j.name for j in self.jobs], self.config.daemon.collector_timeout_s, time.time(),
            time.monotonic() - self._started_mono)
        doc: dict[str, Any] = {"status": status, "version": VERSION, "collectors": cols,
                               "captures_in_progress": self.capture.in_progress()}
        if not self.jobs:
            doc["reason"] = "no collector is enabled"
        return ready, doc

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        alive = self.scheduler.alive()
        return alive, {"status": "alive" if alive else "scheduler stopped",
                       "version": VERSION}

    def profile(self) -> FabricProfile:
        return self.snapshot.profile

    def captures(self) -> list[dict[str, Any]]:
        return self.capture.records_json()
