"""The collectors a configuration asks for, built from a name -> factory registry.

Each collector module owns its configuration type and how to build itself
from it (``netio.telemetry.<name>.build_collector``); a factory here only
reads its section of :class:`Config` and says how the daemon schedules it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from netio.daemon.config import Config


class JobRole(IntEnum):
    COLLECT = 1  # its collections are published: exported, profiled, checked by alarms
    WATCH = 2  # feeds only the PFC storm watchdog (its series are exported by another job)


@dataclass(frozen=True, eq=False)
class Job:
    """One scheduled collector."""

    name: str
    collector: Any  # Collector or AsyncCollector
    interval_s: float
    is_async: bool
    role: JobRole = JobRole.COLLECT


@dataclass(frozen=True, slots=True)
class Host:
    """Where the collectors read: the sysfs root, and whether it is the live host's
    (a fixture tree has no kernel behind it to ask by netlink or ioctl)."""

    sysfs_root: str
    live: bool


Factory = Callable[[Config, Host], list[Job]]


def _netdev(config: Config, host: Host) -> list[Job]:
    from netio.telemetry.netdev import build_collector

    c = config.netdev
    if not c.enabled:
        return []
    return [Job("netdev", build_collector(c, host.sysfs_root, host.live), c.interval_s, False)]


def _ethtool(config: Config, host: Host) -> list[Job]:
    from netio.telemetry.ethtool import build_collector

    c = config.ethtool
    col = build_collector(c, host.sysfs_root, host.live) if c.enabled else None
    return [] if col is None else [Job("ethtool", col, c.interval_s, False)]


def _pfcwd(config: Config, host: Host) -> list[Job]:
    """The per-priority PFC counters alone, at the watchdog's poll rate (when that
    is faster than the ethtool interval; otherwise the ethtool job feeds it)."""
    from netio.telemetry.ethtool import build_watch_collector

    c, w = config.ethtool, config.watchdog
    if not (c.enabled and w.enabled) or w.poll_interval_s >= c.interval_s:
        return []
    col = build_watch_collector(c, host.sysfs_root, host.live)
    return [] if col is None else [Job("pfcwd", col, w.poll_interval_s, False, JobRole.WATCH)]


def _rdma(config: Config, host: Host) -> list[Job]:
    from netio.telemetry.rdma import build_collector

    c = config.rdma
    if not c.enabled:
        return []
    return [Job("rdma", build_collector(c, host.sysfs_root), c.interval_s, False)]


def _rdma_qp(config: Config, host: Host) -> list[Job]:
    """Per-QP state from RDMA netlink: the live kernel's (a fixture tree has none)."""
    from netio.telemetry.rdma_qp import build_collector

    c = config.rdma_qp
    if not (c.enabled and host.live):
        return []
    return [Job("rdma_qp", build_collector(c), c.interval_s, False)]


def _dcb(config: Config, host: Host) -> list[Job]:
    from netio.telemetry.dcb import build_collector

    c = config.dcb
    if not (c.enabled and host.live):
        return []
    return [Job("dcb", build_collector(c, host.sysfs_root), c.interval_s, False)]


def _snmp(config: Config, host: Host) -> list[Job]:
    if not config.snmp:
        return []
    from netio.telemetry.snmp import SnmpCollector

    return [Job(f"snmp:{t.name}", SnmpCollector(t), t.interval_s, True) for t in config.snmp]


REGISTRY: Mapping[str, Factory] = {
    "netdev": _netdev, "ethtool": _ethtool, "pfcwd": _pfcwd, "rdma": _rdma,
    "rdma_qp": _rdma_qp, "dcb": _dcb, "snmp": _snmp,
}


def build_jobs(config: Config, registry: Mapping[str, Factory] = REGISTRY) -> list[Job]:
    """The collectors the configuration asks for, in registry order."""
    root = config.daemon.sysfs_root
    host = Host(root, os.path.realpath(root) == "/sys")
    return [job for factory in registry.values() for job in factory(config, host)]
