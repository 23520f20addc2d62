"""Helpers for netio-daemon tests: mlx5-style sysfs/ethtool trees, the rxe
snapshot, and an in-process daemon on an ephemeral loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from netio.daemon.app import Daemon
from netio.daemon.config import Config
from netio.daemon.webconfig import WebConfig

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / ".." / "shared"
RXE_TAR = SHARED / "rxe-lab" / "sysfs-rxe-g0.tar"
FIXTURES = REPO / "tests" / "fixtures" / "daemon"

# Documented mlx5 counter names: NVIDIA "Understanding mlx5 Linux Counters and Status
# Parameters" (hw_counters) and "Understanding mlx5 ethtool Counters".
MLX5_HW = (
    "out_of_buffer", "out_of_sequence", "duplicate_request", "rnr_nak_retry_err",
    "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err", "resp_local_length_error",
    "resp_cqe_error", "req_cqe_error", "req_remote_invalid_request", "req_remote_access_errors",
    "resp_remote_access_errors", "resp_cqe_flush_error", "req_cqe_flush_error",
    "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_cnps",
    "roce_slow_restart_trans", "rp_cnp_ignored", "rp_cnp_handled", "np_ecn_marked_roce_packets",
    "np_cnp_sent", "rx_icrc_encapsulated", "rx_read_requests", "rx_write_requests",
    "rx_atomic_requests", "lifespan",
)
IB_PMA = (
    "port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
    "unicast_xmit_packets", "unicast_rcv_packets", "multicast_xmit_packets",
    "multicast_rcv_packets", "port_xmit_discards", "port_rcv_errors", "symbol_error",
    "link_downed", "link_error_recovery", "local_link_integrity_errors",
    "excessive_buffer_overrun_errors", "VL15_dropped", "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors", "port_rcv_constraint_errors", "port_xmit_constraint_errors",
    "port_xmit_wait",
)


def mlx5_ethtool_names() -> list[str]:
    names = ["rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "rx_pause_ctrl_phy",
             "tx_pause_ctrl_phy", "tx_pause_storm_warning_events", "tx_pause_storm_error_events",
             "rx_discards_phy", "tx_discards_phy", "rx_out_of_buffer", "rx_bytes_phy",
             "tx_bytes_phy", "rx_packets_phy", "tx_packets_phy", "rx_crc_errors_phy",
             "rx_symbol_err_phy", "rx_corrected_bits_phy", "rx_pcs_symbol_err_phy",
             "rx_ecn_mark", "ch0_rx_packets", "ch0_tx_packets"]
    for p in range(8):
        for d in ("rx", "tx"):
            names += [f"{d}_prio{p}_bytes", f"{d}_prio{p}_packets", f"{d}_prio{p}_pause",
                      f"{d}_prio{p}_pause_duration"]
        names.append(f"rx_prio{p}_pause_transition")
    return names


class Mlx5Host:
    """A fake host tree: ``sys/class/infiniband/mlx5_N`` (PMA + hw_counters),
    ``sys/class/net/<if>`` and ``ethtool/<if>.txt`` (``ethtool -S`` format)."""

    def __init__(self, root: Path, devices: int = 1, *, link_mbps: int = 100000) -> None:
        self.root = root
        self.sys = root / "sys"
        self.ethtool_dir = root / "ethtool"
        self.ethtool_dir.mkdir(parents=True, exist_ok=True)
        self.devices = [f"mlx5_{i}" for i in range(devices)]
        self.netdevs = [f"ens{i}f0np0" for i in range(devices)]
        self.link_mbps = link_mbps
        self.hw: dict[str, dict[str, int]] = {d: dict.fromkeys(MLX5_HW, 0) for d in self.devices}
        for d in self.devices:
            self.hw[d]["lifespan"] = 12
        self.pma: dict[str, dict[str, int]] = {d: dict.fromkeys(IB_PMA, 0) for d in self.devices}
        self.eth: dict[str, dict[str, int]] = {
            n: dict.fromkeys(mlx5_ethtool_names(), 0) for n in self.netdevs}
        self.net: dict[str, dict[str, int]] = {
            n: {"rx_bytes": 0, "tx_bytes": 0, "rx_packets": 0, "tx_packets": 0, "rx_errors": 0,
                "tx_errors": 0, "rx_dropped": 0, "tx_dropped": 0} for n in self.netdevs}
        self.write()

    def write(self) -> None:
        for dev in self.devices:
            port = self.sys / "class" / "infiniband" / dev / "ports" / "1"
            (port / "counters").mkdir(parents=True, exist_ok=True)
            (port / "hw_counters").mkdir(parents=True, exist_ok=True)
            (port / "state").write_text("4: ACTIVE\n")
            (port / "phys_state").write_text("5: LinkUp\n")
            (port / "rate").write_text(f"{self.link_mbps // 1000} Gb/sec (4X EDR)\n")
            (port / "link_layer").write_text("Ethernet\n")
            for k, v in self.hw[dev].items():
                _atomic_write(port / "hw_counters" / k, f"{v}\n")
            for k, v in self.pma[dev].items():
                _atomic_write(port / "counters" / k, f"{v}\n")
        for n in self.netdevs:
            d = self.sys / "class" / "net" / n
            (d / "statistics").mkdir(parents=True, exist_ok=True)
            (d / "operstate").write_text("up\n")
            (d / "mtu").write_text("4200\n")
            (d / "speed").write_text(f"{self.link_mbps}\n")
            (d / "carrier_changes").write_text("1\n")
            for k, v in self.net[n].items():
                _atomic_write(d / "statistics" / k, f"{v}\n")
            body = "NIC statistics:\n" + "".join(f"     {k}: {v}\n" for k, v in
                                                 self.eth[n].items())
            _atomic_write(self.ethtool_dir / f"{n}.txt", body)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp~")
    tmp.write_text(text)
    tmp.replace(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_daemon(config: Config, jobs_factory=None, web_config: WebConfig | None = None,
                   config_path: str | None = None) -> Iterator[Daemon]:
    """Run a Daemon on its own event loop in a thread; stop it on exit."""
    holder: dict[str, object] = {}
    started = threading.Event()

    def body() -> None:
        async def main() -> None:
            kwargs = {} if jobs_factory is None else {"jobs_factory": jobs_factory}
            d = Daemon(config, web_config=web_config, config_path=config_path, **kwargs)
            holder["daemon"] = d
            holder["loop"] = asyncio.get_running_loop()
            task = asyncio.create_task(d.run())
            await d.started.wait()
            started.set()
            await task

        try:
            asyncio.run(main())
        except BaseException as e:  # surfaced to the test below
            holder["error"] = e
            started.set()

    t = threading.Thread(target=body, daemon=True)
    t.start()
    if not started.wait(20):
        raise RuntimeError("daemon did not start")
    if "error" in holder:
        raise holder["error"]  # type: ignore[misc]
    d = holder["daemon"]
    try:
        yield d  # type: ignore[misc]
    finally:
        loop = holder["loop"]
        loop.call_soon_threadsafe(d.stop)  # type: ignore[attr-defined]
        t.join(20)
        if t.is_alive():
            raise RuntimeError("daemon did not stop")


def call_in_loop(daemon: Daemon, coro_fn):  # run a coroutine on the daemon's loop
    loop = daemon.started._loop  # type: ignore[attr-defined]
    return asyncio.run_coroutine_threadsafe(coro_fn(), loop).result(30)


def http_get(port: int, path: str, headers: dict[str, str] | None = None,
             timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def need_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is required (Debian package; installed by .ci/run)")
    return path


def parse_exposition(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Exposition text -> {(name, sorted labels): value}, via prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out
