"""Which RDMA device, port and GID to use for a peer, and why.

The rule (what NCCL, UCX and Mooncake leave to an environment variable): take a
**RoCEv2** GID whose address family is the peer's (IPv4-mapped ``::ffff:a.b.c.d``
for an IPv4 peer), on the netdev that carries the kernel's route to the peer, on an
ACTIVE port with an Ethernet link layer and a large enough MTU. Prefer the GID whose
address is the route's source address. Every GID the kernel lists is a
:class:`~netio.backends.base.Candidate` with the reason it was taken or rejected.

Everything is read from sysfs (``/sys/class/infiniband/<dev>/ports/<n>/...``) under an
injectable root, and the route comes from an injectable lookup (by default the kernel's,
asked with one rtnetlink RTM_GETROUTE request), so the choice is testable without RDMA
hardware. Nothing here needs pyverbs.
"""

from __future__ import annotations

import errno as errno_mod
import ipaddress
import os
import socket
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from netio.backends.base import Candidate, Description, Transport

ROCE_V2 = "RoCE v2"  # the kernel's spelling in gid_attrs/types/N
ROCE_V1 = "IB/RoCE v1"
PORT_ACTIVE = 4  # enum ib_port_state: IB_PORT_ACTIVE
IB_MTUS_BYTES = (256, 512, 1024, 2048, 4096)
# Headers the kernel subtracts from the netdev MTU to get a RoCE port's IB MTU
# (include/rdma/ib_addr.h, iboe_get_mtu: GRH 40 + UDP 8 + BTH 12 + XRC ETH 4 +
# AtomicETH 28 + ICRC 4).
IBOE_OVERHEAD_BYTES = 96
_ROUTE_TIMEOUT_S = 5.0
# rtnetlink (linux/netlink.h, linux/rtnetlink.h)
_RTM_GETROUTE = 26
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_RTA_DST = 1
_RTA_OIF = 4
_RTA_PREFSRC = 7
_RTN_LOCAL = 2


@dataclass(frozen=True, slots=True)
class GidEntry:
    """One non-empty GID table entry as sysfs shows it."""

    device: str
    port: int
    index: int
    gid: str  # compressed IPv6 text, e.g. ``::ffff:10.77.0.10``
    gid_type: str  # ``RoCE v2``, ``IB/RoCE v1`` or ``""`` (unreadable)
    netdev: str
    port_state: int  # 4 = ACTIVE
    port_state_text: str  # ``4: ACTIVE``
    link_layer: str  # ``Ethernet`` / ``InfiniBand``
    mtu_bytes: int  # the port's active IB MTU (0 = unknown)


@dataclass(frozen=True, slots=True)
class Route:
    """The kernel's route to the peer: the netdev it leaves through and the source
    address it uses; ``local`` when the peer is an address of this host."""

    netdev: str
    src_ip: str
    local: bool = False


RouteLookup = Callable[[str], "Route | None"]
PortMtu = Callable[[str, int], "int | None"]


def iboe_mtu_bytes(netdev_mtu_bytes: int) -> int:
    """The IB MTU the kernel gives a RoCE port on a netdev of this MTU (iboe_get_mtu):
    the largest of 256..4096 that fits once the RoCE headers are taken off; 0 if none."""
    room = netdev_mtu_bytes - IBOE_OVERHEAD_BYTES
    fitting = [m for m in IB_MTUS_BYTES if m <= room]
    return fitting[-1] if fitting else 0


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # empty GID slots fail to read their type/ndev (EINVAL/EIO)
        return None


def gid_text(addr: ipaddress.IPv6Address) -> str:
    """A GID as text: an IPv4-mapped one as ``::ffff:10.0.0.1`` (Python 3.11 would print
    ``::ffff:a00:1``), any other in compressed IPv6 form."""
    mapped = addr.ipv4_mapped
    return f"::ffff:{mapped}" if mapped is not None else str(addr)


def _gid_text(raw: str) -> str | None:
    try:
        addr = ipaddress.IPv6Address(raw)
    except ValueError:
        return None
    return None if int(addr) == 0 else gid_text(addr)


def read_gid_table(sysfs_root: Path | str = "/sys",
                   port_mtu: PortMtu | None = None) -> list[GidEntry]:
    """Every non-empty GID of every RDMA device and port under ``sysfs_root``, in
    device, port, index order. ``port_mtu(device, port)`` gives the port's active MTU
    (``ibv_query_port``) when available; otherwise it is derived from the netdev MTU
    the way the kernel does for RoCE."""
    root = Path(sysfs_root)
    ib = root / "class" / "infiniband"
    entries: list[GidEntry] = []
    if not ib.is_dir():
        return entries
    for dev_dir in sorted(ib.iterdir()):
        ports = dev_dir / "ports"
        if not ports.is_dir():
            continue
        for port_dir in sorted(ports.iterdir(), key=lambda p: int(p.name) if p.name.isdigit()
                               else 0):
            if not port_dir.name.isdigit():
                continue
            port = int(port_dir.name)
            state_text = _read(port_dir / "state") or "0: UNKNOWN"
            state = int(state_text.split(":", 1)[0]) if state_text[:1].isdigit() else 0
            link_layer = _read(port_dir / "link_layer") or ""
            gids = port_dir / "gids"
            if not gids.is_dir():
                continue
            queried = port_mtu(dev_dir.name, port) if port_mtu is not None else None
            for gid_file in sorted(gids.iterdir(), key=lambda p: int(p.name)
                                   if p.name.isdigit() else -1):
                if not gid_file.name.isdigit():
                    continue
                gid = _gid_text(_read(gid_file) or "")
                if gid is None:
                    continue
                index = int(gid_file.name)
                netdev = _read(port_dir / "gid_attrs" / "ndevs" / gid_file.name) or ""
                gid_type = _read(port_dir / "gid_attrs" / "types" / gid_file.name) or ""
                mtu = queried
                if mtu is None:
                    netdev_mtu = _read(root / "class" / "net" / netdev / "mtu") if netdev else None
                    mtu = iboe_mtu_bytes(int(netdev_mtu)) if netdev_mtu else 0
                entries.append(GidEntry(dev_dir.name, port, index, gid, gid_type, netdev, state,
                                        state_text, link_layer, mtu))
    return entries


def kernel_route(peer_ip: str) -> Route | None:
    """The kernel's route to ``peer_ip``, as ``ip route get`` shows it: one RTM_GETROUTE
    request on a netlink socket (cheap, blocking for microseconds, usable from a running
    event loop; pyroute2's IPRoute costs seconds to import in a slow guest and cannot be
    used inside a running loop). None when there is no route."""
    addr = ipaddress.ip_address(peer_ip)
    family = socket.AF_INET if addr.version == 4 else socket.AF_INET6
    dst = addr.packed
    rta_dst = struct.pack("=HH", 4 + len(dst), _RTA_DST) + dst
    rtmsg = struct.pack("=BBBBBBBBI", family, len(dst) * 8, 0, 0, 0, 0, 0, 0, 0)
    body = rtmsg + rta_dst
    request = struct.pack("=LHHLL", 16 + len(body), _RTM_GETROUTE, _NLM_F_REQUEST, 1, 0) + body
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as nl:
        nl.settimeout(_ROUTE_TIMEOUT_S)
        nl.send(request)
        reply = nl.recv(65536)
    length, kind = struct.unpack_from("=LH", reply)
    if kind == _NLMSG_ERROR:
        err = -struct.unpack_from("=i", reply, 16)[0]
        if err in (errno_mod.ENETUNREACH, errno_mod.EHOSTUNREACH, errno_mod.EINVAL):
            return None
        raise OSError(err, f"netlink RTM_GETROUTE {peer_ip}: {os.strerror(err)}")
    rt_type = reply[16 + 7]
    oif, src = 0, ""
    pos = 16 + 12
    while pos + 4 <= length:
        rta_len, rta_type = struct.unpack_from("=HH", reply, pos)
        if rta_len < 4:
            break
        data = reply[pos + 4:pos + rta_len]
        if rta_type == _RTA_OIF:
            oif = struct.unpack("=I", data[:4])[0]
        elif rta_type == _RTA_PREFSRC:
            src = str(ipaddress.ip_address(data))
        pos += (rta_len + 3) & ~3
    try:
        netdev = socket.if_indextoname(oif) if oif else ""
    except OSError:
        netdev = ""
    return Route(netdev=netdev, src_ip=src, local=rt_type == _RTN_LOCAL)


def _as_gid(text: str) -> ipaddress.IPv6Address:
    """A GID given as IPv6 text, or as an IPv4 address (its IPv4-mapped GID)."""
    addr = ipaddress.ip_address(text)
    return ipaddress.IPv6Address(f"::ffff:{addr}") if addr.version == 4 else addr


def _ipv4_of(gid: str) -> str | None:
    mapped = ipaddress.IPv6Address(gid).ipv4_mapped
    return str(mapped) if mapped is not None else None


def _reject_reason(e: GidEntry, *, peer: ipaddress.IPv4Address | ipaddress.IPv6Address | None,
                   route: Route | None, device: str | None, port: int | None,
                   gid_index: int | None, gid: str | None, mtu_bytes: int | None,
                   local_ip: str | None) -> str | None:
    """Why ``e`` cannot be used (the first rule it breaks), or None when it can."""
    if device is not None and e.device != device:
        return f"not the requested device {device}"
    if port is not None and e.port != port:
        return f"not the requested port {port}"
    if gid_index is not None and e.index != gid_index:
        return f"not the requested GID index {gid_index}"
    if gid is not None and ipaddress.IPv6Address(e.gid) != _as_gid(gid):
        return f"not the requested GID {gid}"
    if e.port_state != PORT_ACTIVE:
        return f"port not active (state {e.port_state_text})"
    if e.link_layer and e.link_layer != "Ethernet":
        return f"{e.link_layer} link layer: netio speaks RoCE (Ethernet)"
    if e.gid_type != ROCE_V2:
        kind = "RoCEv1" if e.gid_type == ROCE_V1 else f"GID type {e.gid_type or 'unknown'}"
        return f"{kind}: netio speaks RoCEv2 only"
    addr = ipaddress.IPv6Address(e.gid)
    if addr.is_link_local:
        return "link-local GID (fe80::/10): not routable, a RoCEv2 peer cannot answer it"
    mapped = addr.ipv4_mapped
    if peer is not None:
        if peer.version == 4 and mapped is None:
            return f"IPv6 GID, the peer {peer} is IPv4"
        if peer.version == 6 and mapped is not None:
            return f"IPv4 GID, the peer {peer} is IPv6"
    elif mapped is None and local_ip is None:
        return "IPv6 GID: without a peer netio takes an IPv4 one"
    if route is not None:
        if route.local:
            own = str(mapped) if mapped is not None else str(addr)
            if peer is not None and own != str(peer):
                return f"peer {peer} is a local address, this GID is {own}"
        elif e.netdev != route.netdev:
            return (f"on netdev {e.netdev or '?'}, the route to {peer} leaves through "
                    f"{route.netdev}")
    if local_ip is not None:
        own = str(mapped) if mapped is not None else str(addr)
        if own != str(ipaddress.ip_address(local_ip)):
            return f"address {own} is not the local address {local_ip} in use"
    if mtu_bytes is not None and e.mtu_bytes and e.mtu_bytes < mtu_bytes:
        return f"port MTU {e.mtu_bytes} is below the requested {mtu_bytes}"
    if e.mtu_bytes == 0:
        return "port MTU unknown (netdev MTU below 352?)"
    return None


def choose(entries: Sequence[GidEntry], peer_ip: str | None = None, *,
           route: Route | None = None, device: str | None = None, port: int | None = None,
           gid_index: int | None = None, gid: str | None = None,
           mtu_bytes: int | None = None, local_ip: str | None = None,
           backend: str = "verbs") -> Description:
    """Choose a GID for ``peer_ip`` among ``entries``; the Description lists every entry
    with its reason. ``route`` is the kernel's route to the peer (None: unknown, the
    netdev is not checked). ``local_ip`` restricts the choice to the GID of that address.
    When nothing is usable the Description has no ``device`` (see :func:`no_device_hint`)."""
    peer = ipaddress.ip_address(peer_ip) if peer_ip else None
    notes: list[str] = []
    if peer is not None and route is None:
        notes.append(f"the kernel has no route to {peer}: the netdev was not checked")
    verdicts = [(e, _reject_reason(e, peer=peer, route=route, device=device, port=port,
                                   gid_index=gid_index, gid=gid, mtu_bytes=mtu_bytes,
                                   local_ip=local_ip)) for e in entries]
    usable = [e for e, why in verdicts if why is None]
    chosen: GidEntry | None = None
    if usable:
        preferred = [e for e in usable if route is not None and route.src_ip
                     and (_ipv4_of(e.gid) or e.gid) == route.src_ip]
        chosen = (preferred or usable)[0]
    candidates = []
    for e, why in verdicts:
        if e is chosen:
            via = (f"on {e.netdev}, which carries the route to {peer}" if route is not None
                   and peer is not None else f"on {e.netdev or '?'}")
            family = "IPv4-mapped" if _ipv4_of(e.gid) else "IPv6"
            reason = f"chosen: RoCEv2, {family}, {via}, port ACTIVE, MTU {e.mtu_bytes}"
            if route is not None and route.src_ip and (_ipv4_of(e.gid) or e.gid) == route.src_ip:
                reason += f", the route's source address {route.src_ip}"
        elif why is None and chosen is not None:
            reason = (f"usable, but GID index {chosen.index} on {chosen.device} "
                      f"port {chosen.port} comes first"
                      + (f" (the route's source address is {route.src_ip})"
                         if route is not None and route.src_ip else ""))
        else:
            reason = why or "usable"
        candidates.append(Candidate(e.device, e.port, e.index, e.gid, e.gid_type, e.netdev,
                                    e.mtu_bytes, e is chosen, reason))
    if not entries:
        notes.append("no RDMA device has a GID (no device, or no IP address on its netdev)")
    if chosen is None:
        return Description(backend=backend, transport=Transport.ROCE,
                           candidates=tuple(candidates), notes=tuple(notes))
    mapped = _ipv4_of(chosen.gid)
    return Description(backend=backend, transport=Transport.ROCE, device=chosen.device,
                       port=chosen.port, gid_index=chosen.index, gid=chosen.gid,
                       gid_type="RoCEv2", netdev=chosen.netdev, mtu_bytes=chosen.mtu_bytes,
                       local_ip=mapped or chosen.gid, candidates=tuple(candidates),
                       notes=tuple(notes))


def rxe_hint(netdev: str) -> str:
    """How to get a software RoCE device on ``netdev`` (the kernel's rxe)."""
    return f"modprobe rdma_rxe; rdma link add rxe0 type rxe netdev {netdev}"


def no_device_hint(desc: Description, sysfs_root: Path | str = "/sys",
                   route: Route | None = None) -> str:
    """One line saying why no GID is usable and what to do about it."""
    root = Path(sysfs_root)
    netdev = route.netdev if route is not None and route.netdev and not route.local else "eth0"
    if not (root / "class" / "infiniband").is_dir():
        return (f"the kernel shows no RDMA device ({root}/class/infiniband is missing); for "
                f"software RoCE: {rxe_hint(netdev)}; or use backend='soft' (netio's "
                f"userspace RoCEv2)")
    if not desc.candidates:
        return (f"no RDMA device has a GID: give the netdev an IP address, or create one: "
                f"{rxe_hint(netdev)}")
    reasons = "; ".join(f"{c.device} port {c.port} gid[{c.gid_index}] {c.gid}: {c.reason}"
                        for c in desc.candidates)
    return f"every GID was rejected: {reasons}"


__all__ = [
    "IBOE_OVERHEAD_BYTES",
    "ROCE_V1",
    "ROCE_V2",
    "GidEntry",
    "PortMtu",
    "Route",
    "RouteLookup",
    "choose",
    "gid_text",
    "iboe_mtu_bytes",
    "kernel_route",
    "no_device_hint",
    "read_gid_table",
    "rxe_hint",
]
