"""pytest fixtures for the netio-daemon tests (helpers live in daemon_helpers)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from daemon_helpers import RXE_TAR, Mlx5Host


@pytest.fixture
def mlx5_host(tmp_path: Path) -> Mlx5Host:
    return Mlx5Host(tmp_path / "host")


@pytest.fixture
def rxe_root(tmp_path: Path) -> Path:
    """The real rxe sysfs snapshot from the lab, extracted; returns its sysfs root."""
    if not RXE_TAR.exists():
        pytest.fail(f"missing {RXE_TAR} (the shared rxe-lab checkout)")
    dest = tmp_path / "rxe"
    with tarfile.open(RXE_TAR) as tar:
        tar.extractall(dest, filter="data")
    return dest / "sys"
