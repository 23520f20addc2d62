"""``netio doctor``: the candidates, the verdict and the exit codes, on this host (no RDMA),
on the real rxe sysfs snapshot, and on a hand-made tree whose only port is down. The
guest run (real rxe) is in tests/lab/test_lab_verbs_backend.py."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SNAPSHOT = Path(__file__).resolve().parents[1] / ".." / "shared" / "rxe-lab" / "sysfs-rxe-g0.tar"
PYVERBS = Path("/usr/lib/python3/dist-packages/pyverbs").is_dir()


def doctor(*args: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "netio.cli.main", "doctor", *args],
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.skipif(Path("/sys/class/infiniband").is_dir(), reason="this host has RDMA")
def test_host_without_rdma_points_at_rxe_and_soft() -> None:
    rc, out = doctor("127.0.0.1")
    assert rc == 1, out  # ExitCode.FOUND: no RDMA device
    assert "chosen: none" in out
    assert "modprobe rdma_rxe; rdma link add rxe0 type rxe netdev" in out
    assert "backend='soft'" in out


def test_snapshot_explains_the_choice(tmp_path: Path) -> None:
    if not SNAPSHOT.is_file():
        pytest.skip("the rxe lab snapshot is not here")
    with tarfile.open(SNAPSHOT) as tar:
        tar.extractall(tmp_path, filter="data")
    root = str(tmp_path / "sys")
    rc, out = doctor("--sysfs-root", root, "--via", "eth0,10.77.0.10", "--json", "10.77.0.11")
    doc = json.loads(out)
    assert rc == (0 if PYVERBS else 5), out
    assert doc["exit_code"] == rc
    d = doc["description"]
    assert (d["device"], d["gid_index"], d["gid"], d["mtu_bytes"]) == (
        "rxe0", 1, "::ffff:10.77.0.10", 1024)
    reasons = [c["reason"] for c in d["candidates"]]
    assert "link-local" in reasons[0] and reasons[1].startswith("chosen:")
    # the route leaves through another netdev: every GID is rejected, exit 4
    rc, out = doctor("--sysfs-root", root, "--via", "eth9", "10.77.0.11")
    assert rc == 1, out  # ExitCode.FOUND: every GID rejected
    assert "on netdev eth0, the route to 10.77.0.11 leaves through eth9" in out
    # text output: one line per candidate, the chosen one marked
    rc, out = doctor("--sysfs-root", root, "--via", "eth0", "10.77.0.11")
    assert "  * rxe0 port 1 gid[1] ::ffff:10.77.0.10 RoCE v2 eth0 mtu 1024: chosen" in out
    assert "  - rxe0 port 1 gid[0] fe80::5054:ff:fe77:a RoCE v2 eth0 mtu 1024: link-local" in out


def test_port_down_and_bad_peer(tmp_path: Path) -> None:
    port = tmp_path / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True)
    (port / "state").write_text("1: DOWN\n")
    (port / "link_layer").write_text("Ethernet\n")
    (port / "gids" / "3").write_text("0000:0000:0000:0000:0000:ffff:c0a8:0105\n")
    (port / "gid_attrs" / "types" / "3").write_text("RoCE v2\n")
    (port / "gid_attrs" / "ndevs" / "3").write_text("eth2\n")
    (tmp_path / "sys" / "class" / "net" / "eth2").mkdir(parents=True)
    (tmp_path / "sys" / "class" / "net" / "eth2" / "mtu").write_text("9000\n")
    rc, out = doctor("--sysfs-root", str(tmp_path / "sys"), "--via", "eth2", "192.168.1.9")
    assert rc == 1, out  # ExitCode.FOUND: every GID rejected
    assert ("  - mlx5_0 port 1 gid[3] ::ffff:192.168.1.5 RoCE v2 eth2 mtu 4096: "
            "port not active (state 1: DOWN)") in out
    rc, out = doctor("no-such-host.invalid")
    assert rc == 2 and "does not resolve" in out
