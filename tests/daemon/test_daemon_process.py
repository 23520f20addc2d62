"""netio-daemon as a process: SIGHUP reloads (a bad file keeps the old config), SIGTERM stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from daemon_helpers import Mlx5Host, free_port, http_get, parse_exposition


def wait_http(port: int, path: str = "/healthz", timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if http_get(port, path, timeout=2)[0] in (200, 503):
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"daemon not serving on {port}")


def test_sighup_reload_and_sigterm(tmp_path: Path) -> None:
    h = Mlx5Host(tmp_path / "h")
    port = free_port()
    cfg = tmp_path / "d.toml"

    def write(rdma_enabled: bool, extra: str = "") -> None:
        cfg.write_text(f"""
[daemon]
listen = "127.0.0.1:{port}"
sysfs_root = "{h.sys}"
[collectors.netdev]
interval_s = 0.2
[collectors.ethtool]
enabled = false
[collectors.rdma]
enabled = {str(rdma_enabled).lower()}
interval_s = 0.2
{extra}
""")

    write(True)
    log = (tmp_path / "log").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "netio.cli.daemon", "--config", str(cfg)],
                            stderr=log, stdout=subprocess.DEVNULL)
    try:
        wait_http(port)
        time.sleep(0.5)
        v = parse_exposition(http_get(port, "/metrics")[2].decode())
        assert ("netio_collector_up", (("collector", "rdma"),)) in v
        # good reload: rdma off
        write(False)
        proc.send_signal(signal.SIGHUP)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            doc = json.loads(http_get(port, "/healthz")[2])
            if "rdma" not in doc["collectors"]:
                break
            time.sleep(0.1)
        assert "rdma" not in doc["collectors"]
        # a removed collector's series are gone, not frozen
        v = parse_exposition(http_get(port, "/metrics")[2].decode())
        assert not [k for k in v if dict(k[1]).get("collector") == "rdma"
                    or k[0].startswith("netio_rdma_")], sorted(k for k in v if "rdma" in str(k))
        # bad reload: the running configuration stays, the failure is counted and logged
        write(True, "[watchdog]\ndetection_time_s = -1\n")
        proc.send_signal(signal.SIGHUP)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            v = parse_exposition(http_get(port, "/metrics")[2].decode())
            if v.get(("netio_config_reloads_total", (("outcome", "failure"),))) == 1:
                break
            time.sleep(0.1)
        assert v[("netio_config_reloads_total", (("outcome", "failure"),))] == 1
        assert v[("netio_config_reloads_total", (("outcome", "success"),))] == 1
        assert v[("netio_config_last_reload_successful", ())] == 0
        assert "rdma" not in json.loads(http_get(port, "/healthz")[2])["collectors"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log.seek(0)
    events = [json.loads(line) for line in log if line.startswith("{")]
    names = [e["event"] for e in events]
    assert names[0] == "started" and names[-1] == "stopped"
    failed = next(e for e in events if e["event"] == "config_reload_failed")
    assert "watchdog.detection_time_s" in failed["error"]


def test_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "netio.cli.daemon", "--listen",
                            f"127.0.0.1:{port}", "--sysfs-root", str(tmp_path)],
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert r.returncode == 4  # ExitCode.FAILED
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr
