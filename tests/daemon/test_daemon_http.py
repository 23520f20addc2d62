"""The daemon in-process: /metrics, /healthz, /api/profile, faults, concurrency, auth, TLS."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from daemon_helpers import (
    Mlx5Host,
    call_in_loop,
    http_get,
    need_tool,
    parse_exposition,
    running_daemon,
)

from netio.daemon import eventlog
from netio.daemon.app import Daemon, Job, build_jobs
from netio.daemon.config import Config, parse_config
from netio.daemon.webconfig import load_web_config
from netio.telemetry import metrics as m
from netio.telemetry.profile import SCHEMA_VERSION
from netio.telemetry.sample import Collection, Sample


def fixture_config(h: Mlx5Host, **extra: object) -> Config:
    doc: dict[str, object] = {
        "daemon": {"listen": "127.0.0.1:0", "sysfs_root": str(h.sys), "hostname": "testhost"},
        "collectors": {"netdev": {"interval_s": 0.2},
                       "ethtool": {"interval_s": 0.2, "source": "text",
                                   "text_dir": str(h.ethtool_dir)},
                       "rdma": {"interval_s": 0.2}},
        "watchdog": {"poll_interval_s": 0.2},
    }
    doc.update(extra)
    return parse_config(doc)


def wait_for(pred, timeout: float = 10.0, step: float = 0.05):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("condition not met in time")


def test_metrics_healthz_profile(mlx5_host: Mlx5Host, tmp_path: Path) -> None:
    h = mlx5_host
    h.hw["mlx5_0"].update(np_cnp_sent=5)
    h.eth["ens0f0np0"].update(rx_prio3_pause=3, rx_prio3_pause_duration=1500)
    h.write()
    with running_daemon(fixture_config(h)) as d:
        port = d.port
        wait_for(lambda: {"netdev", "ethtool", "rdma"} <= set(d.snapshot.collections))
        code, hdrs, body = http_get(port, "/metrics")
        assert code == 200 and hdrs["Content-Type"].startswith("text/plain; version=0.0.4")
        v = parse_exposition(body.decode())
        assert v[("netio_rdma_cnp_packets_total", (("device", "mlx5_0"), ("event", "sent"),
                                                   ("port", "1")))] == 5
        key = ("netio_pfc_pause_duration_seconds_total",
               (("device", "ens0f0np0"), ("direction", "rx"), ("priority", "3")))
        assert v[key] == pytest.approx(0.0015)
        assert v[("netio_collector_up", (("collector", "rdma"),))] == 1
        # promtool's linter has nothing to say
        out = tmp_path / "m.txt"
        out.write_bytes(body)
        r = subprocess.run([need_tool("promtool"), "check", "metrics"], stdin=out.open("rb"),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "", \
            r.stdout + r.stderr
        # OpenMetrics on request
        code, hdrs, body = http_get(port, "/metrics",
                                    {"Accept": "application/openmetrics-text; version=1.0.0"})
        assert hdrs["Content-Type"].startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n") and body.count(b"# EOF") == 1
        code, _h, body = http_get(port, "/healthz")
        doc = json.loads(body)
        assert code == 200 and doc["status"] == "ok", doc
        code, _h, body = http_get(port, "/api/profile")
        prof = json.loads(body)
        assert prof["schema_version"] == SCHEMA_VERSION and prof["host"] == "testhost"
        (rp,) = prof["rdma_ports"]
        assert rp["device"] == "mlx5_0" and rp["capacity_bps"] == 100e9
        iface = {i["name"]: i for i in prof["interfaces"]}["ens0f0np0"]
        assert iface["capacity_bps"] == 100e9
        assert http_get(port, "/nope")[0] == 404
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", method="POST", data=b"")
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(req, timeout=5)
        assert ei.value.code == 405


def test_rates_in_profile_follow_the_fixture_with_a_counter_reset(mlx5_host: Mlx5Host) -> None:
    """Drive counters deterministically through ingest(): rates, then a reset."""
    h = mlx5_host
    cfg = fixture_config(h)
    d = Daemon(cfg, jobs_factory=lambda c: [])
    from netio.telemetry.rdma import RdmaSysfsCollector

    coll = RdmaSysfsCollector(str(h.sys))
    S = 1_000_000_000

    def ingest_at(ts_s: float) -> None:
        col = coll.collect()
        d.ingest(Collection(col.collector, col.samples, col.faults, int(ts_s * S)))

    h.hw["mlx5_0"].update(np_cnp_sent=1000, rp_cnp_handled=0, local_ack_timeout_err=10)
    h.write()
    ingest_at(100)
    h.hw["mlx5_0"].update(np_cnp_sent=3000, rp_cnp_handled=500, local_ack_timeout_err=30)
    h.write()
    ingest_at(102)
    (p,) = d.snapshot.profile.rdma_ports
    assert p.cnp_sent_per_s == 1000 and p.cnp_handled_per_s == 250
    assert p.retransmissions_per_s == 10
    # driver reload: counters restart from zero
    h.hw["mlx5_0"].update(np_cnp_sent=400, rp_cnp_handled=0, local_ack_timeout_err=2)
    h.write()
    ingest_at(104)
    (p,) = d.snapshot.profile.rdma_ports
    assert p.cnp_sent_per_s == 200 and p.cnp_handled_per_s == 0
    assert p.retransmissions_per_s == 1


def test_storm_detected_logged_and_exported(mlx5_host: Mlx5Host) -> None:
    h = mlx5_host
    cfg = fixture_config(h, watchdog={"detection_time_s": 0.3, "restoration_time_s": 0.3})
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    eventlog.setup("json")
    handler = Capture()
    handler.setFormatter(eventlog.LOGGER.handlers[0].formatter)
    eventlog.LOGGER.addHandler(handler)
    try:
        d = Daemon(cfg, jobs_factory=lambda c: [])
        dev = ("ens0f0np0", "rx", "3")
        S = 1_000_000_000

        def poll(i: int, frames: int, paused_us: int, tx_pkts: int) -> None:
            d.ingest(Collection("ethtool", (
                Sample(m.PFC_PAUSE_FRAMES, dev, float(frames)),
                Sample(m.PFC_PAUSE_DURATION, dev, paused_us * 1e-6),
                Sample(m.NIC_PRIO_PACKETS, ("ens0f0np0", "tx", "3"), float(tx_pkts)),
            ), (), int(i * 0.1 * S)))

        for i in range(6):  # pause all the time, nothing transmitted
            poll(i, 100 * i, 100_000 * i, 5)
        active = {s.key: s.value for s in d.snapshot.extra}
        assert active[(m.WD_STORM_ACTIVE.name, dev)] == 1
        assert active[(m.WD_DETECTED.name, dev)] == 1
        assert d.snapshot.profile.storms[0].priority == 3
        for i in range(6, 12):
            poll(i, 500, 500_000, 5 + i)
        extra = {s.key: s.value for s in d.snapshot.extra}
        assert extra[(m.WD_STORM_ACTIVE.name, dev)] == 0
        assert extra[(m.WD_RESTORED.name, dev)] == 1
        # detected at 0.3 s; last new frame at 0.5 s; quiet for 0.3 s -> restored at 0.8 s
        assert extra[(m.WD_LAST_DURATION.name, dev)] == pytest.approx(0.5)
    finally:
        eventlog.LOGGER.removeHandler(handler)
    events = [json.loads(x) for x in lines]
    kinds = [e["event"] for e in events if e["event"].startswith("pfc_storm")]
    assert kinds == ["pfc_storm_detected", "pfc_storm_restored"]
    det = next(e for e in events if e["event"] == "pfc_storm_detected")
    assert det["device"] == "ens0f0np0" and det["priority"] == 3 and det["direction"] == "rx"


class HangingCollector:
    name = "hang"

    def __init__(self) -> None:
        self.release = threading.Event()

    def collect(self) -> Collection:
        self.release.wait(60)
        return Collection(self.name, (), (), time.time_ns())


def test_faults_hung_collector_vanishing_device_and_100_concurrent_scrapes(
        tmp_path: Path) -> None:
    h = Mlx5Host(tmp_path / "h", devices=2)
    cfg = fixture_config(h, daemon={"listen": "127.0.0.1:0", "sysfs_root": str(h.sys),
                                    "collector_timeout_s": 0.3})
    hang = HangingCollector()

    def jobs(c: Config) -> list[Job]:
        return [*build_jobs(c), Job("hang", hang, 0.2, False)]

    try:
        with running_daemon(cfg, jobs) as d:
            port = d.port
            wait_for(lambda: d.health["hang"].faults.get("hung", 0) >= 1)
            assert d.health["hang"].faults.get("timeout", 0) >= 1
            # others keep collecting while "hang" is stuck
            runs = d.health["rdma"].runs
            wait_for(lambda: d.health["rdma"].runs >= runs + 3)
            # a device disappears ...
            (h.sys / "class/infiniband/mlx5_1").rename(tmp_path / "gone")
            wait_for(lambda: d.health["rdma"].faults.get("vanished", 0) >= 1)
            code, _h, body = http_get(port, "/healthz")
            doc = json.loads(body)
            assert code == 200 and doc["status"] == "degraded"
            assert any("timeout" in f or "hung" in f for f in doc["collectors"]["hang"]["faults"])
            # ... and comes back
            (tmp_path / "gone").rename(h.sys / "class/infiniband/mlx5_1")
            wait_for(lambda: "mlx5_1" in d.snapshot.collections["rdma"].sources)
            # an unreadable counter file
            hw = h.sys / "class/infiniband/mlx5_0/ports/1/hw_counters"
            (hw / "np_cnp_sent").unlink()
            (hw / "np_cnp_sent").mkdir()
            wait_for(lambda: d.health["rdma"].faults.get("unreadable", 0) >= 1)

            def scrape(_i: int) -> tuple[int, int]:
                code, _h, body = http_get(port, "/metrics", timeout=30)
                return code, len(parse_exposition(body.decode()))

            with ThreadPoolExecutor(100) as ex:
                results = list(ex.map(scrape, range(100)))
            assert all(c == 200 for c, _n in results)
            assert min(n for _c, n in results) > 100
            v = parse_exposition(http_get(port, "/metrics")[2].decode())
            assert v[("netio_collector_faults_total", (("collector", "hang"),
                                                       ("kind", "hung")))] >= 1
            assert v[("netio_collector_faults_total", (("collector", "rdma"),
                                                       ("kind", "vanished")))] >= 1
            assert v[("netio_collector_faults_total", (("collector", "rdma"),
                                                       ("kind", "unreadable")))] >= 1
            assert v[("netio_collector_up", (("collector", "hang"),))] == 0
        # the daemon stopped although "hang" is still stuck in its thread
    finally:
        hang.release.set()


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    crt, key = tmp_path / "s.crt", tmp_path / "s.key"
    subprocess.run([need_tool("openssl"), "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-keyout", str(key), "-out", str(crt), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return crt, key


def test_tls_and_basic_auth(mlx5_host: Mlx5Host, tmp_path: Path) -> None:
    import bcrypt

    crt, key = _self_signed(tmp_path)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$")
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
                   f"basic_auth_users:\n  prom: '{hashed}'\n")
    wc = load_web_config(str(web))
    ctx = ssl.create_default_context(cafile=str(crt))
    with running_daemon(fixture_config(mlx5_host), web_config=wc) as d:
        url = f"https://127.0.0.1:{d.port}/metrics"

        def get(auth: str | None) -> int:
            req = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
            try:
                with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
                    return int(r.status)
            except urllib.error.HTTPError as e:
                return e.code

        good = "Basic " + base64.b64encode(b"prom:s3cret").decode()
        bad = "Basic " + base64.b64encode(b"prom:wrong").decode()
        assert get(None) == 401
        assert get(bad) == 401
        assert get(good) == 200
        assert get(good) == 200  # cached verification
        # plain HTTP on the TLS port does not get through
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{d.port}/metrics", timeout=5)


def test_web_config_errors(tmp_path: Path) -> None:
    from netio.errors import ConfigError

    p = tmp_path / "w.yml"
    for text, key in (("basic_auth_users:\n  a: plain\n", "basic_auth_users.a"),
                      ("tls_server_config:\n  cert_file: /nonexistent\n  key_file: /x\n",
                       "tls_server_config.cert_file"),
                      ("http_server_config: {}\n", "http_server_config")):
        p.write_text(text)
        with pytest.raises(ConfigError) as ei:
            load_web_config(str(p))
        assert ei.value.key == key


def test_render_is_shared_by_concurrent_scrapers(mlx5_host: Mlx5Host) -> None:
    with running_daemon(fixture_config(mlx5_host)) as d:
        wait_for(lambda: "rdma" in d.snapshot.collections)

        async def many() -> list[bytes]:
            return await asyncio.gather(*(d.render_body(False) for _ in range(20)))

        bodies = call_in_loop(d, many)
        assert all(b.startswith(b"# HELP") for b in bodies)


class ThreadRecordingCollector:
    name = "rec"

    def __init__(self) -> None:
        self.threads: set[threading.Thread] = set()
        self.runs = 0
        self.closed = threading.Event()

    def collect(self) -> Collection:
        self.threads.add(threading.current_thread())
        self.runs += 1
        return Collection(self.name, (), (), time.time_ns())

    def close(self) -> None:
        self.closed.set()


def test_collector_runs_on_one_thread_and_is_closed_when_replaced(tmp_path: Path) -> None:
    cfg_file = tmp_path / "d.toml"
    cfg_file.write_text('[daemon]\nlisten = "127.0.0.1:0"\n')
    made: list[ThreadRecordingCollector] = []

    def jobs(_c: Config) -> list[Job]:
        made.append(ThreadRecordingCollector())
        return [Job("rec", made[-1], 0.05, False)]

    threads_before = threading.active_count()
    with running_daemon(parse_config({"daemon": {"listen": "127.0.0.1:0"}}), jobs,
                        config_path=str(cfg_file)) as d:
        wait_for(lambda: made[0].runs >= 6)
        assert len(made[0].threads) == 1  # one long-lived worker, not a thread per run
        assert not made[0].closed.is_set()
        assert call_in_loop(d, d.reload) is True
        assert made[0].closed.wait(5)  # the replaced collector released what it holds
        wait_for(lambda: made[1].runs >= 3)
        assert len(made[1].threads) == 1 and not made[1].threads & made[0].threads
        assert threading.active_count() <= threads_before + 4
    assert made[1].closed.wait(5)  # and at shutdown
