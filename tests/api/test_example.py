"""README's IO API example runs as documented: two processes, the bytes land in the
server's numpy array, and the client reads a clear error once the server is gone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("backend", "port"), [("soft", 7481), ("tcp", 7482)])
def test_write_into_numpy_example(backend: str, port: int) -> None:
    addr = f"127.0.0.1:{port}"
    out = subprocess.run([sys.executable, "examples/write_into_numpy.py", "--backend", backend,
                          "--listen", addr, "--connect", addr], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the array holds the 4194304 written bytes" in out.stdout
    assert "after the server left: RDMA_WRITE of 4096 bytes: peer gone [RETRY_EXC_ERR (12)]" \
        in out.stdout
    assert "Traceback" not in out.stderr
