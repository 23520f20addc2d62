"""netio-daemon as an operator meets it: --once, --check-config, bad files and
options (one line naming what and where, exit 2, no traceback), SIGHUP onto a
busy port, promtool on every metric the daemon can export."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_helpers import (
    Mlx5Host,
    call_in_loop,
    free_port,
    http_get,
    need_tool,
    parse_exposition,
    running_daemon,
)

from netio.cli import daemon as cli
from netio.daemon.config import load_config, parse_config
from netio.errors import ConfigError


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_once_prints_what_it_collected(rxe_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(capsys, "--once", "--sysfs-root", str(rxe_root), "--log-format", "text")
    assert code == 0, err
    v = parse_exposition(out)
    # the collectors' samples, not only the daemon's own health
    assert v[("netio_rdma_packets_total",
              (("device", "rxe0"), ("direction", "rx"), ("port", "1")))] == 87123
    assert v[("netio_network_mtu_bytes", (("device", "eth0"),))] == 1500
    assert v[("netio_collector_up", (("collector", "rdma"),))] == 1
    code, out, err = _main(capsys, "--once", "--json", "--sysfs-root", str(rxe_root),
                           "--log-format", "text")
    assert code == 0, err
    doc = json.loads(out)
    assert [p["device"] for p in doc["rdma_ports"]] == ["rxe0"]
    assert doc["rdma_ports"][0]["capacity_bps"] == 2.5e9
    assert [i["name"] for i in doc["interfaces"]] == ["eth0"]


def test_promtool_accepts_every_metric_including_passthrough(
        mlx5_host: Mlx5Host, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    promtool = need_tool("promtool")
    cfg = tmp_path / "d.toml"
    cfg.write_text(f"""
[daemon]
sysfs_root = "{mlx5_host.sys}"
log_format = "text"
[collectors.ethtool]
source = "text"
text_dir = "{mlx5_host.ethtool_dir}"
passthrough_unknown = true
[collectors.rdma]
passthrough_unknown = true
""")
    code, out, err = _main(capsys, "--once", "--config", str(cfg))
    assert code == 0, err
    assert "netio_rdma_stat{" in out and "netio_ethtool_stat{" in out
    r = subprocess.run([promtool, "check", "metrics"], input=out, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_help_names_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ei:
        cli.main(["--help"])
    assert ei.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for code in ("0 after a clean stop", "2 a bad option", "3 a bad configuration",
                 "4 when the listen address cannot be bound", "130 when interrupted"):
        assert code in text


def test_json_needs_once(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ei:
        cli.main(["--json"])
    assert ei.value.code == 2
    assert "--json needs --once" in capsys.readouterr().err


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("netio-daemon: configuration error: ")
    return lines[0]


@pytest.mark.parametrize(("toml", "key", "why"), [
    ('[daemon]\nlisten = "999.1.1.1:9935"\n', "daemon.listen", "not an IPv4 address"),
    ('[daemon]\nlisten = "[::1:9935"\n', "daemon.listen", "bracketed IPv6"),
    ('[daemon]\nlisten = "::1:9935"\n', "daemon.listen", "in brackets ([::1]:9935)"),
    ('[daemon]\nlisten = "bad host:9935"\n', "daemon.listen", "not an IP address or host name"),
    ("[collectors.netdev]\ninterval_s = nan\n", "collectors.netdev.interval_s", "finite"),
    ("[watchdog]\ndetection_time_s = inf\n", "watchdog.detection_time_s", "finite"),
    ('[daemon]\nsysfs_root = "/nonexistent/sys"\n', "daemon.sysfs_root", "not a directory"),
    ('[capture]\nenabled = true\ntcpdump_path = "/nonexistent/tcpdump"\n',
     "capture.tcpdump_path", "not an executable"),
    ('[[alarm]]\nname = "cnp"\nmetric = "netio_rdma_cnp_total"\nrate_above = 1.0\n',
     "alarm[0].metric", "known metrics: "),
])
def test_bad_configuration_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       toml: str, key: str, why: str) -> None:
    p = tmp_path / "d.toml"
    p.write_text(toml)
    code, _, err = _main(capsys, "--check-config", "--config", str(p))
    assert code == cli.EXIT_CONFIG
    line = _one_line_error(err)
    assert f"{p}: {key}: " in line and why in line


@pytest.mark.parametrize("listen", ["[::1]:9935", "localhost:9935", ":9935", "10.0.0.1:0",
                                    "node-17.example.org:9935"])
def test_listen_forms_that_are_accepted(listen: str) -> None:
    assert parse_config({"daemon": {"listen": listen}}).daemon.listen == listen


def test_binary_files_and_yaml_errors_are_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\xff\xfe\x00\x01binary")
    code, _, err = _main(capsys, "--check-config", "--config", str(garbage))
    assert code == 3 and "not UTF-8 text" in _one_line_error(err)  # ExitCode.UNREADABLE
    code, _, err = _main(capsys, "--check-config", "--web-config", str(garbage))
    assert code == 3 and "not UTF-8 text" in _one_line_error(err)  # ExitCode.UNREADABLE
    bad_yaml = tmp_path / "w.yml"
    bad_yaml.write_text("basic_auth_users:\n  a: b\n c: [\n")
    code, _, err = _main(capsys, "--check-config", "--web-config", str(bad_yaml))
    line = _one_line_error(err)
    assert code == 3 and "not valid YAML" in line and "(line 3, column" in line
    missing = tmp_path / "w2.yml"
    missing.write_text("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /k\n")
    code, _, err = _main(capsys, "--check-config", "--web-config", str(missing))
    assert "tls_server_config.cert_file: cannot read /nonexistent.crt" in _one_line_error(err)
    weak = tmp_path / "w3.yml"
    weak.write_text("basic_auth_users:\n  prom: $2y$10$short\n")
    code, _, err = _main(capsys, "--check-config", "--web-config", str(weak))
    assert "basic_auth_users.prom: must be a bcrypt hash" in _one_line_error(err)


def test_missing_sysfs_root_option_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(capsys, "--once", "--sysfs-root", "/nonexistent/sys")
    assert code == 2 and out == ""
    assert "--sysfs-root: '/nonexistent/sys' is not a directory" in _one_line_error(err)


def test_sighup_onto_a_busy_port_keeps_serving(mlx5_host: Mlx5Host, tmp_path: Path) -> None:
    old_port = free_port()
    cfg = tmp_path / "d.toml"

    def write(port: int) -> None:
        cfg.write_text(f'[daemon]\nlisten = "127.0.0.1:{port}"\nsysfs_root = "{mlx5_host.sys}"\n'
                       "[collectors.ethtool]\nenabled = false\n")

    write(old_port)
    with socket.socket() as busy, running_daemon(load_config(str(cfg)),
                                                  config_path=str(cfg)) as d:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        write(busy.getsockname()[1])
        assert call_in_loop(d, d.reload) is False
        assert http_get(old_port, "/healthz")[0] == 200  # still serving, old address
        v = parse_exposition(http_get(old_port, "/metrics")[2].decode())
        assert v[("netio_config_reloads_total", (("outcome", "failure"),))] == 1
        assert d.config.daemon.listen == f"127.0.0.1:{old_port}"
        new_port = free_port()
        write(new_port)
        assert call_in_loop(d, d.reload) is True
        assert http_get(new_port, "/healthz")[0] == 200
        with pytest.raises(OSError):
            http_get(old_port, "/healthz", timeout=2)


def test_collector_sources_import_pyroute2_on_the_constructing_thread() -> None:
    # Two collector threads importing pyroute2 for the first time at once fail
    # inside pyroute2 (circular imports); the daemon builds its sources on the
    # loop thread, so they must import there.
    code = (
        "import sys\n"
        "from netio.telemetry.ethtool import IoctlEthtoolSource\n"
        "assert 'pyroute2' not in sys.modules\n"
        "IoctlEthtoolSource()\n"
        "assert 'pyroute2.ethtool.ioctl' in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_config_error_is_a_value_error_naming_the_key() -> None:
    with pytest.raises(ConfigError) as ei:
        parse_config({"collectors": {"rdma": {"interval_s": float("nan")}}})
    assert ei.value.key == "collectors.rdma.interval_s" and isinstance(ei.value, ValueError)
