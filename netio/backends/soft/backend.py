"""The soft backend of the IO API: netio's RoCEv2 engine behind ``netio.backends.base``.

One protection domain per context; one :class:`SoftRoceDriver` (engine + UDP port 4791)
per local IPv4 address, opened when the first QP needs it, so that a context can reach
peers through several interfaces. The wire format is the kernel rxe's: a soft endpoint
and a verbs endpoint on rxe or a RoCE NIC connect to each other.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from netio.api.types import Access, Completion, QpType, WcOpcode
from netio.backends.base import (
    Description,
    Notify,
    QpAddress,
    QpOptions,
    RecvRequest,
    Segment,
    SendRequest,
    Transport,
)
from netio.backends.soft.driver import DriverConfig, SoftRoceDriver
from netio.backends.soft.pingpong import SoftPingPong
from netio.backends.soft.sockets import OffloadMode, RxMode
from netio.errors import IoError, RoceError
from netio.roce.engine import CompletionQueue, RoceEngine, linger_ns
from netio.roce.link import LinkFaults
from netio.roce.memory import MemoryRegion, ProtectionDomain, Sge
from netio.roce.qp import QpAttributes, QpState, QueuePair
from netio.roce.verbs import RecvWr, SendWr, UdAddress

#: The soft engine segments at any IB MTU; it offers the largest and lets the
#: exchange agree on the smaller of the two sides.
SOFT_MAX_MTU_BYTES = 4096
# the first receive opcode, as a plain int: compared for every completion polled
_WC_RECV = int(WcOpcode.RECV)


@dataclass(frozen=True, slots=True, eq=False)
class SoftRegion:
    """A soft-engine memory region (the keys the IO API needs, and the engine's MR)."""

    mr: MemoryRegion

    @property
    def lkey(self) -> int:
        return self.mr.lkey

    @property
    def rkey(self) -> int:
        return self.mr.rkey

    @property
    def addr(self) -> int:
        return self.mr.addr

    @property
    def length(self) -> int:
        return self.mr.length


def mapped_gid(ip: ipaddress.IPv4Address) -> str:
    """The RoCEv2 GID of an IPv4 address (``::ffff:a.b.c.d``, IBTA A17.4.5.1)."""
    return f"::ffff:{ip}"  # the dotted form people and rdma-core's tools print


def gid_ip(gid: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The IP address a RoCEv2 GID stands for (IPv4-mapped GIDs give the IPv4 address)."""
    ip6 = ipaddress.IPv6Address(gid)
    return ip6.ipv4_mapped or ip6


def _sges(segments: tuple[Segment, ...]) -> tuple[Sge, ...]:
    if len(segments) == 1:  # the common case, without the list
        one = segments[0]
        region = one.region
        if isinstance(region, SoftRegion):
            return (Sge(region.mr, one.offset, one.length),)
    out = []
    for s in segments:
        region = s.region
        if not isinstance(region, SoftRegion):
            raise RoceError("segment is not a region of this soft context")
        out.append(Sge(region.mr, s.offset, s.length))
    return tuple(out)


class SoftQp:
    """A soft-engine RC QP; see :class:`netio.backends.base.BackendQp`."""

    def __init__(self, backend: SoftBackend, driver: SoftRoceDriver, options: QpOptions,
                 notify: Notify, qp_type: QpType = QpType.RC, psn: int | None = None) -> None:
        self._backend = backend
        self._driver = driver
        self._options = options
        self._notify = notify
        engine = driver.engine
        self._cq: CompletionQueue = engine.create_cq()
        self._qp: QueuePair = engine.create_qp(backend.pd, QpType(qp_type), self._cq)
        self._psn = random.getrandbits(24) if psn is None else psn & 0xFFFFFF
        self._closed = False
        self._posted: deque[tuple[int, MemoryRegion | None]] = deque()
        driver.add_progress_callback(notify, self._cq)
        if qp_type is QpType.UD:  # a UD QP needs no peer to reach RTS
            attrs = self._attrs(None, SOFT_MAX_MTU_BYTES)
            for state in (QpState.INIT, QpState.RTR, QpState.RTS):
                self._qp.modify(state, attrs)

    @property
    def qpn(self) -> int:
        return self._qp.qp_num

    @property
    def engine_qp(self) -> QueuePair:
        """The engine's QP (its state, counters and attributes), for tests and tools."""
        return self._qp

    def address(self) -> QpAddress:
        ip = self._driver.config.local_ip
        return QpAddress(Transport.ROCE, mapped_gid(ip), self.qpn, self._psn,
                         SOFT_MAX_MTU_BYTES, 0, "RoCEv2", "soft", "")

    def _attrs(self, remote: QpAddress | None, mtu_bytes: int) -> QpAttributes:
        o = self._options
        return QpAttributes(
            dest_qp_num=remote.qpn if remote else 0, sq_psn=self._psn,
            rq_psn=remote.psn if remote else 0, path_mtu_bytes=mtu_bytes, timeout=o.timeout,
            retry_cnt=o.retry_count, rnr_retry=o.rnr_retry, min_rnr_timer=o.min_rnr_timer,
            max_rd_atomic=o.max_rd_atomic, max_dest_rd_atomic=o.max_rd_atomic, qkey=o.qkey,
            remote_ip=gid_ip(remote.gid) if remote else None, dscp=o.traffic_class >> 2,
            ecn=o.traffic_class & 3, access=o.access)

    async def connect(self, remote: QpAddress, mtu_bytes: int, stream: object = None) -> None:
        if self._qp.qp_type is QpType.UD:
            raise RoceError("a datagram (UD) endpoint is not connected; give each send its "
                            "destination")
        attrs = self._attrs(remote, mtu_bytes)
        qp = self._qp
        qp.modify(QpState.INIT, attrs)
        qp.modify(QpState.RTR, attrs)
        qp.modify(QpState.RTS, attrs)

    def post_send(self, requests: Sequence[SendRequest]) -> None:
        wrs = [self._send_wr(r) for r in requests]  # all checked before any is posted
        qp = self._qp
        posted = self._posted
        for wr, copy in wrs:
            qp.post_send(wr)
            posted.append((wr.wr_id, copy))
        self._driver.kick()

    def _send_wr(self, r: SendRequest) -> tuple[SendWr, MemoryRegion | None]:
        sges = _sges(r.segments)
        copy: MemoryRegion | None = None
        if r.inline and r.segments:
            # The engine reads the payload when it builds (and rebuilds) packets; an inline
            # send must not depend on the caller's buffer after posting: it gets a copy,
            # registered until the request completes.
            data = bytearray(r.length_bytes)
            pos = 0
            for sge in sges:
                data[pos:pos + sge.length] = sge.view
                pos += sge.length
            copy = self._backend.pd.register(data, Access.LOCAL_WRITE)
            sges = (Sge(copy, 0, len(data)),)
        ud = None if r.ud is None else UdAddress(gid_ip(r.ud.gid), r.ud.qpn, r.ud.qkey)
        return SendWr(r.wr_id, r.opcode, sges, r.remote_addr, r.rkey, r.imm_data,
                      r.compare_add, r.swap, r.signaled, ud=ud), copy

    def _release_through(self, wr_id: int) -> None:
        """A send completed: it and everything posted before it are done (RC order)."""
        posted = self._posted
        if posted and posted[0][0] == wr_id:  # the usual case: the oldest send completed
            _, copy = posted.popleft()
            if copy is not None and copy.registered:
                self._backend.pd.deregister(copy)
            return
        if not any(w == wr_id for w, _ in posted):
            return
        while posted:
            done, copy = posted.popleft()
            if copy is not None and copy.registered:
                self._backend.pd.deregister(copy)
            if done == wr_id:
                return

    def post_recv(self, requests: Sequence[RecvRequest]) -> None:
        wrs = [RecvWr(r.wr_id, _sges(r.segments)) for r in requests]
        for wr in wrs:
            self._qp.post_recv(wr)

    def poll(self, max_entries: int) -> list[Completion]:
        out = self._cq.poll(max_entries)
        for c in out:
            if c.opcode < _WC_RECV:
                self._release_through(c.wr_id)
        return out

    def counters(self) -> dict[str, int]:
        """The engine's and the driver's counters (shared by the QPs of one address)."""
        out = {f"engine_{k}": int(v) for k, v in
               dataclasses.asdict(self._driver.engine.stats).items()}
        out.update({f"driver_{k}": v for k, v in dataclasses.asdict(self._driver.stats).items()
                    if isinstance(v, int)})
        return out

    def diagnosis(self) -> str:
        return self._qp.responder.last_error

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        qp = self._qp
        engine = self._driver.engine
        # The peer may still retransmit a request whose ACK it lost: the closed QP keeps
        # answering duplicates for as long as the peer retries (engine.linger).
        engine.linger(qp, time.monotonic_ns() + linger_ns(qp.attrs))
        if qp.state is not QpState.ERR and qp.state is not QpState.RESET:
            qp.modify(QpState.ERR)
        self._notify()
        self._driver.remove_progress_callback(self._notify)
        self._driver.engine.destroy_qp(qp)
        self._driver.kick()  # the ACK it may have held for coalescing goes out now
        for _, copy in self._posted:
            if copy is not None and copy.registered:
                self._backend.pd.deregister(copy)
        self._posted.clear()


class SoftBackend:
    """netio's userspace RoCEv2 engine on UDP sockets; see :class:`Backend`."""

    name = "soft"
    transport = Transport.ROCE

    def __init__(self, *, local_addr: str | None = None, rx_mode: RxMode | str = RxMode.AUTO,
                 faults: LinkFaults | None = None, fault_seed: int = 0,
                 gso: OffloadMode | str | None = None) -> None:
        self.pd = ProtectionDomain()
        try:
            self._gso = None if gso is None else OffloadMode(gso)  # None: $NETIO_SOFT_GSO
        except ValueError:
            raise IoError(f"gso {gso!r} is not one of "
                          f"{', '.join(m.value for m in OffloadMode)}") from None
        self._local_addr = local_addr
        try:
            self._rx_mode = RxMode(rx_mode)  # "auto", "raw", "udp" or the enum itself
        except ValueError:
            raise IoError(f"rx_mode {rx_mode!r} is not one of "
                          f"{', '.join(m.value for m in RxMode)}") from None
        self._faults = faults
        self._fault_seed = fault_seed
        self._drivers: dict[ipaddress.IPv4Address, SoftRoceDriver] = {}

    def register(self, view: memoryview, access: Access) -> SoftRegion:
        return SoftRegion(self.pd.register(view, access))

    def deregister(self, region: object) -> None:
        if not isinstance(region, SoftRegion):
            raise RoceError("not a region of this soft context")
        self.pd.deregister(region.mr)

    def driver_for(self, local_ip: str) -> SoftRoceDriver:
        ip = ipaddress.IPv4Address(self._local_addr or local_ip)
        driver = self._drivers.get(ip)
        if driver is None:
            driver = SoftRoceDriver.take_lingering(ip)  # a closed context's, still answering
            if driver is not None:
                self._drivers[ip] = driver
                return driver
            config = DriverConfig(ip, self._rx_mode, self._faults, self._fault_seed, self._gso)
            driver = SoftRoceDriver(RoceEngine(ip), config)
            driver.start()
            self._drivers[ip] = driver
        return driver

    async def create_qp(self, local_ip: str, options: QpOptions, notify: Notify,
                        qp_type: QpType = QpType.RC, psn: int | None = None) -> SoftQp:
        return SoftQp(self, self.driver_for(local_ip), options, notify, qp_type, psn)

    def progress_fds(self) -> list[int]:
        """The receive sockets :meth:`progress` reads."""
        return [fd for d in self._drivers.values() if (fd := d.rx_fd) is not None]

    def progress(self) -> bool:
        """Drive every driver once without blocking (``progress="poll"``; see
        :meth:`SoftRoceDriver.poll_progress`)."""
        did = False
        for driver in self._drivers.values():
            if driver.poll_progress():
                did = True
        return did

    def pingpong(self, qpn: int, send: Segment, recv: Segment,
                 timeout_s: float) -> SoftPingPong | None:
        """The one-call ping-pong (:mod:`netio.backends.soft.pingpong`) on QP ``qpn``
        between ``send`` and ``recv``; None when that QP cannot take it now."""
        for driver in self._drivers.values():
            qp = driver.engine.qp(qpn)
            if qp is None:
                continue
            if not SoftPingPong.usable(driver, qp):
                return None
            return SoftPingPong(driver, qp, _sges((send,))[0], _sges((recv,))[0],
                                timeout_s=timeout_s)
        return None

    def describe(self) -> Description:
        ips = list(self._drivers) or (
            [ipaddress.IPv4Address(self._local_addr)] if self._local_addr else [])
        ip = ips[0] if ips else None
        notes = ["the soft backend is netio's userspace RoCEv2 engine on UDP port 4791 of "
                 "the local address (no RDMA device needed); the address is the one the "
                 "route to each peer uses unless local_addr is given"]
        if len(ips) > 1:
            notes.append("local addresses in use: " + ", ".join(map(str, ips)))
        for ip_, driver in self._drivers.items():
            notes.append(f"UDP GSO on {ip_}: {driver.gso_reason}; UDP GRO: "
                         f"{driver.gro_reason}")  # diagnostics/doctor
        return Description(
            backend="soft", transport=Transport.ROCE, device="soft", port=1,
            gid=mapped_gid(ip) if ip is not None else "", gid_type="RoCEv2",
            mtu_bytes=SOFT_MAX_MTU_BYTES, local_ip=str(ip) if ip is not None else "",
            notes=tuple(notes))

    async def close(self) -> None:
        drivers, self._drivers = list(self._drivers.values()), {}
        for d in drivers:
            until_ns = d.engine.lingering_until_ns(time.monotonic_ns())
            if until_ns is None:
                await d.close()
            else:
                d.linger(until_ns)  # closes itself once its closed QPs stop answering


__all__ = ["SOFT_MAX_MTU_BYTES", "SoftBackend", "SoftQp", "SoftRegion", "gid_ip", "mapped_gid"]
