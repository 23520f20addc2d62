#!/usr/bin/env python3
"""netio-daemon benchmark: collection CPU and scrape latency, against node_exporter.

Fixture: 8 RDMA devices x 300 counters (PMA + mlx5 hw_counters + vendor extras) in a
sysfs tree, 8 netdevs, and ethtool -S text files sized so that /metrics holds
about 10,000 series.  Polled at 1 Hz.

Figures (printed, no pass/fail):
* collection CPU of the daemon process over a quiet window, % of one core (goal <= 1 %);
* /metrics latency with 20 concurrent keep-alive scrapers: p50/p99 (goal p99 <= 50 ms);
* the same for prometheus-node-exporter (``--path.sysfs`` on the same tree, infiniband
  and netclass collectors; its ethtool collector needs real devices), and the ratios.

Usage: bench/bench_daemon.py [--seconds 20] [--scrape-seconds 10]
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "daemon"))

from daemon_helpers import Mlx5Host  # noqa: E402

DEVICES = 8
COUNTERS_PER_DEVICE = 300
ETHTOOL_STATS_PER_IF = 900


def build_fixture(root: Path) -> Mlx5Host:
    h = Mlx5Host(root, devices=DEVICES)
    for dev in h.devices:
        have = len(h.hw[dev]) + len(h.pma[dev])
        for i in range(COUNTERS_PER_DEVICE - have):
            h.hw[dev][f"vendor_counter_{i}"] = i
    for n in h.netdevs:
        for q in range(ETHTOOL_STATS_PER_IF - len(h.eth[n])):
            h.eth[n][f"ch{q // 10}_stat{q % 10}"] = q
    h.write()
    return h


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_http(port: int, path: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"nothing serves {path} on {port}")


def series_count(port: int) -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    return sum(1 for line in body.splitlines() if line and not line.startswith("#"))


def scrape_latencies(port: int, seconds: float, clients: int = 20) -> list[float]:
    lat: list[float] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def worker() -> None:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine = []
        while time.monotonic() < end:
            t0 = time.perf_counter()
            c.request("GET", "/metrics")
            r = c.getresponse()
            r.read()
            mine.append(time.perf_counter() - t0)
            if r.getheader("Connection", "").lower() == "close":
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0, help="CPU measurement window")
    ap.add_argument("--scrape-seconds", type=float, default=10.0)
    ap.add_argument("--no-keep-open", action="store_true",
                    help="open/read/close every counter file per poll (the fixture-tree default)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-daemon-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        h = build_fixture(tmp / "host")
        # The fixture is static during the run, so kept descriptors see what real sysfs
        # would give them; --no-keep-open measures open/read/close per counter instead.
        keep_open = not args.no_keep_open
        port = free_port()
        def start(port: int, ethtool: bool) -> subprocess.Popen[bytes]:
            cfg = tmp / f"netio-{port}.toml"
            cfg.write_text(f"""
[daemon]
listen = "127.0.0.1:{port}"
sysfs_root = "{h.sys}"
[collectors.netdev]
interval_s = 1.0
[collectors.ethtool]
enabled = {str(ethtool).lower()}
interval_s = 1.0
source = "text"
text_dir = "{h.ethtool_dir}"
passthrough_unknown = true
[collectors.rdma]
interval_s = 1.0
passthrough_unknown = true
keep_files_open = {str(keep_open).lower()}
[watchdog]
poll_interval_s = 1.0
""")
            p = subprocess.Popen([sys.executable, "-m", "netio.cli.daemon", "--config",
                                  str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            wait_http(port, "/healthz")
            return p

        # (a) collection CPU: the 8 x 300 RDMA counters (+ netdev), nobody scraping
        d = start(port, ethtool=False)
        time.sleep(3.0)
        c0, t0 = cpu_s(d.pid), time.monotonic()
        time.sleep(args.seconds)
        netio_cpu = (cpu_s(d.pid) - c0) / (time.monotonic() - t0)
        cpu_series = series_count(port)
        d.terminate()
        d.wait(10)
        # (b) scrapes of ~10,000 series (ethtool passthrough added), 20 concurrent scrapers
        port = free_port()
        d = start(port, ethtool=True)
        time.sleep(3.0)
        n_series = series_count(port)
        lat = scrape_latencies(port, args.scrape_seconds)
        print(f"fixture: {DEVICES} RDMA devices x {COUNTERS_PER_DEVICE} counters, "
              f"{DEVICES} netdevs x {ETHTOOL_STATS_PER_IF} ethtool stats, 1 Hz, "
              f"counter files kept open: {keep_open}")
        print(f"netio-daemon: collection CPU {netio_cpu * 100:.2f} % of one core for "
              f"{cpu_series} series (goal <= 1 %)")
        print(f"netio-daemon: {n_series} series with ethtool passthrough")
        print(f"netio-daemon: 20 concurrent scrapers, {len(lat)} scrapes: "
              f"p50 {pct(lat, 0.5) * 1e3:.1f} ms, p99 {pct(lat, 0.99) * 1e3:.1f} ms "
              f"(goal p99 <= 50 ms), mean {statistics.fmean(lat) * 1e3:.1f} ms")

        ne = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
        if ne is None:
            print("node_exporter: not installed (Debian prometheus-node-exporter); no comparison")
            return 0
        nport = free_port()
        n = subprocess.Popen([ne, f"--web.listen-address=127.0.0.1:{nport}",
                              f"--path.sysfs={h.sys}", "--collector.disable-defaults",
                              "--collector.infiniband", "--collector.netclass"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(n)
        wait_http(nport, "/metrics")
        # node_exporter collects on scrape: a 1 Hz scraper is its "poll at 1 Hz"
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(1.0):
                c = http.client.HTTPConnection("127.0.0.1", nport, timeout=30)
                c.request("GET", "/metrics")
                c.getresponse().read()

        poller = threading.Thread(target=poll)
        poller.start()
        time.sleep(2.0)
        c0, t0 = cpu_s(n.pid), time.monotonic()
        time.sleep(args.seconds)
        ne_cpu = (cpu_s(n.pid) - c0) / (time.monotonic() - t0)
        stop.set()
        poller.join()
        ne_series = series_count(nport)
        ne_lat = scrape_latencies(nport, args.scrape_seconds)
        print(f"node_exporter (infiniband+netclass): {ne_series} series; CPU at 1 Hz "
              f"{ne_cpu * 100:.2f} % of one core")
        print(f"node_exporter: 20 concurrent scrapers, {len(ne_lat)} scrapes: "
              f"p50 {pct(ne_lat, 0.5) * 1e3:.1f} ms, p99 {pct(ne_lat, 0.99) * 1e3:.1f} ms")
        print(f"ratio netio/node_exporter: CPU {netio_cpu / ne_cpu:.2f}x, "
              f"CPU per series {(netio_cpu / cpu_series) / (ne_cpu / ne_series):.2f}x, "
              f"scrape p99 {pct(lat, 0.99) / pct(ne_lat, 0.99):.2f}x, "
              f"scrape p99 per series "
              f"{(pct(lat, 0.99) / n_series) / (pct(ne_lat, 0.99) / ne_series):.2f}x")
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
