#!/usr/bin/env python3
"""netio-daemon benchmark: collection CPU and scrape latency, against node_exporter.

Fixture: 8 RDMA devices x 300 counters (PMA + mlx5 hw_counters + vendor extras) in a
sysfs tree, 8 netdevs, and ethtool -S text files sized so that /metrics holds
about 10,000 series.  Polled at 1 Hz.  Counter files are kept open (as on a real
sysfs mount); the fixture stays unchanged during the run, so kept descriptors read
what real sysfs would give them.

Figures (printed, no pass/fail):
* collection CPU of the daemon process, nobody scraping, % of one core and ms per
  poll (goal <= 1 %): the median of --windows windows of --seconds each (default
  3 x 30 s).  CPU time is the sum of the process' threads' run time from
  /proc/PID/task/*/schedstat (nanoseconds), or /proc/PID/stat (10 ms ticks) for a
  window in which a thread exited; it covers everything the daemon does: reading,
  rates, watchdog, snapshot publication, the event loop and thread hand-offs;
* the same with one /metrics scrape per second (so rendering is included): the
  figure to hold against node_exporter, which collects when scraped;
* /metrics latency with 20 concurrent keep-alive scrapers: p50/p99 (goal p99 <= 50 ms);
* the same for prometheus-node-exporter (``--path.sysfs`` on the same tree; its
  infiniband, netclass and ethtool collectors; the ethtool one needs real devices
  and finds none on a fixture), scraped once per second, and the ratios.

``--idle``: instead, the daemon with built-in defaults on this host (live /sys,
no configuration file: netdev by rtnetlink, ethtool by ioctl, RDMA sysfs, DCB,
PFC watchdog at 0.2 s), nobody scraping: % of one core (goal <= 0.3 %), against
the same daemon with the whole ethtool collector at the watchdog's 0.2 s (what
the watchdog cost before it read only the PFC counters), measured in the same run.

Usage: bench/bench_daemon.py [--seconds 30] [--windows 3] [--scrape-seconds 10] [--idle]
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "daemon"))

from daemon_helpers import Mlx5Host  # noqa: E402

from netio import native  # noqa: E402

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
    for dev in h.devices:  # node_exporter's infiniband collector skips a device without these
        d = h.sys / "class" / "infiniband" / dev
        (d / "fw_ver").write_text("22.36.1010\n")
        (d / "board_id").write_text("MT_0000000222\n")
        (d / "hca_type").write_text("MT4125\n")
    return h


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_ticks_s(pid: int) -> float:
    """utime + stime of the whole process (exited threads included), 10 ms resolution."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_threads_ns(pid: int) -> tuple[int, frozenset[str]]:
    """Run time of the process' live threads (ns), and which threads they are."""
    total, tids = 0, set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        tids.add(tid)
    return total, frozenset(tids)


class Window:
    """CPU of a process over a window: precise where no thread exited meanwhile."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.t0 = time.monotonic()
        self.ticks0 = cpu_ticks_s(pid)
        self.ns0, self.tids0 = cpu_threads_ns(pid)

    def close(self) -> tuple[float, float, bool]:
        """(seconds of wall time, CPU seconds, precise)."""
        ns1, tids1 = cpu_threads_ns(self.pid)
        ticks1 = cpu_ticks_s(self.pid)
        wall = time.monotonic() - self.t0
        if self.tids0 <= tids1:
            return wall, (ns1 - self.ns0) / 1e9, True
        return wall, ticks1 - self.ticks0, False


def cpu_windows(pid: int, windows: int, seconds: float,
                polls: Callable[[], float] | None = None) -> list[tuple[float, float, float]]:
    """(CPU fraction of one core, CPU ms per poll, precise) per window.  ``polls``
    (read between windows, outside them) counts the collector's runs."""
    out = []
    for _ in range(windows):
        p0 = polls() if polls else 0.0
        w = Window(pid)
        time.sleep(seconds)
        wall, cpu, precise = w.close()
        n = (polls() - p0) if polls else wall
        out.append((cpu / wall, cpu / max(n, 1.0) * 1e3, float(precise)))
    return out


def describe(ws: list[tuple[float, float, float]], seconds: float, per: str = "poll") -> str:
    frac = statistics.median(w[0] for w in ws)
    per_poll = statistics.median(w[1] for w in ws)
    each = " / ".join(f"{w[0] * 100:.2f}{'' if w[2] else '*'}" for w in ws)
    note = "" if all(w[2] for w in ws) else " (* a thread exited: 10 ms clock ticks)"
    return (f"median {frac * 100:.2f} % of one core = {per_poll:.2f} ms per {per}, over "
            f"{len(ws)} windows of {seconds:g} s: {each} %{note}")


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


def series_count(port: int, prefix: str = "") -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    return sum(1 for line in body.splitlines()
               if line and not line.startswith("#") and line.startswith(prefix))


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


def rdma_runs(port: int) -> float:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    mt = re.search(r'^netio_collector_runs_total\{collector="rdma"\} (\S+)$', body, re.M)
    if mt is None:
        raise SystemExit("no netio_collector_runs_total for rdma in /metrics")
    return float(mt.group(1))


class OncePerSecond:
    """A Prometheus stand-in: one /metrics scrape per second on its own connection."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            c.request("GET", "/metrics")
            c.getresponse().read()
            c.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def idle_mode(args: argparse.Namespace) -> int:
    """Built-in defaults on this host, idle; then the ethtool collector at 0.2 s."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-daemon-idle-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        results = []
        for label, text in (("defaults", None),
                            ("ethtool at 0.2 s", "[collectors.ethtool]\ninterval_s = 0.2\n")):
            port = free_port()
            argv = [sys.executable, "-m", "netio.cli.daemon", "--listen", f"127.0.0.1:{port}"]
            if text is not None:
                cfg = tmp / "peer.toml"
                cfg.write_text(text)
                argv += ["--config", str(cfg)]
            p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            wait_http(port, "/healthz")
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", "/metrics")
            body = c.getresponse().read().decode()
            names = sorted(set(re.findall(
                r'^netio_collector_runs_total\{collector="([^"]+)"\}', body, re.M)))
            time.sleep(3.0)
            ws = cpu_windows(p.pid, args.windows, args.seconds)
            print(f"netio-daemon idle, {label} (collectors: {', '.join(names)}): "
                  f"{describe(ws, args.seconds, 'second')}", flush=True)
            results.append(statistics.median(w[0] for w in ws))
            p.terminate()
            p.wait(10)
        print(f"idle CPU, defaults / ethtool at 0.2 s: {results[0] / results[1]:.3g}x "
              f"(goal: defaults <= 0.3 % of one core: {results[0] * 100:.3f} %)")
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0, help="CPU measurement window")
    ap.add_argument("--windows", type=int, default=3, help="windows per CPU figure (median)")
    ap.add_argument("--scrape-seconds", type=float, default=10.0)
    ap.add_argument("--no-keep-open", action="store_true",
                    help="open/read/close every counter file per poll (the fixture-tree default)")
    ap.add_argument("--idle", action="store_true",
                    help="built-in defaults on this host, nobody scraping (goal <= 0.3 %%)")
    args = ap.parse_args()
    if args.idle:
        return idle_mode(args)
    tmp = Path(tempfile.mkdtemp(prefix="bench-daemon-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        h = build_fixture(tmp / "host")
        keep_open = not args.no_keep_open

        def start(port: int, ethtool: bool) -> subprocess.Popen[bytes]:
            cfg = tmp / f"netio-{port}.toml"
            cfg.write_text(f"""
[daemon]
listen = "127.0.0.1:{port}"
sysfs_root = "{h.sys}"
[collectors.netdev]
interval_s = 1.0
keep_files_open = {str(keep_open).lower()}
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

        print(f"fixture: {DEVICES} RDMA devices x {COUNTERS_PER_DEVICE} counters, "
              f"{DEVICES} netdevs x {ETHTOOL_STATS_PER_IF} ethtool stats, 1 Hz, "
              f"counter files kept open: {keep_open}, native counter reader: "
              f"{native.AVAILABLE}", flush=True)
        # (a) collection CPU: the 8 x 300 RDMA counters (+ netdev), nobody scraping
        port = free_port()
        d = start(port, ethtool=False)
        time.sleep(3.0)
        cpu_series = series_count(port)
        idle = cpu_windows(d.pid, args.windows, args.seconds, lambda: rdma_runs(port))
        print(f"netio-daemon collection, {cpu_series} series, no scrapes: "
              f"{describe(idle, args.seconds)} (goal <= 1 %)", flush=True)
        scraper = OncePerSecond(port)
        time.sleep(2.0)
        scraped = cpu_windows(d.pid, args.windows, args.seconds)
        scraper.close()
        print(f"netio-daemon collection + 1 scrape/s: {describe(scraped, args.seconds)}",
              flush=True)
        d.terminate()
        d.wait(10)
        # (b) scrapes of ~10,000 series (ethtool passthrough added), 20 concurrent scrapers
        port = free_port()
        d = start(port, ethtool=True)
        time.sleep(3.0)
        n_series = series_count(port)
        lat = scrape_latencies(port, args.scrape_seconds)
        print(f"netio-daemon: {n_series} series with ethtool passthrough; 20 concurrent "
              f"scrapers, {len(lat)} scrapes: p50 {pct(lat, 0.5) * 1e3:.1f} ms, "
              f"p99 {pct(lat, 0.99) * 1e3:.1f} ms (goal p99 <= 50 ms), "
              f"mean {statistics.fmean(lat) * 1e3:.1f} ms", flush=True)
        d.terminate()
        d.wait(10)

        ne = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
        if ne is None:
            print("node_exporter: not installed (Debian prometheus-node-exporter); no comparison")
            return 0
        nport = free_port()
        n = subprocess.Popen([ne, f"--web.listen-address=127.0.0.1:{nport}",
                              f"--path.sysfs={h.sys}", "--collector.disable-defaults",
                              "--collector.infiniband", "--collector.netclass",
                              "--collector.ethtool"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(n)
        wait_http(nport, "/metrics")
        ne_series = series_count(nport)
        ne_ib = series_count(nport, "node_infiniband_")
        # node_exporter collects on scrape: a 1 Hz scraper is its "poll at 1 Hz"
        scraper = OncePerSecond(nport)
        time.sleep(2.0)
        ne_cpu = cpu_windows(n.pid, args.windows, args.seconds)
        scraper.close()
        ne_lat = scrape_latencies(nport, args.scrape_seconds)
        print(f"node_exporter (infiniband+netclass+ethtool): {ne_series} series "
              f"({ne_ib} infiniband: PMA counters only); 1 scrape/s: "
              f"{describe(ne_cpu, args.seconds)}")
        print(f"node_exporter: 20 concurrent scrapers, {len(ne_lat)} scrapes: "
              f"p50 {pct(ne_lat, 0.5) * 1e3:.1f} ms, p99 {pct(ne_lat, 0.99) * 1e3:.1f} ms")
        netio_1hz = statistics.median(w[0] for w in scraped)
        ne_1hz = statistics.median(w[0] for w in ne_cpu)
        print(f"ratio netio/node_exporter, both collecting and scraped at 1 Hz: CPU "
              f"{netio_1hz / ne_1hz:.3g}x, CPU per series "
              f"{(netio_1hz / cpu_series) / (ne_1hz / ne_series):.3g}x; scrape p99 "
              f"{pct(lat, 0.99) / pct(ne_lat, 0.99):.3g}x, scrape p99 per series "
              f"{(pct(lat, 0.99) / n_series) / (pct(ne_lat, 0.99) / ne_series):.3g}x")
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
