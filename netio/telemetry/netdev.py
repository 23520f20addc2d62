"""Network interface statistics, link state, speed and MTU.

Two sources, chosen by :class:`NetdevConfig` ``source``: ``auto`` (the default)
is the netlink source on a live host (``sysfs_root`` is ``/sys``) and the sysfs
source on a fixture tree, which has no kernel behind it to ask.  The netlink
source (``RTM_GETLINK``, one dump for all interfaces, counters read together)
needs no file per counter.  The sysfs source reads ``class/net/<if>/statistics/*``,
which the kernel fills from the same ``rtnl_link_stats64`` as ``IFLA_STATS64``,
through descriptors kept open on a live host: about 0.1 ms per interface and
poll, where decoding an rtnetlink dump with pyroute2 costs about 0.5 ms, so it
is also selectable live.  Speed is in neither stats set: it comes from
``class/net/<if>/speed`` (Mb/s, -1 when unknown).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from netio.telemetry import metrics as m
from netio.telemetry import netlink as nl
from netio.telemetry.sample import Collection, Fault, Sample
from netio.telemetry.selection import ALL, Selection
from netio.telemetry.sysfs import AttrReader, ReadFault, is_sysfs, list_dir, read_attr


@dataclass(frozen=True, slots=True)
class NetdevConfig:
    """The ``[collectors.netdev]`` section."""

    enabled: bool = True
    interval_s: float = 1.0
    source: str = "auto"  # auto (netlink on a live /sys, else sysfs) | netlink | sysfs
    devices: Selection = field(default_factory=Selection)
    # sysfs source: None keeps the files open between polls only on a real sysfs mount
    keep_files_open: bool | None = None


@dataclass(frozen=True, slots=True)
class LinkStats:
    ifname: str
    oper_up: bool
    mtu_bytes: int | None
    speed_mbps: int | None
    carrier_changes: int | None
    stats: dict[str, int] = field(default_factory=dict)  # rtnl_link_stats64 field names


class LinkSource(Protocol):
    def links(self) -> tuple[list[LinkStats], list[tuple[str, str, str]]]:
        """Links, plus faults as (kind, source, reason)."""
        ...


def _speed(sysfs_root: str, ifname: str) -> int | None:
    return _parse_speed(read_attr(os.path.join(sysfs_root, "class", "net", ifname, "speed")))


def _parse_speed(text: str | ReadFault) -> int | None:
    if isinstance(text, ReadFault):
        return None  # EINVAL while the link is down: no speed, not a fault
    try:
        v = int(text)
    except ValueError:
        return None
    return v if v > 0 else None


# rtnetlink (linux/rtnetlink.h, linux/if_link.h)
RTM_NEWLINK = 16
RTM_GETLINK = 18
IFLA_IFNAME = 3
IFLA_MTU = 4
IFLA_STATS64 = 23
IFLA_OPERSTATE = 16
IFLA_CARRIER = 33
IFLA_CARRIER_CHANGES = 35
IF_OPER_UNKNOWN = 0
IF_OPER_UP = 6
_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
# struct rtnl_link_stats64: the fields the collector exports, by position (u64 each).
_STATS64_FIELDS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors",
                   "tx_errors", "rx_dropped", "tx_dropped")
_STATS64_HEAD = struct.Struct("=8Q")


def parse_link(body: bytes) -> tuple[str, bool, int | None, int | None, dict[str, int]] | None:
    """One RTM_NEWLINK message body: (name, operationally up, MTU, carrier
    changes, stats64 counters), or None without a name."""
    if len(body) < _IFINFOMSG.size:
        return None
    at = nl.attrs(body, _IFINFOMSG.size, len(body))
    name = nl.string(body, at.get(IFLA_IFNAME))
    if not name:
        return None
    oper = nl.u8(body, at.get(IFLA_OPERSTATE))
    carrier = nl.u8(body, at.get(IFLA_CARRIER))
    up = oper in (IF_OPER_UP, IF_OPER_UNKNOWN) and carrier != 0
    stats: dict[str, int] = {}
    span = at.get(IFLA_STATS64)
    if span is not None and span[1] - span[0] >= _STATS64_HEAD.size:
        stats = dict(zip(_STATS64_FIELDS, _STATS64_HEAD.unpack_from(body, span[0]),
                         strict=True))
    return (name, up, nl.u32(body, at.get(IFLA_MTU)),
            nl.u32(body, at.get(IFLA_CARRIER_CHANGES)), stats)


class NetlinkLinkSource:
    """One rtnetlink ``RTM_GETLINK`` dump for all interfaces (``IFLA_STATS64``, read
    together by the kernel), decoded with ``struct``: only the attributes used."""

    def __init__(self, sysfs_root: str = "/sys",
                 sock_factory: Callable[[], nl.NetlinkSocket] | None = None) -> None:
        self.sysfs_root = sysfs_root
        self._factory = sock_factory or (lambda: nl.NetlinkSocket(0))
        self._sock: nl.NetlinkSocket | None = None

    def links(self) -> tuple[list[LinkStats], list[tuple[str, str, str]]]:
        if self._sock is None:
            self._sock = self._factory()
        try:
            msgs = self._sock.request(RTM_GETLINK, _IFINFOMSG.pack(0, 0, 0, 0, 0))
        except OSError as e:
            self.close()
            return [], [("unreadable", "rtnetlink", str(e))]
        out: list[LinkStats] = []
        for kind, body in msgs:
            if kind != RTM_NEWLINK:
                continue
            parsed = parse_link(body)
            if parsed is None:
                continue
            name, up, mtu, cc, stats = parsed
            out.append(LinkStats(name, up, mtu, _speed(self.sysfs_root, name), cc, stats))
        return out, []

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


_STAT_FILES = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "tx_errors",
               "rx_dropped", "tx_dropped")


# Files read together per interface, in this order.
_SYSFS_FILES = ("operstate", *(f"statistics/{f}" for f in _STAT_FILES), "mtu",
                "carrier_changes")


class SysfsLinkSource:
    """``<sysfs_root>/class/net/<if>/{operstate,carrier,mtu,speed,carrier_changes,
    statistics/*}``.

    ``keep_open`` as for the RDMA collector (default: only on a real sysfs mount):
    the files of an interface are then one ``pread`` each on kept descriptors.
    Only interfaces in ``devices`` are read (a host with hundreds of container
    veths reads none of theirs).
    """

    def __init__(self, sysfs_root: str = "/sys", *, keep_open: bool | None = None,
                 devices: Selection = ALL) -> None:
        self.sysfs_root = sysfs_root
        self.devices = devices
        self.reader = AttrReader(is_sysfs(sysfs_root) if keep_open is None else keep_open)
        # per interface: its file paths, and kept descriptors with their generation
        self._paths: dict[str, tuple[str, ...]] = {}
        self._fds: dict[str, tuple[int, list[int]]] = {}

    def _read(self, name: str, d: str) -> list[str | ReadFault]:
        paths = self._paths.get(name)
        if paths is None:
            paths = self._paths[name] = tuple(os.path.join(d, f) for f in _SYSFS_FILES)
        reader = self.reader
        if reader.keep_open:
            held = self._fds.get(name)
            fds = held[1] if held is not None and held[0] == reader.generation else None
            if fds is None:
                fds = reader.descriptors(paths)
                if fds is not None:
                    self._fds[name] = (reader.generation, fds)
            if fds is not None:
                pread = os.pread
                try:
                    raw = [pread(fd, 4096, 0) for fd in fds]
                except OSError:
                    pass  # file by file below, which says which and why
                else:
                    return [b.decode("ascii", "replace").strip() for b in raw]
        return [reader.read(p) for p in paths]

    def links(self) -> tuple[list[LinkStats], list[tuple[str, str, str]]]:
        base = os.path.join(self.sysfs_root, "class", "net")
        names = list_dir(base)
        names = [] if isinstance(names, ReadFault) else [n for n in names if self.devices(n)]
        for gone in set(self._paths) - set(names):
            del self._paths[gone]
            self._fds.pop(gone, None)
            self.reader.drop_under(os.path.join(base, gone) + "/")
        out: list[LinkStats] = []
        faults: list[tuple[str, str, str]] = []
        for name in names:
            texts = self._read(name, os.path.join(base, name))
            oper = texts[0]
            if isinstance(oper, ReadFault):
                faults.append((oper.kind, name, f"operstate: {oper.reason}"))
                continue
            stats: dict[str, int] = {}
            for f, t in zip(_STAT_FILES, texts[1:9], strict=True):
                if isinstance(t, ReadFault):
                    faults.append((t.kind, f"{name}/statistics/{f}", t.reason))
                    continue
                try:
                    stats[f] = int(t)
                except ValueError:
                    faults.append(("parse", f"{name}/statistics/{f}", f"not an integer: {t!r}"))
            mtu, cc = texts[9:11]
            # Read on their own: the kernel refuses them (EINVAL) while the link is
            # administratively down, and speed on most virtual devices.
            speed = self.reader.read(os.path.join(base, name, "speed"))
            carrier = self.reader.read(os.path.join(base, name, "carrier"))
            out.append(LinkStats(
                ifname=name,
                # as IFLA_OPERSTATE UP/UNKNOWN with IFLA_CARRIER set
                oper_up=oper in ("up", "unknown") and carrier != "0",
                mtu_bytes=int(mtu) if isinstance(mtu, str) and mtu.isdigit() else None,
                speed_mbps=_parse_speed(speed),
                carrier_changes=int(cc) if isinstance(cc, str) and cc.isdigit() else None,
                stats=stats,
            ))
        return out, faults

    def close(self) -> None:
        self._fds.clear()
        self.reader.close()


_PAIRS = (
    (m.NET_BYTES, "rx_bytes", "tx_bytes"),
    (m.NET_PACKETS, "rx_packets", "tx_packets"),
    (m.NET_ERRORS, "rx_errors", "tx_errors"),
    (m.NET_DROPPED, "rx_dropped", "tx_dropped"),
)


class NetdevCollector:
    name = "netdev"

    def __init__(self, source: LinkSource, *, devices: Selection = ALL) -> None:
        self.source = source
        self.devices = devices
        self._previous: frozenset[str] = frozenset()

    def close(self) -> None:
        """Release the source's sockets or handles (the collector is being replaced)."""
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def collect(self) -> Collection:
        t0 = time.perf_counter()
        links, raw_faults = self.source.links()
        faults = [Fault(self.name, k, s, r) for k, s, r in raw_faults]
        samples: list[Sample] = []
        seen: list[str] = []
        for link in links:
            if not self.devices(link.ifname):
                continue
            seen.append(link.ifname)
            dev = (link.ifname,)
            for spec, rx, tx in _PAIRS:
                if rx in link.stats:
                    samples.append(Sample(spec, (link.ifname, "rx"), float(link.stats[rx])))
                if tx in link.stats:
                    samples.append(Sample(spec, (link.ifname, "tx"), float(link.stats[tx])))
            samples.append(Sample(m.NET_UP, dev, 1.0 if link.oper_up else 0.0))
            if link.mtu_bytes is not None:
                samples.append(Sample(m.NET_MTU, dev, float(link.mtu_bytes)))
            if link.speed_mbps is not None:
                samples.append(Sample(m.NET_SPEED, dev, link.speed_mbps * 1e6 / 8.0))
            if link.carrier_changes is not None:
                # IFLA_CARRIER_CHANGES is a u32 in the kernel.
                samples.append(Sample(m.NET_CARRIER_CHANGES, dev, float(link.carrier_changes),
                                      32))
        for gone in sorted(self._previous - set(seen)):
            faults.append(Fault(self.name, "vanished", gone, "interface no longer present"))
        self._previous = frozenset(seen)
        return Collection(self.name, tuple(samples), tuple(faults), time.time_ns(),
                          time.perf_counter() - t0, tuple(seen))


def build_collector(cfg: NetdevConfig, sysfs_root: str, live: bool) -> NetdevCollector:
    """The collector ``cfg`` asks for; ``live``: ``sysfs_root`` is the host's /sys."""
    kind = cfg.source
    if kind == "auto":
        kind = "netlink" if live else "sysfs"
    src: LinkSource = NetlinkLinkSource(sysfs_root) if kind == "netlink" \
        else SysfsLinkSource(sysfs_root, keep_open=cfg.keep_files_open, devices=cfg.devices)
    return NetdevCollector(src, devices=cfg.devices)
