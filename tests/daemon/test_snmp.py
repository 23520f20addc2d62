"""SNMP collector against a real net-snmp agent (snmpd on a loopback high port).

The agent serves IF-MIB and IEEE8021-PFC-MIB rows through a ``pass_persist``
script reading a JSON state file the test changes.  The agent is stopped
mid-run and restarted: the target is reported down with back-off, the other
collectors keep going, and it recovers.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from daemon_helpers import FIXTURES, Mlx5Host, http_get, need_tool, parse_exposition, running_daemon

from netio.daemon.config import parse_config


def udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Snmpd:
    def __init__(self, tmp: Path, port: int, state: Path) -> None:
        self.tmp, self.port, self.state = tmp, port, state
        script = FIXTURES / "snmp_pass_persist.py"
        conf = tmp / "snmpd.conf"
        lines = [f"agentAddress udp:127.0.0.1:{port}", "rocommunity public 127.0.0.1"]
        for oid in (".1.3.6.1.2.1.2.2.1", ".1.3.6.1.2.1.31.1.1.1", ".1.3.111.2.802.1.1.21.1.1.1"):
            lines.append(f"pass_persist -p 1 {oid} {sys.executable} {script} {state}")
        conf.write_text("\n".join(lines) + "\n")
        self.conf = conf
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        snmpd = need_tool("snmpd")
        env = {**os.environ, "SNMP_PERSISTENT_DIR": str(self.tmp / "persist"), "MIBS": ""}
        self.proc = subprocess.Popen(
            [snmpd, "-f", "-C", "-c", str(self.conf), "-Lf", str(self.tmp / "snmpd.log"),
             "-I", "-ifTable,ifXTable,ifInfo"], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        snmpget = need_tool("snmpget")
        end = time.monotonic() + 20
        while time.monotonic() < end:
            r = subprocess.run([snmpget, "-v2c", "-c", "public", "-t", "0.5", "-r", "0", "-On",
                                f"127.0.0.1:{self.port}", ".1.3.6.1.2.1.31.1.1.1.1.1"],
                               capture_output=True, text=True, timeout=10,
                               env={**os.environ, "MIBS": ""})
            if r.returncode == 0 and "swp1" in r.stdout:
                return
            time.sleep(0.2)
        raise AssertionError("snmpd did not come up: " + (self.tmp / "snmpd.log").read_text())

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def write_state(path: Path, pfc_requests: int, in_octets: int) -> None:
    path.write_text(json.dumps({"interfaces": [
        {"index": 1, "name": "swp1", "speed_mbps": 100000, "oper": 1, "in_octets": in_octets,
         "out_octets": 5, "in_ucast": 10, "out_ucast": 20, "in_discards": 1, "out_discards": 2,
         "in_errors": 0, "out_errors": 0, "pfc_requests": pfc_requests, "pfc_indications": 7},
        {"index": 2, "name": "swp2", "speed_mbps": 25000, "oper": 2, "in_octets": 0,
         "out_octets": 0, "pfc_requests": 0, "pfc_indications": 0},
        {"index": 3, "name": "mgmt0", "speed_mbps": 1000, "oper": 1, "in_octets": 0,
         "out_octets": 0},
    ]}) + "\n")


def wait_for(pred, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


@pytest.mark.slow
@pytest.mark.tools
def test_snmp_real_agent_down_and_back(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    write_state(state, 2**32 - 100, 1000)
    port = udp_port()
    agent = Snmpd(tmp_path, port, state)
    agent.start()
    h = Mlx5Host(tmp_path / "h")
    cfg = parse_config({
        "daemon": {"listen": "127.0.0.1:0", "sysfs_root": str(h.sys)},
        "collectors": {"netdev": {"interval_s": 0.2}, "ethtool": {"enabled": False},
                       "rdma": {"interval_s": 0.2}},
        "snmp": [
            {"name": "leaf1", "host": "127.0.0.1", "port": port, "interval_s": 0.5,
             "timeout_s": 0.5, "retries": 0, "backoff_max_s": 1.0,
             "interfaces_exclude": ["mgmt*"]},
            {"name": "dead", "host": "127.0.0.1", "port": udp_port(), "interval_s": 0.5,
             "timeout_s": 0.3, "retries": 0, "backoff_max_s": 2.0},
        ],
    })
    try:
        with running_daemon(cfg) as d:
            def metrics() -> dict:  # type: ignore[type-arg]
                return parse_exposition(http_get(d.port, "/metrics")[2].decode())

            wait_for(lambda: "snmp:leaf1" in d.snapshot.collections
                     and d.snapshot.collections["snmp:leaf1"].faults == ()
                     and "snmp:dead" in d.snapshot.collections)
            v = metrics()
            sw1 = (("interface", "swp1"), ("target", "leaf1"))
            assert v[("netio_switch_up", (("target", "leaf1"),))] == 1
            assert v[("netio_switch_bytes_total", (("direction", "rx"), *sw1))] == 1000
            assert v[("netio_switch_pfc_indications_total", sw1)] == 7
            assert v[("netio_switch_speed_bytes_per_second", sw1)] == 100e9 / 8
            assert v[("netio_switch_interface_up", (("interface", "swp2"),
                                                    ("target", "leaf1")))] == 0
            assert not any(dict(lbl).get("interface") == "mgmt0" for _n, lbl in v)
            assert v[("netio_switch_up", (("target", "dead"),))] == 0
            # the Counter32 PFC counter wraps: the rate stays positive and right
            first = d.snapshot.collections["snmp:leaf1"].ts_ns
            write_state(state, 300, 1000 + 10**9)
            wait_for(lambda: d.snapshot.collections["snmp:leaf1"].ts_ns > first and any(
                s.pfc_requests_per_s for s in d.snapshot.profile.switch_interfaces))
            prof = {s.interface: s for s in d.snapshot.profile.switch_interfaces}
            assert prof["swp1"].pfc_requests_per_s is not None
            assert prof["swp1"].pfc_requests_per_s > 0
            rx_bps = prof["swp1"].rx_bps
            assert rx_bps is not None and rx_bps > 0
            # 400 frames over the same interval as 1e9 bytes: the ratio is exact
            assert prof["swp1"].pfc_requests_per_s / (rx_bps / 8) == pytest.approx(400 / 1e9)
            # the agent goes away mid-run
            agent.stop()
            rdma_runs = d.health["rdma"].runs
            wait_for(lambda: metrics().get(("netio_switch_up", (("target", "leaf1"),))) == 0)
            v = metrics()
            assert v[("netio_switch_up", (("target", "leaf1"),))] == 0
            assert v[("netio_switch_backoff_seconds", (("target", "leaf1"),))] > 0
            assert v[("netio_collector_faults_total", (("collector", "snmp:leaf1"),
                                                       ("kind", "down")))] >= 1
            last_ok = ("netio_collector_last_success_timestamp_seconds",
                       (("collector", "snmp:leaf1"),))
            frozen = v[last_ok]
            # a dead switch blocks nobody
            wait_for(lambda: d.health["rdma"].runs >= rdma_runs + 5)
            doc = json.loads(http_get(d.port, "/healthz")[2])
            assert doc["status"] == "degraded"
            # and its last success stays where it was: an alert on its age fires
            assert metrics()[last_ok] == frozen
            leaf = doc["collectors"]["snmp:leaf1"]
            assert leaf["up"] is False
            assert leaf["last_success_age_s"] == pytest.approx(time.time() - frozen, abs=0.5)
            # and it comes back
            agent.start()
            wait_for(lambda: metrics().get(("netio_switch_up", (("target", "leaf1"),))) == 1,
                     timeout=30)
    finally:
        agent.stop()
