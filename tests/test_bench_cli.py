"""``netio bench``: both roles as separate processes over the tcp and soft backends,
perftest's columns, one JSON document per sweep, the fabric profile (read back by the
strict loader the models use), and usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from netio.fabric_profile import load_fabric_profile
from netio.perf.profile import fit_link
from netio.perf.spec import SWEEP_SIZES_BYTES, LatencyResult

REPO = Path(__file__).resolve().parents[1]
NETIO = [sys.executable, "-m", "netio.cli.main"]


def _server(backend: str, listen: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([*NETIO, "bench", "--backend", backend, "--listen", listen],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert "server on" in first, first
    return proc


def _client(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NETIO, "bench", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.mark.parametrize(("backend", "server_ip", "client_ip"), [
    ("tcp", "127.0.0.1", None), ("soft", "127.0.5.1", "127.0.5.2")])
def test_bandwidth_and_latency_columns(backend: str, server_ip: str,
                                       client_ip: str | None) -> None:
    extra = ["--local-addr", client_ip] if client_ip else []
    for mode, header in (("write_bw", "BW average[MiB/sec]"), ("send_lat", "t_typical[usec]"),
                         ("read_bw", "MsgRate[Mpps]"), ("read_lat", "99.9% percentile[usec]")):
        server = _server(backend, f"{server_ip}:18620")
        try:
            out = _client(mode, "--backend", backend, "-s", "4096", "-n", "50", *extra,
                          f"{server_ip}:18620")
            assert out.returncode == 0, out.stderr
            lines = out.stdout.splitlines()
            assert header in lines[1]
            row = lines[2].split()
            assert row[0] == "4096" and row[1] == "50"
            assert all(float(v) >= 0 for v in row[2:])
            assert server.wait(30) == 0
        finally:
            server.kill()
            server.wait()


def test_json_sweep_is_one_document() -> None:
    server = _server("tcp", "127.0.0.1:18621")
    try:
        out = _client("send_bw", "--backend", "tcp", "-a", "-n", "8", "--json",
                      "127.0.0.1:18621")
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc["schema"] == "netio.bench" and doc["mode"] == "send_bw"
        assert [r["message_bytes"] for r in doc["results"]] == [1 << k for k in range(1, 24)]
        assert all(r["bw_average_bytes_per_s"] > 0 for r in doc["results"])
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize("rx_mode", ["udp", "auto"])
def test_soft_send_lat_sweep_in_one_call_per_side(rx_mode: str) -> None:
    """send_lat over soft runs its ping-pong in one call into C per side, at every size of
    the sweep (one packet up to 2048 at MTU 4096), in either receive mode."""
    server = _server("soft", "127.0.5.11:18623")
    try:
        out = _client("send_lat", "--backend", "soft", "--rx-mode", rx_mode, "-a", "-n", "8",
                      "--json", "--local-addr", "127.0.5.12", "127.0.5.11:18623")
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        sizes = [r["message_bytes"] for r in doc["results"]]
        assert sizes == [1 << k for k in range(1, 24)]
        typical = [r["t_typical_s"] for r in doc["results"]]
        assert all(t > 0 for t in typical)
        # 8 MiB each way takes longer than 2 B (2048 packets against one)
        assert typical[-1] > 10 * typical[0]
        assert server.wait(30) == 0
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize(("backend", "server_ip", "client_ip"), [
    ("tcp", "127.0.0.1", None), ("soft", "127.0.5.21", "127.0.5.22")])
def test_profile_is_valid_for_the_models(tmp_path: Path, backend: str, server_ip: str,
                                         client_ip: str | None) -> None:
    server = _server(backend, f"{server_ip}:18622")
    out_file = tmp_path / "link.json"
    extra = ["--local-addr", client_ip] if client_ip else []
    try:
        out = _client("--backend", backend, "-n", "8", "--profile", str(out_file), *extra,
                      f"{server_ip}:18622", timeout_s=300)
        assert out.returncode == 0, out.stderr
        assert "profile: alpha" in out.stdout
        profile = load_fabric_profile(out_file)  # the strict loader netio-model uses
        assert profile.backend == backend
        assert [p.message_bytes for p in profile.points] == list(SWEEP_SIZES_BYTES)
        assert profile.fit.alpha_s >= 0 and profile.fit.beta_s_per_byte > 0
        assert all(0 < e.efficiency <= 1 for e in profile.efficiency)
        assert server.wait(30) == 0
    finally:
        server.kill()
        server.wait()


def test_fit_recovers_a_postal_link() -> None:
    # a link with alpha = 5 us and 10 GB/s: t(n) = 5e-6 + n / 1e10 exactly
    sizes = [64, 4096, 65536, 1 << 20, 8 << 20]
    latency = [5e-6 + n / 1e10 for n in sizes]
    fit = fit_link(sizes, latency)
    assert fit.beta_s_per_byte == pytest.approx(1e-10)
    assert fit.alpha_s == pytest.approx(5e-6, rel=1e-9)
    assert fit.max_relative_error < 1e-9


def test_latency_percentiles_follow_perftest() -> None:
    # perftest: sorted samples, p99 at index ceil(0.99 n) - 1; typical = median
    samples = [float(v) for v in range(1, 1001)]
    r = LatencyResult.from_samples(8, samples[::-1], 0.5, 0.5)
    assert (r.t_min_us, r.t_max_us, r.p99_us, r.p999_us) == (1.0, 1000.0, 990.0, 999.0)
    assert r.t_typical_us == 500.5


@pytest.mark.parametrize(("args", "match"), [
    (["write_bw", "-s", "0", "127.0.0.1:1"], "message size 0"),
    (["bogus_mode", "extra", "127.0.0.1:1"], "unexpected argument"),
    (["--profile", "x.json"], "give SERVER"),
    (["send_lat", "-q", "2", "127.0.0.1:1"], "one endpoint"),
    (["atomic_bw", "-s", "64", "127.0.0.1:1"], "8-byte"),
])
def test_usage_errors(args: list[str], match: str) -> None:
    out = _client(*args, "--backend", "tcp")
    assert out.returncode == 2
    assert match in out.stderr and out.stderr.count("\n") == 1


def test_no_server_is_a_failure_with_a_json_error() -> None:
    t0 = time.monotonic()
    out = _client("write_bw", "--backend", "tcp", "--json", "--timeout", "2", "127.0.0.1:9")
    assert out.returncode == 4  # ExitCode.FAILED
    assert "error" in json.loads(out.stdout)
    assert time.monotonic() - t0 < 20
