"""A real Prometheus server scrapes netio-daemon; rate() returns the rates the fixture drove.

Also: promtool checks the shipped alert rules (and their unit tests), and every
query of the Grafana dashboard and of the rules runs without error on the server.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml
from daemon_helpers import REPO, Mlx5Host, free_port, http_get, need_tool

from netio.telemetry.metrics import ALL_SPECS

DAEMON_DIR = REPO / "daemon"


def test_promtool_check_and_test_rules() -> None:
    promtool = need_tool("promtool")
    r = subprocess.run([promtool, "check", "rules", "netio-alerts.yml"], cwd=DAEMON_DIR,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([promtool, "test", "rules", "netio-alerts-test.yml"], cwd=DAEMON_DIR,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([promtool, "check", "config", "prometheus.yml"], cwd=DAEMON_DIR,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def _netio_names(expr: str) -> set[str]:
    return set(re.findall(r"\bnetio_[a-z0-9_]+", expr))


def _queries() -> list[str]:
    dash = json.loads((DAEMON_DIR / "grafana-netio-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [a["expr"] for a in dash["annotations"]["list"]]
    rules = yaml.safe_load((DAEMON_DIR / "netio-alerts.yml").read_text())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    return exprs


def test_dashboard_and_rules_use_only_exported_metric_names() -> None:
    known = {s.name for s in ALL_SPECS}
    for expr in _queries():
        for name in _netio_names(expr):
            assert name in known, f"{name} in {expr!r} is not exported"


class Driver:
    """Advances fixture counters from the wall clock at fixed rates."""

    def __init__(self, h: Mlx5Host, rates: dict[str, float]) -> None:
        self.h = h
        self.rates = rates
        self.t0 = time.monotonic()
        self.reset_at: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.05):
            t = time.monotonic() - self.t0
            tr = t - self.reset_at if self.reset_at is not None and t >= self.reset_at else t
            self.h.hw["mlx5_0"]["np_cnp_sent"] = int(self.rates["cnp"] * tr)
            self.h.hw["mlx5_0"]["rp_cnp_handled"] = int(self.rates["handled"] * t)
            self.h.eth["ens0f0np0"]["rx_prio3_pause"] = int(self.rates["pause"] * t)
            self.h.net["ens0f0np0"]["rx_bytes"] = int(self.rates["bytes"] * t)
            self.h.write()


@pytest.mark.slow
@pytest.mark.tools
def test_real_prometheus_rates(tmp_path: Path) -> None:
    prometheus = need_tool("prometheus")
    h = Mlx5Host(tmp_path / "h")
    dport, pport = free_port(), free_port()
    cfg = tmp_path / "netio.toml"
    cfg.write_text(f"""
[daemon]
listen = "127.0.0.1:{dport}"
sysfs_root = "{h.sys}"
[collectors.netdev]
interval_s = 0.1
[collectors.ethtool]
interval_s = 0.1
source = "text"
text_dir = "{h.ethtool_dir}"
[collectors.rdma]
interval_s = 0.1
""")
    pcfg = tmp_path / "prometheus.yml"
    pcfg.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(DAEMON_DIR / "netio-alerts.yml")],
        "scrape_configs": [{"job_name": "netio", "scrape_interval": "1s",
                            "static_configs": [{"targets": [f"127.0.0.1:{dport}"]}]}],
    }))
    rates = {"cnp": 1000.0, "handled": 250.0, "pause": 200.0, "bytes": 1e6}
    drv = Driver(h, rates)
    dlog = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen([sys.executable, "-m", "netio.cli.daemon", "--config", str(cfg)],
                              stderr=dlog, stdout=subprocess.DEVNULL)
    plog = (tmp_path / "prometheus.log").open("w")
    prom = subprocess.Popen([prometheus, f"--config.file={pcfg}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{pport}"],
                            stdout=plog, stderr=subprocess.STDOUT)
    drv.thread.start()

    def query(q: str) -> list[dict[str, object]]:
        code, _h, body = http_get(pport, "/api/v1/query?query=" + urllib.parse.quote(q))
        doc = json.loads(body)
        assert code == 200 and doc["status"] == "success", (q, doc)
        return doc["data"]["result"]  # type: ignore[no-any-return]

    try:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                if http_get(pport, "/-/ready", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            raise AssertionError("prometheus not ready")
        # wait until the window is fully covered by scrapes (a loaded box may start late)
        cover = 'count_over_time(netio_rdma_cnp_packets_total{event="handled"}[8s])'
        end = time.monotonic() + 60
        while time.monotonic() < end:
            res = query(cover)
            if res and float(res[0]["value"][1]) >= 7:  # type: ignore[index]
                break
            time.sleep(0.5)
        # a counter reset in the middle of the window
        time.sleep(1.0)
        drv.reset_at = time.monotonic() - drv.t0
        time.sleep(3.0)
        up = query('up{job="netio"}')
        assert up and up[0]["value"][1] == "1"  # type: ignore[index]
        raw = query('netio_rdma_cnp_packets_total{event="handled"}[8s]')

        def one(q: str) -> float:
            res = query(q)
            assert len(res) == 1, (q, res)
            return float(res[0]["value"][1])  # type: ignore[index]

        handled = one('rate(netio_rdma_cnp_packets_total{event="handled"}[6s])')
        pause = one('rate(netio_pfc_pause_frames_total{direction="rx",priority="3"}[6s])')
        nbytes = one('rate(netio_network_bytes_total{device="ens0f0np0",direction="rx"}[6s])')
        assert handled == pytest.approx(rates["handled"], rel=0.15), raw
        assert pause == pytest.approx(rates["pause"], rel=0.15)
        assert nbytes == pytest.approx(rates["bytes"], rel=0.15)
        # across the reset Prometheus loses at most the counts of one scrape interval
        cnp = one('rate(netio_rdma_cnp_packets_total{event="sent"}[4s])')
        assert 0.6 * rates["cnp"] <= cnp <= 1.15 * rates["cnp"]
        # every dashboard and rule query is valid PromQL on this server
        for q in _queries():
            q = q.replace("$__rate_interval", "5s").replace("$instance", ".*")
            query(q)
    finally:
        drv.stop.set()
        drv.thread.join(5)
        for p in (prom, daemon):
            p.terminate()
        for p in (prom, daemon):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert daemon.returncode == 0
