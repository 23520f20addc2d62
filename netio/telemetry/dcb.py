"""PFC configuration and per-priority counters from DCB netlink (``RTM_GETDCB``).

The request is ``DCB_CMD_IEEE_GET`` with ``DCB_ATTR_IFNAME``; the reply nests
``DCB_ATTR_IEEE_PFC`` (``struct ieee_pfc`` from ``include/uapi/linux/dcbnl.h``)
inside ``DCB_ATTR_IEEE``.  ``pfc_en`` is the bitmap of lossless priorities
(IEEE 802.1Q-2018, 36.1.3 / D.2.10 PFC configuration TLV); ``requests`` count
PFC frames sent and ``indications`` PFC frames received, per priority.
Devices without ``dcbnl_ops`` answer ``-EOPNOTSUPP``, which means "no DCB".
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Protocol

from netio.errors import DcbError
from netio.telemetry import metrics as m
from netio.telemetry.sample import Collection, Fault, Sample
from netio.telemetry.selection import ALL, Selection

NETLINK_ROUTE = 0
RTM_GETDCB = 78
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
DCB_CMD_IEEE_GET = 21
DCB_ATTR_IFNAME = 1
DCB_ATTR_IEEE = 13
DCB_ATTR_IEEE_PFC = 2
IEEE_8021QAZ_MAX_TCS = 8
NLA_TYPE_MASK = 0x3FFF

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_DCBMSG = struct.Struct("=BBH")  # dcb_family, cmd, dcb_pad
_NLATTR = struct.Struct("=HH")
# struct ieee_pfc: u8 pfc_cap, u8 pfc_en, u8 mbc, (pad), u16 delay, (pad to 8),
# u64 requests[8], u64 indications[8]  -> 136 bytes
_IEEE_PFC = struct.Struct("=BBBxH2x8Q8Q")


@dataclass(frozen=True, slots=True)
class DcbConfig:
    """The ``[collectors.dcb]`` section (read only on a live host: a fixture
    tree has no kernel to ask)."""

    enabled: bool = True
    interval_s: float = 5.0
    devices: Selection = field(default_factory=Selection)


@dataclass(frozen=True, slots=True)
class IeeePfc:
    pfc_cap: int
    pfc_en: int
    mbc: int
    delay: int
    requests: tuple[int, ...]
    indications: tuple[int, ...]

    def lossless(self, priority: int) -> bool:
        return bool(self.pfc_en >> priority & 1)

    def pack(self) -> bytes:
        return _IEEE_PFC.pack(self.pfc_cap, self.pfc_en, self.mbc, self.delay,
                              *self.requests, *self.indications)


def _attr(kind: int, payload: bytes) -> bytes:
    raw = _NLATTR.pack(_NLATTR.size + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def build_ieee_get(ifname: str, seq: int) -> bytes:
    """The RTM_GETDCB / DCB_CMD_IEEE_GET request for one interface."""
    body = _DCBMSG.pack(socket.AF_UNSPEC, DCB_CMD_IEEE_GET, 0)
    body += _attr(DCB_ATTR_IFNAME, ifname.encode() + b"\0")
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_GETDCB, NLM_F_REQUEST, seq, 0) + body


def build_ieee_reply(ifname: str, seq: int, pfc: IeeePfc) -> bytes:
    """What the kernel's dcbnl_ieee_fill() sends (the PFC part); used by fakes and tests."""
    body = _DCBMSG.pack(socket.AF_UNSPEC, DCB_CMD_IEEE_GET, 0)
    body += _attr(DCB_ATTR_IFNAME, ifname.encode() + b"\0")
    body += _attr(DCB_ATTR_IEEE | 0x8000, _attr(DCB_ATTR_IEEE_PFC, pfc.pack()))
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_GETDCB, 0, seq, 0) + body


def build_error_reply(seq: int, errno_value: int, request: bytes) -> bytes:
    body = struct.pack("=i", -errno_value) + request[:_NLMSGHDR.size]
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), NLMSG_ERROR, 0, seq, 0) + body


def _attrs(buf: bytes, start: int, end: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    off = start
    while off + _NLATTR.size <= end:
        length, kind = _NLATTR.unpack_from(buf, off)
        if length < _NLATTR.size or off + length > end:
            raise DcbError(errno.EBADMSG, f"attribute at offset {off}: bad length {length}")
        out[kind & NLA_TYPE_MASK] = buf[off + _NLATTR.size:off + length]
        off += (length + 3) & ~3
    return out


def parse_ieee_reply(data: bytes) -> IeeePfc | None:
    """Parse a reply to :func:`build_ieee_get`.

    Returns None when the device reported no PFC attribute; raises DcbError on
    an NLMSG_ERROR or a malformed message.
    """
    off = 0
    while off + _NLMSGHDR.size <= len(data):
        length, kind, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, off)
        if length < _NLMSGHDR.size or off + length > len(data):
            raise DcbError(errno.EBADMSG, f"netlink message at offset {off}: bad length {length}")
        if kind == NLMSG_ERROR:
            (err,) = struct.unpack_from("=i", data, off + _NLMSGHDR.size)
            if err == 0:
                off += (length + 3) & ~3
                continue
            raise DcbError(-err, os.strerror(-err))
        if kind == RTM_GETDCB:
            body = off + _NLMSGHDR.size + _DCBMSG.size
            top = _attrs(data, body, off + length)
            ieee = top.get(DCB_ATTR_IEEE)
            if ieee is None:
                return None
            raw = _attrs(ieee, 0, len(ieee)).get(DCB_ATTR_IEEE_PFC)
            if raw is None:
                return None
            if len(raw) < _IEEE_PFC.size:
                raise DcbError(errno.EBADMSG, f"ieee_pfc is {len(raw)} bytes, "
                               f"expected {_IEEE_PFC.size}")
            v = _IEEE_PFC.unpack_from(raw)
            return IeeePfc(v[0], v[1], v[2], v[3], tuple(v[4:12]), tuple(v[12:20]))
        if kind == NLMSG_DONE:
            break
        off += (length + 3) & ~3
    raise DcbError(errno.EBADMSG, "no RTM_GETDCB reply in the message")


class DcbClient(Protocol):
    def interfaces(self) -> list[str]: ...

    def ieee_get(self, ifname: str) -> bytes:
        """Send the IEEE_GET request and return the raw reply bytes."""
        ...


class NetlinkDcbClient:
    """A plain NETLINK_ROUTE socket: one request, one reply, per interface."""

    def __init__(self, sysfs_root: str = "/sys", timeout_s: float = 1.0) -> None:
        self.sysfs_root = sysfs_root
        self.timeout_s = timeout_s
        self._seq = 0

    def interfaces(self) -> list[str]:
        try:
            return sorted(os.listdir(os.path.join(self.sysfs_root, "class", "net")))
        except OSError:
            return []

    def ieee_get(self, ifname: str) -> bytes:
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE) as s:
            s.settimeout(self.timeout_s)
            s.bind((0, 0))
            s.send(build_ieee_get(ifname, self._seq))
            return s.recv(65536)


class DcbCollector:
    name = "dcb"

    def __init__(self, client: DcbClient, *, devices: Selection = ALL) -> None:
        self.client = client
        self.devices = devices

    def collect(self) -> Collection:
        t0 = time.perf_counter()
        samples: list[Sample] = []
        faults: list[Fault] = []
        seen: list[str] = []
        for ifname in self.client.interfaces():
            if not self.devices(ifname):
                continue
            try:
                pfc = parse_ieee_reply(self.client.ieee_get(ifname))
            except DcbError as e:
                if e.errno in (errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL):
                    continue  # no DCB on this device
                faults.append(Fault(self.name, "unreadable", ifname, str(e)))
                continue
            except OSError as e:
                faults.append(Fault(self.name, "unreadable", ifname, str(e)))
                continue
            if pfc is None:
                continue
            seen.append(ifname)
            samples.append(Sample(m.DCB_PFC_CAP, (ifname,), float(pfc.pfc_cap)))
            for prio in range(IEEE_8021QAZ_MAX_TCS):
                labels = (ifname, str(prio))
                samples.append(Sample(m.DCB_PFC_ENABLED, labels, 1.0 if pfc.lossless(prio)
                                      else 0.0))
                samples.append(Sample(m.DCB_PFC_REQUESTS, labels, float(pfc.requests[prio])))
                samples.append(Sample(m.DCB_PFC_INDICATIONS, labels,
                                      float(pfc.indications[prio])))
        return Collection(self.name, tuple(samples), tuple(faults), time.time_ns(),
                          time.perf_counter() - t0, tuple(seen))


def build_collector(cfg: DcbConfig, sysfs_root: str) -> DcbCollector:
    return DcbCollector(NetlinkDcbClient(sysfs_root), devices=cfg.devices)
