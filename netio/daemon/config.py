"""netio-daemon configuration: one TOML file, validated completely before use.

Every error names the file, the dotted key and why (``ConfigError``).  Unknown
keys are errors, so a typo never silently falls back to a default.  See
``daemon/netio-daemon.toml`` for a commented example of every key.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from typing import Any

from netio.errors import ConfigError
from netio.telemetry.dcb import DcbConfig
from netio.telemetry.ethtool import EthtoolConfig
from netio.telemetry.metrics import COLLECTED_SPECS
from netio.telemetry.netdev import NetdevConfig
from netio.telemetry.rdma import RdmaConfig
from netio.telemetry.rdma_qp import RdmaQpConfig
from netio.telemetry.selection import Selection
from netio.telemetry.snmp import SnmpTarget

# Each collector owns its section's type (netio.telemetry.*); this module reads
# the file into them.
NetdevSection = NetdevConfig
EthtoolSection = EthtoolConfig
RdmaSection = RdmaConfig
DcbSection = DcbConfig


@dataclass(frozen=True, slots=True)
class DaemonSection:
    listen: str = "127.0.0.1:9935"
    web_config_file: str | None = None
    sysfs_root: str = "/sys"
    log_format: str = "json"
    hostname: str | None = None
    # A run of any collector that has not returned after this long is a
    # "timeout" fault; until it returns, its next runs are "hung" faults.
    collector_timeout_s: float = 5.0


@dataclass(frozen=True, slots=True)
class WatchdogSection:
    enabled: bool = True
    detection_time_s: float = 0.2
    restoration_time_s: float = 0.2
    poll_interval_s: float = 0.2
    min_paused_ratio: float = 0.5


# PFC / 802.3x MAC control frames (EtherType 0x8808) and RoCEv2 (UDP 4791).
DEFAULT_BPF_FILTER = "ether proto 0x8808 or udp port 4791"


@dataclass(frozen=True, slots=True)
class CaptureSection:
    enabled: bool = False
    directory: str = "/var/lib/netio-daemon/captures"
    tcpdump_path: str = "tcpdump"
    duration_s: float = 5.0
    file_bytes: int = 10_000_000
    ring_files: int = 4
    max_total_bytes: int = 1_000_000_000
    cooldown_s: float = 60.0
    snaplen_bytes: int = 256
    bpf_filter: str = "ether proto 0x8808 or udp port 4791"
    analyze: bool = True
    analyzer_timeout_s: float = 60.0


@dataclass(frozen=True, slots=True)
class Alarm:
    """Fires when the per-second rate (or value) of a metric passes a threshold.

    ``labels`` must all match; ``interface_label`` names the label whose value
    is the interface to capture on.
    """

    name: str
    metric: str
    labels: tuple[tuple[str, str], ...] = ()
    rate_above: float | None = None
    value_above: float | None = None
    interface_label: str = "device"
    capture: bool = True


@dataclass(frozen=True, slots=True)
class Config:
    daemon: DaemonSection = field(default_factory=DaemonSection)
    netdev: NetdevSection = field(default_factory=NetdevSection)
    ethtool: EthtoolSection = field(default_factory=EthtoolSection)
    rdma: RdmaSection = field(default_factory=RdmaSection)
    dcb: DcbSection = field(default_factory=DcbSection)
    snmp: tuple[SnmpTarget, ...] = ()
    watchdog: WatchdogSection = field(default_factory=WatchdogSection)
    capture: CaptureSection = field(default_factory=CaptureSection)
    alarms: tuple[Alarm, ...] = ()
    rdma_qp: RdmaQpConfig = field(default_factory=RdmaQpConfig)


class _Table:
    """Typed access to one TOML table; remembers which keys were used."""

    def __init__(self, data: Any, prefix: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(prefix, f"must be a table, got {type(data).__name__}")
        self.data: dict[str, Any] = data
        self.prefix = prefix
        self.used: set[str] = set()

    def _key(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def _get(self, key: str) -> Any:
        self.used.add(key)
        return self.data.get(key)

    def str_(self, key: str, default: str | None, *, required: bool = False) -> Any:
        v = self._get(key)
        if v is None:
            if required:
                raise ConfigError(self._key(key), "is required")
            return default
        if not isinstance(v, str) or not v:
            raise ConfigError(self._key(key), f"must be a non-empty string, got {v!r}")
        return v

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        v = self.str_(key, default)
        if v not in choices:
            raise ConfigError(self._key(key), f"must be one of {', '.join(choices)}, got {v!r}")
        return str(v)

    def bool_(self, key: str, default: bool) -> bool:
        v = self._get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise ConfigError(self._key(key), f"must be true or false, got {v!r}")
        return v

    def num(self, key: str, default: float | None, *, minimum: float = 0.0,
            exclusive: bool = True, maximum: float | None = None) -> Any:
        v = self._get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ConfigError(self._key(key), f"must be a number, got {v!r}")
        if not math.isfinite(v):  # TOML has nan and inf; neither is an interval or a threshold
            raise ConfigError(self._key(key), f"must be a finite number, got {v!r}")
        if (v <= minimum) if exclusive else (v < minimum):
            rel = ">" if exclusive else ">="
            raise ConfigError(self._key(key), f"must be {rel} {minimum:g}, got {v!r}")
        if maximum is not None and v > maximum:
            raise ConfigError(self._key(key), f"must be <= {maximum:g}, got {v!r}")
        return float(v)

    def int_(self, key: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
        v = self._get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(self._key(key), f"must be an integer, got {v!r}")
        if v < minimum or (maximum is not None and v > maximum):
            hi = f"..{maximum}" if maximum is not None else " or more"
            raise ConfigError(self._key(key), f"must be {minimum}{hi}, got {v!r}")
        return v

    def strings(self, key: str) -> tuple[str, ...]:
        v = self._get(key)
        if v is None:
            return ()
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise ConfigError(self._key(key), f"must be a list of non-empty strings, got {v!r}")
        return tuple(v)

    def selection(self, key: str) -> Selection:
        return Selection(self.strings(f"{key}_include"), self.strings(f"{key}_exclude"))

    def table(self, key: str) -> _Table:
        v = self._get(key)
        return _Table({} if v is None else v, self._key(key))

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise ConfigError(self._key(unknown[0]), "unknown key")


# What an alarm can watch: the metrics collectors produce (derived gauges are
# computed when a snapshot is read, after alarms are checked).
_METRIC_NAMES = frozenset(spec.name for spec in COLLECTED_SPECS)

_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def check_listen(value: str, key: str) -> str:
    """``HOST:PORT``: HOST an IPv4 address, ``[IPv6]``, a host name, or empty
    (every address); PORT 0..65535 (0 asks the kernel for a free port, which
    the "started" log line names)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(key, f"must be HOST:PORT with a port 0..65535, got {value!r}")
    if host.startswith("["):
        try:
            if not host.endswith("]"):
                raise ValueError(host)
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ConfigError(key, f"{host!r} is not a bracketed IPv6 address "
                                   f"like [::1], in {value!r}") from None
    elif ":" in host:
        raise ConfigError(key, f"write an IPv6 address in brackets ([{host}]:{port}), "
                               f"got {value!r}")
    elif host and host.replace(".", "").isdigit():
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ConfigError(key, f"{host!r} is not an IPv4 address, in {value!r}") from None
    elif host and not _HOSTNAME.fullmatch(host):
        raise ConfigError(key, f"{host!r} is not an IP address or host name, in {value!r}")
    return value


def _oid(value: str | None, key: str) -> str | None:
    if value is None:
        return None
    parts = value.strip(".").split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts):
        raise ConfigError(key, f"must be a numeric OID like 1.3.6.1.4.1.X, got {value!r}")
    return ".".join(parts)


def _keep_open(t: _Table, section: str) -> bool | None:
    keep = t._get("keep_files_open")
    if keep is not None and not isinstance(keep, bool):
        raise ConfigError(f"collectors.{section}.keep_files_open",
                          f"must be true or false, got {keep!r}")
    return keep


def parse_config(data: dict[str, Any]) -> Config:
    root = _Table(data, "")
    d = root.table("daemon")
    daemon = DaemonSection(
        listen=check_listen(d.str_("listen", "127.0.0.1:9935"), "daemon.listen"),
        web_config_file=d.str_("web_config_file", None),
        sysfs_root=d.str_("sysfs_root", "/sys"),
        log_format=d.choice("log_format", "json", ("json", "text")),
        hostname=d.str_("hostname", None),
        collector_timeout_s=d.num("collector_timeout_s", 5.0),
    )
    d.done()
    cols = root.table("collectors")
    t = cols.table("netdev")
    netdev = NetdevSection(t.bool_("enabled", True), t.num("interval_s", 1.0),
                           t.choice("source", "auto", ("auto", "netlink", "sysfs")),
                           t.selection("devices"), _keep_open(t, "netdev"))
    t.done()
    t = cols.table("ethtool")
    ethtool = EthtoolSection(t.bool_("enabled", True), t.num("interval_s", 1.0),
                             t.choice("source", "auto", ("auto", "ioctl", "text")),
                             t.str_("text_dir", None), t.selection("devices"),
                             t.selection("stats"), t.bool_("passthrough_unknown", False))
    if ethtool.source == "text" and ethtool.text_dir is None:
        raise ConfigError("collectors.ethtool.text_dir", "is required when source = \"text\"")
    t.done()
    t = cols.table("rdma")
    rdma = RdmaSection(t.bool_("enabled", True), t.num("interval_s", 1.0),
                       t.selection("devices"), t.bool_("passthrough_unknown", False),
                       _keep_open(t, "rdma"))
    t.done()
    t = cols.table("dcb")
    dcb = DcbSection(t.bool_("enabled", True), t.num("interval_s", 5.0), t.selection("devices"))
    t.done()
    t = cols.table("rdma_qp")
    rdma_qp = RdmaQpConfig(t.bool_("enabled", True), t.num("interval_s", 1.0),
                           t.int_("top_n", 20, minimum=0, maximum=10000),
                           t.selection("devices"))
    t.done()
    cols.done()

    targets: list[SnmpTarget] = []
    raw_targets = root._get("snmp")
    if raw_targets is not None:
        if not isinstance(raw_targets, list):
            raise ConfigError("snmp", "must be an array of tables ([[snmp]])")
        names: set[str] = set()
        for i, raw in enumerate(raw_targets):
            t = _Table(raw, f"snmp[{i}]")
            tgt = SnmpTarget(
                name=t.str_("name", None, required=True), host=t.str_("host", None,
                                                                      required=True),
                port=t.int_("port", 161, minimum=1, maximum=65535),
                community=t.str_("community", "public"),
                interval_s=t.num("interval_s", 10.0), timeout_s=t.num("timeout_s", 1.0),
                retries=t.int_("retries", 1, maximum=10),
                backoff_max_s=t.num("backoff_max_s", 300.0),
                interfaces=t.selection("interfaces"),
                pfc_priority_requests_oid=_oid(t.str_("pfc_priority_requests_oid", None),
                                               f"snmp[{i}].pfc_priority_requests_oid"),
                pfc_priority_indications_oid=_oid(t.str_("pfc_priority_indications_oid", None),
                                                  f"snmp[{i}].pfc_priority_indications_oid"),
            )
            t.done()
            if tgt.name in names:
                raise ConfigError(f"snmp[{i}].name", f"duplicate target name {tgt.name!r}")
            names.add(tgt.name)
            targets.append(tgt)

    t = root.table("watchdog")
    watchdog = WatchdogSection(
        t.bool_("enabled", True), t.num("detection_time_s", 0.2),
        t.num("restoration_time_s", 0.2), t.num("poll_interval_s", 0.2),
        t.num("min_paused_ratio", 0.5, exclusive=False, maximum=1.0))
    t.done()
    t = root.table("capture")
    capture = CaptureSection(
        enabled=t.bool_("enabled", False),
        directory=t.str_("directory", "/var/lib/netio-daemon/captures"),
        tcpdump_path=t.str_("tcpdump_path", "tcpdump"),
        duration_s=t.num("duration_s", 5.0, maximum=3600.0),
        file_bytes=t.int_("file_bytes", 10_000_000, minimum=1_000_000),
        ring_files=t.int_("ring_files", 4, minimum=1, maximum=1000),
        max_total_bytes=t.int_("max_total_bytes", 1_000_000_000, minimum=1_000_000),
        cooldown_s=t.num("cooldown_s", 60.0, exclusive=False),
        snaplen_bytes=t.int_("snaplen_bytes", 256, minimum=64, maximum=262144),
        bpf_filter=t.str_("bpf_filter", DEFAULT_BPF_FILTER),
        analyze=t.bool_("analyze", True),
        analyzer_timeout_s=t.num("analyzer_timeout_s", 60.0),
    )
    t.done()

    alarms: list[Alarm] = []
    raw_alarms = root._get("alarm")
    if raw_alarms is not None:
        if not isinstance(raw_alarms, list):
            raise ConfigError("alarm", "must be an array of tables ([[alarm]])")
        for i, raw in enumerate(raw_alarms):
            t = _Table(raw, f"alarm[{i}]")
            labels_t = t.table("labels")
            labels = tuple(sorted((k, v) for k, v in labels_t.data.items()))
            for k, v in labels:
                labels_t.used.add(k)
                if not isinstance(v, str):
                    raise ConfigError(f"alarm[{i}].labels.{k}", f"must be a string, got {v!r}")
            a = Alarm(t.str_("name", None, required=True), t.str_("metric", None, required=True),
                      labels, t.num("rate_above", None, exclusive=False),
                      t.num("value_above", None, exclusive=False),
                      t.str_("interface_label", "device"), t.bool_("capture", True))
            if (a.rate_above is None) == (a.value_above is None):
                raise ConfigError(f"alarm[{i}]", "needs exactly one of rate_above, value_above")
            if a.metric not in _METRIC_NAMES:
                raise ConfigError(f"alarm[{i}].metric",
                                  f"no metric {a.metric!r}; known metrics: "
                                  f"{', '.join(sorted(_METRIC_NAMES))}")
            t.done()
            alarms.append(a)
    root.done()
    return Config(daemon, netdev, ethtool, rdma, dcb, tuple(targets), watchdog, capture,
                  tuple(alarms), rdma_qp)


def load_config(path: str) -> Config:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError("", f"cannot read: {e.strerror}", path=path) from None
    except UnicodeDecodeError as e:
        raise ConfigError("", f"not UTF-8 text (byte {e.start}), so not a TOML file",
                          path=path) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("", f"not valid TOML: {e}", path=path) from None
    try:
        return parse_config(data)
    except ConfigError as e:
        raise ConfigError(e.key, e.reason, path=path) from None


def check_paths(config: Config) -> None:
    """What can only be checked on the host that runs the daemon: the sysfs
    root and the ethtool text directory exist, and tcpdump is there when
    captures are enabled.  Raises ConfigError naming the key."""
    if not os.path.isdir(config.daemon.sysfs_root):
        raise ConfigError("daemon.sysfs_root",
                          f"{config.daemon.sysfs_root!r} is not a directory")
    eth = config.ethtool
    if eth.enabled and eth.text_dir is not None and eth.source in ("text", "auto") \
            and not os.path.isdir(eth.text_dir):
        raise ConfigError("collectors.ethtool.text_dir", f"{eth.text_dir!r} is not a directory")
    cap = config.capture
    if cap.enabled and shutil.which(cap.tcpdump_path) is None:
        raise ConfigError("capture.tcpdump_path",
                          f"{cap.tcpdump_path!r} is not an executable (captures are enabled)")
