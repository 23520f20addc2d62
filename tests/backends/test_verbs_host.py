"""The verbs backend where there is no RDMA (this host): importing it needs no pyverbs,
opening it says why it cannot and how to get a device. The lab tests
(tests/lab/test_lab_verbs_backend.py) cover the backend against the kernel's rxe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from netio.backends.verbs import mtu_bytes_of, mtu_enum

NO_RDMA = not Path("/sys/class/infiniband").is_dir()


def test_mtu_enum_is_ibverbs() -> None:
    # enum ibv_mtu: IBV_MTU_256 = 1, 512 = 2, 1024 = 3, 2048 = 4, 4096 = 5
    assert [mtu_enum(m) for m in (256, 512, 1024, 2048, 4096)] == [1, 2, 3, 4, 5]
    assert [mtu_bytes_of(e) for e in (0, 1, 3, 5, 6)] == [0, 256, 1024, 4096, 0]
    with pytest.raises(ValueError, match="path MTU 1500"):
        mtu_enum(1500)


def test_import_needs_no_pyverbs() -> None:
    code = ("import sys, netio, netio.backends.verbs, netio.backends.gid; "
            "print('pyverbs' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.strip() == "False"


@pytest.mark.skipif(not NO_RDMA, reason="this host has RDMA devices")
def test_open_without_rdma_says_how() -> None:
    """DeviceNotFound naming rxe when pyverbs is there, BackendUnavailable naming the
    Debian package when it is not; never a bare PyverbsRDMAError."""
    code = ("from netio.errors import DeviceNotFound, BackendUnavailable\n"
            "from netio.backends.verbs import VerbsBackend\n"
            "try:\n    VerbsBackend(peer_ip='127.0.0.1')\n"
            "except (DeviceNotFound, BackendUnavailable) as e:\n"
            "    print(type(e).__name__ + ' | ' + e.hint)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    name, hint = proc.stdout.strip().split(" | ", 1)
    if name == "BackendUnavailable":
        assert "apt-get install python3-pyverbs" in hint
    else:
        assert name == "DeviceNotFound"
        assert "modprobe rdma_rxe; rdma link add rxe0 type rxe netdev lo" not in hint
        assert "modprobe rdma_rxe; rdma link add rxe0 type rxe netdev " in hint
        assert "backend='soft'" in hint


def test_pyverbs_linked_into_the_venv_only() -> None:
    """tools/link-pyverbs: the venv sees pyverbs (when Debian's package is installed) and
    no other Debian module."""
    if not Path("/usr/lib/python3/dist-packages/pyverbs").is_dir():
        pytest.skip("python3-pyverbs is not installed")
    code = ("import pyverbs.device, importlib.util as u; "
            "import sys; print(pyverbs.device.__file__); "
            "print(u.find_spec('apt_pkg') is None "
            "and '/usr/lib/python3/dist-packages' not in sys.path)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    path, isolated = proc.stdout.split()
    assert "/pyverbs/device.cpython-311" in path
    assert isolated == "True"
