"""The real-kernel RoCE lab (``../shared/rxe-lab``) for netio's interop tests.

One session-wide :class:`LabSession` boots the lab (one guest running Linux
rxe) on first use and stops it at the end. Tests ask for the rxe MTU they need
through the ``lab1500`` (IB MTU 1024) or ``lab9000`` (IB MTU 4096) fixtures;
the session reboots the lab when the netdev MTU changes, and the test items
are ordered so that happens once. netio runs as a subprocess inside the lab's
network namespace (``ip netns exec``), bound to the host side address.

Environment: ``RXE_LAB_NS`` / ``RXE_LAB_RUN`` / ``RXE_LAB_SUBNET`` select
another lab instance (they are passed to the lab scripts); ``NETIO_LAB_KEEP=1``
leaves the lab running after the session.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB_DIR = (REPO / ".." / "shared" / "rxe-lab").resolve()
LAB_RUN = os.environ.get("RXE_LAB_RUN", "/run/rxe-lab")
BOOT_TIMEOUT_S = 300


def _rxelab() -> Any:
    """The lab's Python module, imported when a lab test first needs it (so that
    collecting these tests works where ../shared is absent)."""
    if str(LAB_DIR) not in sys.path:
        sys.path.insert(0, str(LAB_DIR))
    import rxelab

    return rxelab


def _lab_mtu(item: pytest.Item) -> int:
    names = getattr(item, "fixturenames", ())
    return 9000 if "lab9000" in names else 1500


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run every IB-MTU-1024 lab test before the IB-MTU-4096 ones (one reboot)."""
    lab_items = [i for i in items if i.get_closest_marker("lab") is not None]
    if not lab_items:
        return
    positions = [idx for idx, i in enumerate(items) if i.get_closest_marker("lab") is not None]
    ordered = sorted(lab_items, key=_lab_mtu)  # stable: file order within one MTU
    for idx, item in zip(positions, ordered, strict=True):
        items[idx] = item


@dataclass
class LabHandle:
    """What a lab test needs: the rxelab Lab, the guest, the host-side address."""

    lab: Any
    guest: Any
    host_ip: str
    ns: str
    mtu: int

    @property
    def ib_mtu(self) -> int:
        return 4096 if self.mtu >= 9000 else 1024

    def run(self, script: str, timeout_s: int = 120) -> tuple[int, str]:
        rc, out = self.lab.run(self.guest, script, timeout=timeout_s)
        return rc, out.decode(errors="replace")

    def start_bg(self, script: str, name: str) -> None:
        """Run ``script`` in the guest's background; its output (with a final
        ``__EXIT=<rc>`` line) goes to /tmp/<name>.log in the guest."""
        wrapped = f"{script}; echo __EXIT=$?"
        self.lab.run_bg(self.guest, wrapped, name)

    def wait_bg(self, name: str, timeout_s: float) -> tuple[int, str]:
        """Wait for a background job of :meth:`start_bg`; returns (rc, log)."""
        deadline = time.monotonic() + timeout_s
        while True:
            _rc, log = self.run(f"cat /tmp/{name}.log 2>/dev/null", timeout_s=30)
            if "__EXIT=" in log:
                code = int(log.rsplit("__EXIT=", 1)[1].split()[0])
                return code, log
            if time.monotonic() > deadline:
                self.run(f"kill -9 $(cat /tmp/{name}.pid) 2>/dev/null", timeout_s=10)
                return 137, log
            time.sleep(0.3)

    @contextlib.contextmanager
    def capture(self, path: Path) -> Iterator[Path]:
        """tcpdump of RoCEv2 (UDP 4791) on the lab bridge into ``path`` while in the block."""
        cli = [sys.executable, str(LAB_DIR / "rxelab.py"), "capture"]
        subprocess.run([*cli, "start", str(path)], check=True, capture_output=True, timeout=60)
        try:
            yield path
        finally:
            subprocess.run([*cli, "stop"], check=True, capture_output=True, timeout=60)

    def netio(self, *args: str) -> list[str]:
        """argv that runs Python with ARGS inside the lab namespace."""
        return ["ip", "netns", "exec", self.ns, sys.executable, *args]

    def start_netio(self, command: str, *args: str) -> NetioProcess:
        """Start ``netio COMMAND ARGS`` (the umbrella CLI) inside the lab namespace."""
        return NetioProcess(self.netio("-m", "netio.cli.main", command, *args))

    def netio_server_guest_client(self, command: str, netio_args: list[str], guest_cmd: str,
                                  timeout_s: int = 180) -> tuple[int, str, int, str]:
        """netio as the server, the guest tool as its client. Returns
        (guest rc, guest output, netio rc, netio output)."""
        proc = self.start_netio(command, *netio_args)
        try:
            proc.wait_for("waiting for a client", timeout_s=30)
            guest_rc, guest_out = self.run(guest_cmd, timeout_s=timeout_s)
            netio_rc = proc.wait(timeout_s=timeout_s)
        finally:
            proc.kill()
        return guest_rc, guest_out, netio_rc, proc.output

    def guest_server_netio_client(self, command: str, netio_args: list[str], guest_cmd: str,
                                  name: str, timeout_s: int = 180) -> tuple[int, str, int, str]:
        """The guest tool as the server (in the background), netio as its client."""
        self.start_bg(guest_cmd, name)
        proc = self.start_netio(command, *netio_args)
        try:
            netio_rc = proc.wait(timeout_s=timeout_s)
        finally:
            proc.kill()
        guest_rc, guest_out = self.wait_bg(name, timeout_s=60)
        return guest_rc, guest_out, netio_rc, proc.output


class NetioProcess:
    """A netio subprocess whose output is collected as it comes."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True)
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "".join(self._lines)

    def wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not any(text in line for line in self._lines):
                left = deadline - time.monotonic()
                if left <= 0 or self._proc.poll() is not None:
                    raise RuntimeError(f"{shlex.join(self.argv)}: no {text!r} in output:\n"
                                       f"{''.join(self._lines)}")
                self._changed.wait(min(left, 0.2))

    def wait(self, timeout_s: float) -> int:
        try:
            rc = self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self._proc.wait()
        self._reader.join(timeout=5)
        return rc

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()


class LabSession:
    def __init__(self) -> None:
        self.mtu: int | None = None
        self.handle: LabHandle | None = None
        self.booted = False

    def _script(self, *args: str) -> list[str]:
        return [sys.executable, str(LAB_DIR / "rxelab.py"), *args]

    def ensure(self, mtu: int) -> LabHandle:
        if self.handle is not None and self.mtu == mtu:
            return self.handle
        cmd = self._script("start", "-n", "1", "--mtu", str(mtu), "--restart")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BOOT_TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
        self.booted = True
        lab = _rxelab().Lab.load(run=LAB_RUN)
        guest = lab.guest("g0")
        if getattr(guest, "gid_index", None) is None:
            raise RuntimeError(f"guest g0 has no RoCEv2 IPv4 GID: {guest.to_dict()}")
        self.mtu = mtu
        self.handle = LabHandle(lab=lab, guest=guest, host_ip=lab.state["host_ip"],
                                ns=lab.ns, mtu=mtu)
        return self.handle

    def stop(self) -> None:
        if self.booted and os.environ.get("NETIO_LAB_KEEP") != "1":
            subprocess.run(self._script("stop"), capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def lab_session() -> Iterator[LabSession]:
    if os.geteuid() != 0:
        raise RuntimeError("the rxe lab needs root (network namespaces, tap devices)")
    session = LabSession()
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def lab1500(lab_session: LabSession) -> LabHandle:
    """The lab with netdev MTU 1500: rxe path MTU 1024."""
    return lab_session.ensure(1500)


@pytest.fixture
def lab9000(lab_session: LabSession) -> LabHandle:
    """The lab with netdev MTU 9000: rxe path MTU 4096."""
    return lab_session.ensure(9000)
