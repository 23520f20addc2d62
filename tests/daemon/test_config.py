"""Configuration: every error names the key and why; the example file is valid."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from daemon_helpers import REPO

from netio.daemon.config import load_config, parse_config
from netio.errors import ConfigError


def test_example_config_is_valid() -> None:
    cfg = load_config(str(REPO / "daemon" / "netio-daemon.toml"))
    assert cfg.daemon.listen == "0.0.0.0:9935"
    assert [a.name for a in cfg.alarms] == ["cnp_surge", "rx_buffer_drops"]
    assert not cfg.netdev.devices("lo") and cfg.netdev.devices("eth0")


def test_defaults() -> None:
    cfg = parse_config({})
    assert cfg.watchdog.detection_time_s == 0.2 and cfg.capture.enabled is False


@pytest.mark.parametrize(("data", "key", "why"), [
    ({"daemon": {"listen": "nope"}}, "daemon.listen", "HOST:PORT"),
    ({"daemon": {"listne": "x"}}, "daemon.listne", "unknown key"),
    ({"collectors": {"rdma": {"interval_s": -1}}}, "collectors.rdma.interval_s", "> 0"),
    ({"collectors": {"rdma": {"interval_s": "1s"}}}, "collectors.rdma.interval_s", "number"),
    ({"collectors": {"netdev": {"source": "proc"}}}, "collectors.netdev.source", "one of"),
    ({"collectors": {"netdev": {"keep_files_open": "yes"}}},
     "collectors.netdev.keep_files_open", "true or false"),
    ({"collectors": {"rdma": {"keep_files_open": 1}}}, "collectors.rdma.keep_files_open",
     "true or false"),
    ({"collectors": {"ethtool": {"source": "text"}}}, "collectors.ethtool.text_dir",
     "required"),
    ({"collectors": {"ethtool": {"devices_include": "eth*"}}},
     "collectors.ethtool.devices_include", "list"),
    ({"snmp": [{"name": "a"}]}, "snmp[0].host", "required"),
    ({"snmp": [{"name": "a", "host": "h", "port": 70000}]}, "snmp[0].port", "1..65535"),
    ({"snmp": [{"name": "a", "host": "h"}, {"name": "a", "host": "g"}]}, "snmp[1].name",
     "duplicate"),
    ({"snmp": [{"name": "a", "host": "h", "pfc_priority_requests_oid": "abc"}]},
     "snmp[0].pfc_priority_requests_oid", "numeric OID"),
    ({"watchdog": {"min_paused_ratio": 2}}, "watchdog.min_paused_ratio", "<= 1"),
    ({"capture": {"ring_files": 0}}, "capture.ring_files", "1..1000"),
    ({"alarm": [{"name": "a", "metric": "m"}]}, "alarm[0]", "exactly one"),
    ({"alarm": [{"name": "a", "metric": "m", "rate_above": 1, "labels": {"x": 1}}]},
     "alarm[0].labels.x", "string"),
    ({"bogus": 1}, "bogus", "unknown key"),
])
def test_errors_name_key_and_reason(data: dict[str, object], key: str, why: str) -> None:
    with pytest.raises(ConfigError) as ei:
        parse_config(data)
    assert ei.value.key == key
    assert why in ei.value.reason


def test_bad_toml_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("[daemon]\nlisten = \n")
    with pytest.raises(ConfigError) as ei:
        load_config(str(p))
    assert str(p) in str(ei.value) and "line 2" in str(ei.value)


def test_daemon_refuses_to_start_with_a_bad_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("[collectors.rdma]\ninterval_s = 0\n")
    r = subprocess.run([sys.executable, "-m", "netio.cli.daemon", "--config", str(p)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3  # ExitCode.UNREADABLE: the file cannot be used
    assert "collectors.rdma.interval_s: must be > 0" in r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "netio.cli.daemon", "--check-config",
                        "--config", str(REPO / "daemon" / "netio-daemon.toml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
