"""ethtool statistics (``ETHTOOL_GSTATS``), normalised into labelled metrics.

Vendors bake priority and direction into names (mlx5 ``rx_prio3_pause``, bnxt
``rx_pfc_ena_frames_pri3``, ice ``rx_priority_3_xoff.nic``).  ``ETHTOOL_RULES``
turns them into one metric with ``direction`` and ``priority`` labels.  Units
follow the vendor documentation: mlx5 ``*_prioN_pause_duration`` is in
microseconds ("Understanding mlx5 ethtool Counters") and becomes seconds.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Any, Protocol

from netio.errors import EthtoolUnsupported
from netio.telemetry import metrics as m
from netio.telemetry.sample import Collection, Fault, MetricSpec, Sample
from netio.telemetry.selection import ALL, Selection


class EthtoolSource(Protocol):
    def interfaces(self) -> list[str]: ...

    def statistics(self, ifname: str) -> list[tuple[str, int]]: ...


@dataclass(frozen=True, slots=True)
class Rule:
    """``pattern`` groups: ``dir`` (rx|tx) and ``prio`` when present."""

    pattern: re.Pattern[str]
    spec: MetricSpec
    fixed: tuple[str, ...] = ()  # label values after the captured ones
    scale: float = 1.0


def _r(pattern: str, spec: MetricSpec, fixed: tuple[str, ...] = (), scale: float = 1.0) -> Rule:
    return Rule(re.compile(pattern), spec, fixed, scale)


ETHTOOL_RULES: tuple[Rule, ...] = (
    # mlx5
    _r(r"^(?P<dir>rx|tx)_prio(?P<prio>[0-7])_pause$", m.PFC_PAUSE_FRAMES),
    _r(r"^(?P<dir>rx|tx)_prio(?P<prio>[0-7])_pause_duration$", m.PFC_PAUSE_DURATION, (), 1e-6),
    _r(r"^(?P<dir>rx|tx)_prio(?P<prio>[0-7])_pause_transition$", m.PFC_PAUSE_TRANSITIONS),
    _r(r"^(?P<dir>rx|tx)_prio(?P<prio>[0-7])_bytes$", m.NIC_PRIO_BYTES),
    _r(r"^(?P<dir>rx|tx)_prio(?P<prio>[0-7])_packets$", m.NIC_PRIO_PACKETS),
    _r(r"^(?P<dir>rx|tx)_pause_ctrl_phy$", m.LINK_PAUSE_FRAMES),
    _r(r"^tx_pause_storm_warning_events$", m.PAUSE_STORM_EVENTS, ("warning",)),
    _r(r"^tx_pause_storm_error_events$", m.PAUSE_STORM_EVENTS, ("error",)),
    _r(r"^(?P<dir>rx|tx)_discards_phy$", m.NIC_DROPPED, ("port_buffer",)),
    _r(r"^rx_out_of_buffer$", m.NIC_DROPPED, ("rx", "no_receive_buffer")),
    _r(r"^(?P<dir>rx|tx)_bytes_phy$", m.NIC_PHY_BYTES),
    _r(r"^(?P<dir>rx|tx)_packets_phy$", m.NIC_PHY_PACKETS),
    _r(r"^rx_crc_errors_phy$", m.NIC_PHY_ERRORS, ("crc",)),
    _r(r"^rx_symbol_err_phy$", m.NIC_PHY_ERRORS, ("symbol",)),
    _r(r"^rx_pcs_symbol_err_phy$", m.NIC_PHY_ERRORS, ("pcs_symbol",)),
    _r(r"^rx_corrected_bits_phy$", m.NIC_PHY_ERRORS, ("corrected_bits",)),
    _r(r"^rx_ecn_mark$", m.NIC_ECN_MARKED),
    # bnxt_en
    _r(r"^(?P<dir>rx|tx)_pfc_ena_frames_pri(?P<prio>[0-7])$", m.PFC_PAUSE_FRAMES),
    _r(r"^(?P<dir>rx|tx)_pause_frames$", m.LINK_PAUSE_FRAMES),
    # ice / i40e
    _r(r"^(?P<dir>rx|tx)_priority_(?P<prio>[0-7])_xoff\.nic$", m.PFC_PAUSE_FRAMES),
    _r(r"^link_xoff_(?P<dir>rx|tx)\.nic$", m.LINK_PAUSE_FRAMES),
)


@dataclass(frozen=True, slots=True)
class Mapped:
    spec: MetricSpec
    labels: tuple[str, ...]  # after device
    scale: float


def normalise(stat: str) -> Mapped | None:
    """Map one vendor statistic name to (metric, labels after ``device``), or None."""
    for rule in ETHTOOL_RULES:
        mt = rule.pattern.match(stat)
        if mt is None:
            continue
        groups = mt.groupdict()
        captured: tuple[str, ...] = ()
        if "dir" in groups:
            captured += (groups["dir"],)
        fixed = rule.fixed
        # "rx_out_of_buffer" fixes the direction itself; others put it first.
        captured += fixed
        if "prio" in groups:
            captured += (groups["prio"],)
        return Mapped(rule.spec, captured, rule.scale)
    return None


class IoctlEthtoolSource:
    """The real kernel, through pyroute2's ``SIOCETHTOOL`` ioctl."""

    def __init__(self, sysfs_root: str = "/sys") -> None:
        # Imported on the constructing thread (see NetlinkLinkSource): a first
        # import racing another collector thread's fails inside pyroute2.
        from pyroute2.ethtool.ioctl import IoctlEthtool, NotSupportedError

        self._ioctl_ethtool: Any = IoctlEthtool
        self._not_supported: type[Exception] = NotSupportedError
        self.sysfs_root = sysfs_root
        self._handles: dict[str, object] = {}

    def interfaces(self) -> list[str]:
        try:
            return sorted(os.listdir(os.path.join(self.sysfs_root, "class", "net")))
        except OSError:
            return []

    def statistics(self, ifname: str) -> list[tuple[str, int]]:
        handle = self._handles.get(ifname)
        if handle is None:
            handle = self._ioctl_ethtool(ifname)
            self._handles[ifname] = handle
        try:
            stats: list[tuple[str, int]] = handle.get_statistics()  # type: ignore[attr-defined]
        except self._not_supported as e:
            raise EthtoolUnsupported(ifname) from e
        except (OSError, AssertionError):
            # Names may change with the driver (reload, firmware): start afresh next time.
            self._handles.pop(ifname, None)
            handle.close()  # type: ignore[attr-defined]
            raise
        return stats

    def close(self) -> None:
        for h in self._handles.values():
            h.close()  # type: ignore[attr-defined]
        self._handles.clear()


class EthtoolTextSource:
    """``ethtool -S`` output saved as ``<root>/<ifname>.txt`` (fixtures, offline replay)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def interfaces(self) -> list[str]:
        try:
            return sorted(f[:-4] for f in os.listdir(self.root) if f.endswith(".txt"))
        except OSError:
            return []

    def statistics(self, ifname: str) -> list[tuple[str, int]]:
        with open(os.path.join(self.root, ifname + ".txt"), encoding="ascii") as f:
            text = f.read()
        out: list[tuple[str, int]] = []
        for lineno, line in enumerate(text.splitlines(), 1):
            name, sep, value = line.rpartition(":")
            if not value.strip():
                continue  # blank, or a header such as "NIC statistics:"
            if not sep:
                raise ValueError(f"{ifname}.txt line {lineno}: no 'name: value'")
            try:
                out.append((name.strip(), int(value)))
            except ValueError:
                raise ValueError(f"{ifname}.txt line {lineno}: {value.strip()!r} is not an "
                                 "integer") from None
        return out


_UNPLANNED: Any = object()


class EthtoolCollector:
    name = "ethtool"

    def __init__(self, source: EthtoolSource, *, interfaces: Selection = ALL,
                 stats: Selection = ALL, passthrough_unknown: bool = False) -> None:
        self.source = source
        self.interfaces = interfaces
        self.stats = stats
        self.passthrough_unknown = passthrough_unknown
        # per interface: stat name -> (metric, labels, scale), or None to skip
        self._plans: dict[str, dict[str, tuple[MetricSpec, tuple[str, ...], float] | None]] = {}
        self._previous: frozenset[str] = frozenset()

    def _plan(self, ifname: str, stat: str) -> tuple[MetricSpec, tuple[str, ...], float] | None:
        if not self.stats(stat):
            return None
        mapped = normalise(stat)
        if mapped is None:
            return (m.ETHTOOL_OTHER, (ifname, stat), 1.0) if self.passthrough_unknown else None
        return (mapped.spec, (ifname, *mapped.labels), mapped.scale)

    def close(self) -> None:
        """Release the source's sockets or handles (the collector is being replaced)."""
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def collect(self) -> Collection:
        t0 = time.perf_counter()
        samples: list[Sample] = []
        faults: list[Fault] = []
        seen: list[str] = []
        for ifname in self.source.interfaces():
            if not self.interfaces(ifname):
                continue
            try:
                stats = self.source.statistics(ifname)
            except EthtoolUnsupported:
                continue
            except FileNotFoundError:
                faults.append(Fault(self.name, "vanished", ifname, "interface vanished"))
                continue
            except (OSError, ValueError) as e:
                seen.append(ifname)
                faults.append(Fault(self.name, "unreadable", ifname, str(e)))
                continue
            seen.append(ifname)
            keys: set[tuple[str, tuple[str, ...]]] = set()
            plan = self._plans.setdefault(ifname, {})
            for stat, value in stats:
                entry = plan.get(stat, _UNPLANNED)
                if entry is _UNPLANNED:
                    entry = plan[stat] = self._plan(ifname, stat)
                if entry is None:
                    continue
                spec, labels, scale = entry
                key = (spec.name, labels)
                if key not in keys:
                    keys.add(key)
                    samples.append(Sample(spec, labels, value * scale))
        for gone in sorted(self._previous - set(seen)):
            faults.append(Fault(self.name, "vanished", gone, "interface no longer present"))
        self._previous = frozenset(seen)
        return Collection(self.name, tuple(samples), tuple(faults), time.time_ns(),
                          time.perf_counter() - t0, tuple(seen))
