"""ethtool statistics (``ETHTOOL_GSTATS``), normalised into labelled metrics.

Vendors bake priority and direction into names (mlx5 ``rx_prio3_pause``, bnxt
``rx_pfc_ena_frames_pri3``, ice ``rx_priority_3_xoff.nic``).  ``ETHTOOL_RULES``
turns them into one metric with ``direction`` and ``priority`` labels.  Units
follow the vendor documentation: mlx5 ``*_prioN_pause_duration`` is in
microseconds ("Understanding mlx5 ethtool Counters") and becomes seconds.

:class:`PfcCounterCollector` reads only the per-priority PFC counters (pause
frames, pause duration, per-priority packets) that the storm watchdog needs,
at the watchdog's rate, and only on interfaces that have them; everything else
is read by :class:`EthtoolCollector` at its own, slower, interval.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from netio.errors import EthtoolUnsupported
from netio.telemetry import metrics as m
from netio.telemetry.sample import Collection, Fault, MetricSpec, Sample
from netio.telemetry.selection import ALL, Selection


@dataclass(frozen=True, slots=True)
class EthtoolConfig:
    """The ``[collectors.ethtool]`` section."""

    enabled: bool = True
    interval_s: float = 1.0
    source: str = "auto"  # auto (ioctl when sysfs_root is /sys, else text or off) | ioctl | text
    text_dir: str | None = None
    devices: Selection = field(default_factory=Selection)
    stats: Selection = field(default_factory=Selection)
    passthrough_unknown: bool = False


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


# What the storm watchdog reads (netio.telemetry.derived.watch_inputs).
WATCHED_METRICS = frozenset((m.PFC_PAUSE_FRAMES.name, m.PFC_PAUSE_DURATION.name,
                             m.NIC_PRIO_PACKETS.name))
# Interfaces are listed again (and which of their statistics are watched) this often.
WATCH_RESCAN_S = 10.0


class PfcCounterCollector:
    """The per-priority PFC counters alone, for the storm watchdog's fast poll.

    Every ``rescan_s`` it reads all selected interfaces and remembers which of
    their statistics map onto :data:`WATCHED_METRICS`; in between it reads only
    the interfaces that have any, and yields only those series.  A host without
    PFC counters (a virtual NIC) is polled only at each rescan (:meth:`idle_s`).
    """

    name = "pfcwd"

    def __init__(self, source: EthtoolSource, *, interfaces: Selection = ALL,
                 stats: Selection = ALL, rescan_s: float = WATCH_RESCAN_S) -> None:
        self.source = source
        self.interfaces = interfaces
        self.stats = stats
        self.rescan_s = rescan_s
        # interface -> statistic name -> (metric, labels, scale)
        self._watched: dict[str, dict[str, tuple[MetricSpec, tuple[str, ...], float]]] = {}
        self._next_scan_mono = 0.0

    def idle_s(self) -> float:
        """How long the scheduler may wait beyond its interval: while no interface
        has PFC counters there is nothing to read until the next rescan."""
        if self._watched:
            return 0.0
        return max(0.0, self._next_scan_mono - time.monotonic())

    def _plan(self, ifname: str, names: list[str]
              ) -> dict[str, tuple[MetricSpec, tuple[str, ...], float]]:
        plan: dict[str, tuple[MetricSpec, tuple[str, ...], float]] = {}
        for stat in names:
            if not self.stats(stat):
                continue
            mapped = normalise(stat)
            if mapped is not None and mapped.spec.name in WATCHED_METRICS:
                plan.setdefault(stat, (mapped.spec, (ifname, *mapped.labels), mapped.scale))
        return plan

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def collect(self) -> Collection:
        t0 = time.perf_counter()
        now = time.monotonic()
        rescan = now >= self._next_scan_mono
        if rescan:
            self._next_scan_mono = now + self.rescan_s
            names = [i for i in self.source.interfaces() if self.interfaces(i)]
        else:
            names = list(self._watched)
        samples: list[Sample] = []
        faults: list[Fault] = []
        for ifname in names:
            try:
                stats = self.source.statistics(ifname)
            except EthtoolUnsupported:
                self._watched.pop(ifname, None)
                continue
            except (OSError, ValueError) as e:
                kind = "vanished" if isinstance(e, FileNotFoundError) else "unreadable"
                faults.append(Fault(self.name, kind, ifname, str(e) or type(e).__name__))
                self._watched.pop(ifname, None)
                self._next_scan_mono = 0.0  # look again on the next poll
                continue
            plan = self._watched.get(ifname)
            if rescan or plan is None:
                plan = self._plan(ifname, [s for s, _v in stats])
                if not plan:
                    self._watched.pop(ifname, None)
                    continue
                self._watched[ifname] = plan
            for stat, value in stats:
                entry = plan.get(stat)
                if entry is not None:
                    samples.append(Sample(entry[0], entry[1], value * entry[2]))
        if rescan:
            self._watched = {k: v for k, v in self._watched.items() if k in names}
        return Collection(self.name, tuple(samples), tuple(faults), time.time_ns(),
                          time.perf_counter() - t0, tuple(self._watched))


def source_kind(cfg: EthtoolConfig, live: bool) -> str:
    """``ioctl``, ``text`` or ``off`` (auto on a fixture tree without a text directory:
    there is no kernel behind it to ask by ioctl)."""
    if cfg.source != "auto":
        return cfg.source
    return "ioctl" if live else "text" if cfg.text_dir else "off"


def build_source(cfg: EthtoolConfig, sysfs_root: str, live: bool) -> EthtoolSource | None:
    kind = source_kind(cfg, live)
    if kind == "off":
        return None
    return IoctlEthtoolSource(sysfs_root) if kind == "ioctl" \
        else EthtoolTextSource(cfg.text_dir or "")


def build_collector(cfg: EthtoolConfig, sysfs_root: str, live: bool) -> EthtoolCollector | None:
    src = build_source(cfg, sysfs_root, live)
    if src is None:
        return None
    return EthtoolCollector(src, interfaces=cfg.devices, stats=cfg.stats,
                            passthrough_unknown=cfg.passthrough_unknown)


def build_watch_collector(cfg: EthtoolConfig, sysfs_root: str, live: bool
                          ) -> PfcCounterCollector | None:
    """Its own source (own ioctl handles: it runs in another thread than the
    full collector)."""
    src = build_source(cfg, sysfs_root, live)
    if src is None:
        return None
    return PfcCounterCollector(src, interfaces=cfg.devices, stats=cfg.stats)
