"""Signals that must be true: staleness, removed collectors, readiness and
liveness, the collector timeout, alarm metric names, the shared retransmission
definition, every HTTP answer counted, and the documented log events."""

from __future__ import annotations

import ast
import json
import re
import socket
import tarfile
import threading
import time
from pathlib import Path

import pytest
from daemon_helpers import (
    REPO,
    RXE_TAR,
    Mlx5Host,
    call_in_loop,
    http_get,
    parse_exposition,
    running_daemon,
)

from netio.daemon.app import Daemon
from netio.daemon.config import Config, parse_config
from netio.daemon.jobs import REGISTRY, Job, build_jobs
from netio.errors import ConfigError
from netio.telemetry import metrics as m
from netio.telemetry.sample import Collection, Fault, Sample
from netio.telemetry.selection import Selection

S = 1_000_000_000


def wait_for(pred, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def metrics(port: int) -> dict:  # type: ignore[type-arg]
    return parse_exposition(http_get(port, "/metrics")[2].decode())


def test_only_a_run_without_faults_moves_last_success() -> None:
    d = Daemon(Config(), jobs_factory=lambda c: [])
    ok = Collection("snmp:leaf1", (Sample(m.SW_UP_TARGET, ("leaf1",), 1.0),), (), 100 * S)
    down = Collection("snmp:leaf1", (Sample(m.SW_UP_TARGET, ("leaf1",), 0.0),),
                      (Fault("snmp:leaf1", "down", "leaf1", "timeout"),), 200 * S)
    d.ingest(ok)
    assert d.health["snmp:leaf1"].last_success_unix_s == 100.0
    d.ingest(down)  # a dead switch: the collection comes back at once, with a fault
    h = d.health["snmp:leaf1"]
    assert h.last_success_unix_s == 100.0 and not h.up
    v = {s.key: s.value for s in d.health_samples()}
    assert v[(m.COLLECTOR_LAST_SUCCESS.name, ("snmp:leaf1",))] == 100.0


class DeadAgentCollector:
    """An SNMP target whose agent went away: each poll returns at once with
    ``down`` (as SnmpCollector does while it backs off)."""

    name = "snmp:dead"

    def __init__(self) -> None:
        self.alive = True

    async def collect_async(self) -> Collection:
        if self.alive:
            return Collection(self.name, (Sample(m.SW_UP_TARGET, ("dead",), 1.0),), (),
                              time.time_ns())
        return Collection(self.name, (Sample(m.SW_UP_TARGET, ("dead",), 0.0),),
                          (Fault(self.name, "down", "dead", "no answer"),), time.time_ns())


def test_a_dead_agent_goes_stale_and_the_daemon_stops_being_ready() -> None:
    agent = DeadAgentCollector()
    cfg = parse_config({"daemon": {"listen": "127.0.0.1:0", "collector_timeout_s": 0.1}})
    with running_daemon(cfg, lambda c: [Job("snmp:dead", agent, 0.1, True)]) as d:
        wait_for(lambda: d.health["snmp:dead"].last_success_unix_s is not None)
        assert http_get(d.port, "/healthz")[0] == 200
        agent.alive = False
        wait_for(lambda: not d.health["snmp:dead"].up)
        frozen = d.health["snmp:dead"].last_success_unix_s
        time.sleep(0.5)  # more than max(3 x 0.1, 0.1 + 0.1) s
        v = metrics(d.port)
        assert v[("netio_collector_last_success_timestamp_seconds",
                  (("collector", "snmp:dead"),))] == frozen
        code, _h, body = http_get(d.port, "/healthz")
        doc = json.loads(body)
        col = doc["collectors"]["snmp:dead"]
        assert code == 503 and doc["status"] == "unhealthy", doc
        assert col["fresh"] is False and col["last_success_age_s"] >= 0.5
        assert col["faults"] == ["down dead: no answer"]
        # alive all the same: an orchestrator must not restart it for a dead switch
        assert http_get(d.port, "/livez")[0] == 200


def test_reload_that_removes_a_collector_removes_its_series(tmp_path: Path) -> None:
    h = Mlx5Host(tmp_path / "h")
    cfg_file = tmp_path / "d.toml"
    base = (f'[daemon]\nlisten = "127.0.0.1:0"\nsysfs_root = "{h.sys}"\n'
            '[collectors.netdev]\ninterval_s = 0.1\n[collectors.ethtool]\nenabled = false\n')
    cfg_file.write_text(base + "[collectors.rdma]\ninterval_s = 0.1\n")
    from netio.daemon.config import load_config

    with running_daemon(load_config(str(cfg_file)), config_path=str(cfg_file)) as d:
        wait_for(lambda: "rdma" in d.snapshot.collections)
        v = metrics(d.port)
        assert ("netio_collector_up", (("collector", "rdma"),)) in v
        cfg_file.write_text(base + "[collectors.rdma]\nenabled = false\n")
        assert call_in_loop(d, d.reload) is True
        v = metrics(d.port)
        assert not [k for k in v if dict(k[1]).get("collector") == "rdma"], \
            [k for k in v if "rdma" in str(k)]
        assert not [k for k in v if k[0].startswith("netio_rdma_")]
        doc = json.loads(http_get(d.port, "/healthz")[2])
        assert set(doc["collectors"]) == {"netdev"}
        assert [j.name for j in d.jobs] == ["netdev"]


def test_nothing_enabled_is_not_ready_but_alive() -> None:
    cfg = parse_config({"daemon": {"listen": "127.0.0.1:0"},
                        "collectors": {n: {"enabled": False}
                                       for n in ("netdev", "ethtool", "rdma", "rdma_qp", "dcb")}})
    assert build_jobs(cfg) == []
    with running_daemon(cfg) as d:
        code, _h, body = http_get(d.port, "/healthz")
        doc = json.loads(body)
        assert code == 503 and doc["status"] == "unhealthy"
        assert doc["reason"] == "no collector is enabled"
        code, _h, body = http_get(d.port, "/livez")
        assert code == 200 and json.loads(body)["status"] == "alive"


class Hanging:
    name = "hang"

    def __init__(self) -> None:
        self.release = threading.Event()

    def collect(self) -> Collection:
        self.release.wait(30)
        return Collection(self.name, (), (), time.time_ns())


class Quick:
    name = "quick"

    def collect(self) -> Collection:
        return Collection(self.name, (), (), time.time_ns())


def test_hung_since_start_is_unhealthy_alone_and_degraded_beside_a_working_one() -> None:
    cfg = parse_config({"daemon": {"listen": "127.0.0.1:0", "collector_timeout_s": 0.1}})
    hang = Hanging()
    try:
        with running_daemon(cfg, lambda c: [Job("hang", hang, 0.1, False)]) as d:
            code, _h, body = http_get(d.port, "/healthz")
            assert code == 503 and json.loads(body)["status"] == "starting"
            time.sleep(0.5)  # past the stale bound, max(3 x 0.1, 0.1 + 0.1) s
            code, _h, body = http_get(d.port, "/healthz")
            assert code == 503 and json.loads(body)["status"] == "unhealthy"
            assert http_get(d.port, "/livez")[0] == 200
        hang2 = Hanging()
        jobs = [Job("hang", hang2, 0.1, False), Job("quick", Quick(), 0.1, False)]
        with running_daemon(cfg, lambda c: jobs) as d:
            wait_for(lambda: d.health["quick"].up)
            time.sleep(0.5)
            code, _h, body = http_get(d.port, "/healthz")
            doc = json.loads(body)
            assert code == 200 and doc["status"] == "degraded"
            assert doc["collectors"]["hang"]["fresh"] is False
            assert doc["collectors"]["quick"]["fresh"] is True
        hang2.release.set()
    finally:
        hang.release.set()


class Slow:
    name = "slow"

    def __init__(self) -> None:
        self.runs = 0

    def collect(self) -> Collection:
        self.runs += 1
        time.sleep(1.2)
        return Collection(self.name, (), (), time.time_ns())


@pytest.mark.slow
def test_collector_timeout_means_what_it_says() -> None:
    # Before: min(collector_timeout_s, max(5 x interval, 1)) = 1 s here.
    cfg = parse_config({"daemon": {"listen": "127.0.0.1:0", "collector_timeout_s": 2.0}})
    slow = Slow()
    with running_daemon(cfg, lambda c: [Job("slow", slow, 0.05, False)]) as d:
        wait_for(lambda: d.health["slow"].last_success_unix_s is not None, timeout=5)
        assert "timeout" not in d.health["slow"].faults
    cfg = parse_config({"daemon": {"listen": "127.0.0.1:0", "collector_timeout_s": 0.5}})
    slow = Slow()
    with running_daemon(cfg, lambda c: [Job("slow", slow, 5.0, False)]) as d:
        wait_for(lambda: d.health["slow"].faults.get("timeout", 0) >= 1, timeout=5)


def test_alarm_on_an_unknown_metric_is_rejected_with_the_known_names() -> None:
    with pytest.raises(ConfigError) as ei:
        parse_config({"alarm": [{"name": "x", "metric": "netio_rdma_cnp_total",
                                 "rate_above": 1.0}]})
    assert ei.value.key == "alarm[0].metric"
    assert "netio_rdma_cnp_packets_total" in ei.value.reason
    assert "netio_switch_pfc_requests_total" in ei.value.reason
    parse_config({"alarm": [{"name": "x", "metric": "netio_rdma_cnp_packets_total",
                             "rate_above": 1.0}]})


def test_retransmissions_of_rxe_are_counted_once(tmp_path: Path) -> None:
    """The exported counter (which the alert rule rates) against the kernel's own
    rxe counters in the lab snapshot: completer_retry_err already counts the
    NAK-sequence and timeout retries, so those are not added again."""
    with tarfile.open(RXE_TAR) as tar:
        tar.extractall(tmp_path, filter="data")
    hw = tmp_path / "sys/class/infiniband/rxe0/ports/1/hw_counters"
    kernel = {f.name: int(f.read_text()) for f in hw.iterdir()}
    expected = kernel["completer_retry_err"] + kernel["rcvd_rnr_err"]
    from netio.telemetry.rdma import RdmaSysfsCollector

    d = Daemon(parse_config({"daemon": {"sysfs_root": str(tmp_path / "sys")}}),
               jobs_factory=lambda c: [])
    d.ingest(RdmaSysfsCollector(str(tmp_path / "sys")).collect())
    v = {s.key: s.value for s in d.snapshot.extra}
    assert v[(m.RETRANSMISSIONS.name, ("rxe0", "1"))] == expected
    rules = (REPO / "daemon" / "netio-alerts.yml").read_text()
    rule = re.search(r"record: netio:rdma_retransmission_events:rate5m\n\s+expr: (.*)", rules)
    assert rule is not None
    assert "netio_rdma_retransmission_events_total" in rule.group(1)
    assert "netio_rdma_transport_events_total" not in rule.group(1)


def test_every_answer_is_counted(mlx5_host: Mlx5Host) -> None:
    cfg = parse_config({"daemon": {"listen": "127.0.0.1:0", "sysfs_root": str(mlx5_host.sys)}})
    with running_daemon(cfg, lambda c: []) as d:
        for raw in (b"NONSENSE\r\n\r\n", b"GET /metrics HTTP/1.1\r\nbad header\r\n\r\n",
                    b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", d.port), timeout=10) as s:
                s.sendall(raw)
                s.recv(100)
        v = metrics(d.port)
    assert v[("netio_http_requests_total", (("code", "400"), ("path", "other")))] == 1
    assert v[("netio_http_requests_total", (("code", "400"), ("path", "/metrics")))] == 1
    assert v[("netio_http_requests_total", (("code", "431"), ("path", "other")))] == 1


def test_every_logged_event_is_documented() -> None:
    """Each ``eventlog.emit("name", ...)`` in the daemon is in daemon/README.md's list."""
    events: set[str] = set()
    for path in (REPO / "netio" / "daemon").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "emit" \
                    and node.args and isinstance(node.args[0], ast.Constant):
                events.add(node.args[0].value)
    events |= {"pfc_storm_detected", "pfc_storm_restored"}  # from StormEvent.as_log
    readme = (REPO / "daemon" / "README.md").read_text()
    documented = set(re.findall(r"`([a-z_]+)`", readme))
    assert "collector_fault_cleared" in events
    assert events <= documented, sorted(events - documented)


def test_telemetry_never_imports_the_daemon() -> None:
    for path in (REPO / "netio" / "telemetry").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("netio.daemon"), (path.name, node.module)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("netio.daemon") for a in node.names), path


def test_collectors_come_from_the_registry(mlx5_host: Mlx5Host) -> None:
    cfg = parse_config({"daemon": {"sysfs_root": str(mlx5_host.sys)},
                        "collectors": {"ethtool": {"source": "text",
                                                   "text_dir": str(mlx5_host.ethtool_dir)}}})
    names = [j.name for j in build_jobs(cfg)]
    # pfcwd: the PFC counters alone at the watchdog's 0.2 s, ethtool at its 1 s
    assert names == ["netdev", "ethtool", "pfcwd", "rdma"]
    only = {"rdma": REGISTRY["rdma"]}
    assert [j.name for j in build_jobs(cfg, only)] == ["rdma"]


def test_pfc_counter_poll_reads_only_what_the_watchdog_needs(mlx5_host: Mlx5Host) -> None:
    from netio.telemetry.ethtool import EthtoolTextSource, PfcCounterCollector

    h = mlx5_host
    (h.ethtool_dir / "eth9.txt").write_text("NIC statistics:\n     rx_queue_0_packets: 5\n")
    h.eth["ens0f0np0"].update(rx_prio3_pause=7, rx_prio3_pause_duration=2500,
                              tx_prio3_packets=11)
    h.write()

    class Counting(EthtoolTextSource):
        def __init__(self, root: str) -> None:
            super().__init__(root)
            self.read: list[str] = []

        def statistics(self, ifname: str) -> list[tuple[str, int]]:
            self.read.append(ifname)
            return super().statistics(ifname)

    src = Counting(str(h.ethtool_dir))
    col = PfcCounterCollector(src)
    first = col.collect()
    assert sorted(src.read) == ["ens0f0np0", "eth9"]  # the rescan lists every interface
    names = {s.spec.name for s in first.samples}
    # the watched metrics only: pause frames, pause duration, per-priority packets
    assert names == {m.PFC_PAUSE_FRAMES.name, m.PFC_PAUSE_DURATION.name,
                     m.NIC_PRIO_PACKETS.name}
    v = {s.key: s.value for s in first.samples}
    assert v[(m.PFC_PAUSE_FRAMES.name, ("ens0f0np0", "rx", "3"))] == 7
    assert v[(m.PFC_PAUSE_DURATION.name, ("ens0f0np0", "rx", "3"))] == pytest.approx(0.0025)
    # 8 priorities x 2 directions x (frames, duration, packets); no byte counters etc.
    assert len(first.samples) == 48
    src.read.clear()
    col.collect()
    assert src.read == ["ens0f0np0"]  # between rescans, only interfaces with PFC counters
    assert col.idle_s() == 0.0
    # a host with no PFC counters at all is not polled until the next rescan
    only_virtual = Counting(str(h.ethtool_dir))
    bare = PfcCounterCollector(only_virtual, interfaces=Selection(("eth9",)))
    assert bare.collect().samples == ()
    assert 9.0 < bare.idle_s() <= 10.0


class Idle:
    """A collector that asks for a longer pause (as the PFC counter poll does on a
    host without PFC counters)."""

    name = "idle"

    def __init__(self) -> None:
        self.runs = 0

    def idle_s(self) -> float:
        return 0.6

    def collect(self) -> Collection:
        self.runs += 1
        return Collection(self.name, (), (), time.time_ns())


def test_a_collector_that_idles_is_judged_by_the_pause_it_takes() -> None:
    cfg = parse_config({"daemon": {"listen": "127.0.0.1:0", "collector_timeout_s": 0.05}})
    idle = Idle()
    with running_daemon(cfg, lambda c: [Job("idle", idle, 0.05, False)]) as d:
        wait_for(lambda: idle.runs >= 2, timeout=5)
        assert 0.55 <= d.health["idle"].interval_s <= 0.61
        time.sleep(0.4)  # longer than 3 x 0.05 s, shorter than 3 x 0.6 s
        code, _h, body = http_get(d.port, "/healthz")
        assert code == 200 and json.loads(body)["status"] == "ok", body
    assert idle.runs <= 4  # about one run per 0.6 s, not one per 0.05 s
