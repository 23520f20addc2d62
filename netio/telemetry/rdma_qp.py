"""Per-QP RDMA telemetry from RDMA netlink (``NETLINK_RDMA``, ``rdma/rdma_netlink.h``).

What ``rdma resource show qp``, ``rdma resource show cm_id`` and ``rdma statistic``
print, read directly: ``RDMA_NLDEV_CMD_GET`` lists the devices and their port
counts; ``RDMA_NLDEV_CMD_RES_QP_GET`` (a dump per device) gives each QP's number,
type, state, port, peer QPN (connected QPs), send and receive PSNs and owner
(PID or kernel user); ``RDMA_NLDEV_CMD_RES_CM_ID_GET`` gives the local and peer
addresses of the QPs that rdma_cm connected; ``RDMA_NLDEV_CMD_STAT_GET`` with
``STAT_RES = RES_QP`` gives the counters the driver binds to QPs (``rdma
statistic qp set ... auto``; drivers without counter binding, rxe among them,
have none), and without it, per port, the port's hardware counters.

Cardinality is bounded: every QP is counted in ``netio_rdma_qps{device,type,state}``,
but only the ``top_n`` most active (send plus receive PSN advance per second, the
packets a QP moved; ties by QPN) get series of their own and a profile entry.
"""

from __future__ import annotations

import errno
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from netio.telemetry import metrics as m
from netio.telemetry import netlink as nl
from netio.telemetry.sample import Collection, Fault, Sample
from netio.telemetry.selection import ALL, Selection

NETLINK_RDMA = 20
RDMA_NL_NLDEV = 5


def nldev_type(op: int) -> int:
    """RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)."""
    return (RDMA_NL_NLDEV << 10) + op


# enum rdma_nldev_command
CMD_GET = 1
CMD_RES_QP_GET = 10
CMD_RES_CM_ID_GET = 11
CMD_STAT_GET = 17
# enum rdma_nldev_attr
ATTR_DEV_INDEX = 1
ATTR_DEV_NAME = 2
ATTR_PORT_INDEX = 3
ATTR_RES_QP = 19
ATTR_RES_QP_ENTRY = 20
ATTR_RES_LQPN = 21
ATTR_RES_RQPN = 22
ATTR_RES_RQ_PSN = 23
ATTR_RES_SQ_PSN = 24
ATTR_RES_TYPE = 26
ATTR_RES_STATE = 27
ATTR_RES_PID = 28
ATTR_RES_KERN_NAME = 29
ATTR_RES_CM_ID = 30
ATTR_RES_CM_ID_ENTRY = 31
ATTR_RES_SRC_ADDR = 33
ATTR_RES_DST_ADDR = 34
ATTR_STAT_RES = 75
ATTR_STAT_COUNTER = 77
ATTR_STAT_COUNTER_ENTRY = 78
ATTR_STAT_COUNTER_ID = 79
ATTR_STAT_HWCOUNTERS = 80
ATTR_STAT_HWCOUNTER_ENTRY = 81
ATTR_STAT_HWCOUNTER_ENTRY_NAME = 82
ATTR_STAT_HWCOUNTER_ENTRY_VALUE = 83

# enum ib_qp_type and enum ib_qp_state (rdma/ib_verbs.h), as rdma-tool names them
QP_TYPES = {0: "SMI", 1: "GSI", 2: "RC", 3: "UC", 4: "UD", 5: "RAW_IPV6",
            6: "RAW_ETHERTYPE", 8: "RAW_PACKET", 9: "XRC_INI", 10: "XRC_TGT", 255: "DRIVER"}
QP_STATES = {0: "RESET", 1: "INIT", 2: "RTR", 3: "RTS", 4: "SQD", 5: "SQE", 6: "ERR"}
PSN_MODULO = 1 << 24  # IBTA vol. 1, 9.7.1: PSNs are 24 bits
DEFAULT_TOP_N = 20
# A host without RDMA devices (or without RDMA in its kernel) is looked at again this often.
NO_DEVICE_RECHECK_S = 10.0


@dataclass(frozen=True, slots=True)
class RdmaQpConfig:
    """The ``[collectors.rdma_qp]`` section."""

    enabled: bool = True
    interval_s: float = 1.0
    top_n: int = DEFAULT_TOP_N  # QPs with series of their own
    devices: Selection = field(default_factory=Selection)


@dataclass(frozen=True, slots=True)
class Qp:
    """One QP as RDMA netlink reports it."""

    device: str
    port: int | None
    qpn: int
    type: str
    state: str
    peer_qpn: int | None
    sq_psn: int | None
    rq_psn: int | None
    owner: str  # "pid 1234" or the kernel user's name
    local_address: str | None = None  # rdma_cm QPs: "ip:port"
    peer_address: str | None = None
    counters: tuple[tuple[str, int], ...] = ()  # bound per-QP counters


def _nest_entries(body: bytes, span: tuple[int, int] | None, entry: int
                  ) -> list[dict[int, tuple[int, int]]]:
    if span is None:
        return []
    return [nl.attrs(body, a, b) for k, a, b in nl.iter_attrs(body, span[0], span[1])
            if k == entry]


def _sockaddr(body: bytes, span: tuple[int, int] | None) -> str | None:
    """``struct __kernel_sockaddr_storage`` as ``ip:port`` / ``[ip6]:port``."""
    if span is None or span[1] - span[0] < 8:
        return None
    raw = body[span[0]:span[1]]
    family = int.from_bytes(raw[:2], "little")
    port = int.from_bytes(raw[2:4], "big")
    if family == socket.AF_INET:
        return f"{socket.inet_ntop(socket.AF_INET, raw[4:8])}:{port}"
    if family == socket.AF_INET6 and len(raw) >= 24:
        return f"[{socket.inet_ntop(socket.AF_INET6, raw[8:24])}]:{port}"
    return None


def parse_devices(msgs: list[tuple[int, bytes]]) -> list[tuple[int, str, int]]:
    """RDMA_NLDEV_CMD_GET dump -> (index, name, number of ports)."""
    out = []
    for _t, body in msgs:
        at = nl.attrs(body, 0, len(body))
        idx, name = nl.u32(body, at.get(ATTR_DEV_INDEX)), nl.string(body, at.get(ATTR_DEV_NAME))
        if idx is not None and name:
            out.append((idx, name, nl.u32(body, at.get(ATTR_PORT_INDEX)) or 0))
    return out


def parse_qps(device: str, msgs: list[tuple[int, bytes]]) -> list[Qp]:
    """RDMA_NLDEV_CMD_RES_QP_GET dump -> QPs."""
    out = []
    for _t, body in msgs:
        top = nl.attrs(body, 0, len(body))
        for e in _nest_entries(body, top.get(ATTR_RES_QP), ATTR_RES_QP_ENTRY):
            qpn = nl.u32(body, e.get(ATTR_RES_LQPN))
            if qpn is None:
                continue
            qtype = nl.u8(body, e.get(ATTR_RES_TYPE))
            state = nl.u8(body, e.get(ATTR_RES_STATE))
            pid = nl.u32(body, e.get(ATTR_RES_PID))
            kern = nl.string(body, e.get(ATTR_RES_KERN_NAME))
            out.append(Qp(device, nl.u32(body, e.get(ATTR_PORT_INDEX)), qpn,
                          QP_TYPES.get(qtype or 0, str(qtype)) if qtype is not None else "?",
                          QP_STATES.get(state, str(state)) if state is not None else "?",
                          nl.u32(body, e.get(ATTR_RES_RQPN)),
                          nl.u32(body, e.get(ATTR_RES_SQ_PSN)),
                          nl.u32(body, e.get(ATTR_RES_RQ_PSN)),
                          f"pid {pid}" if pid is not None else (kern or "kernel")))
    return out


def parse_cm_ids(msgs: list[tuple[int, bytes]]) -> dict[int, tuple[str | None, str | None]]:
    """RDMA_NLDEV_CMD_RES_CM_ID_GET dump -> QPN: (local address, peer address)."""
    out: dict[int, tuple[str | None, str | None]] = {}
    for _t, body in msgs:
        top = nl.attrs(body, 0, len(body))
        for e in _nest_entries(body, top.get(ATTR_RES_CM_ID), ATTR_RES_CM_ID_ENTRY):
            qpn = nl.u32(body, e.get(ATTR_RES_LQPN))
            if qpn is not None:
                out[qpn] = (_sockaddr(body, e.get(ATTR_RES_SRC_ADDR)),
                            _sockaddr(body, e.get(ATTR_RES_DST_ADDR)))
    return out


def parse_hwcounters(body: bytes, span: tuple[int, int] | None) -> list[tuple[str, int]]:
    out = []
    for e in _nest_entries(body, span, ATTR_STAT_HWCOUNTER_ENTRY):
        name = nl.string(body, e.get(ATTR_STAT_HWCOUNTER_ENTRY_NAME))
        value = nl.u64(body, e.get(ATTR_STAT_HWCOUNTER_ENTRY_VALUE))
        if name and value is not None:
            out.append((name, value))
    return out


def parse_qp_counters(msgs: list[tuple[int, bytes]]) -> dict[int, list[tuple[str, int]]]:
    """RDMA_NLDEV_CMD_STAT_GET dump with STAT_RES = RES_QP -> QPN: bound counters
    (a counter bound to several QPs is reported for each)."""
    out: dict[int, list[tuple[str, int]]] = {}
    for _t, body in msgs:
        top = nl.attrs(body, 0, len(body))
        for c in _nest_entries(body, top.get(ATTR_STAT_COUNTER), ATTR_STAT_COUNTER_ENTRY):
            counters = parse_hwcounters(body, c.get(ATTR_STAT_HWCOUNTERS))
            for q in _nest_entries(body, c.get(ATTR_RES_QP), ATTR_RES_QP_ENTRY):
                qpn = nl.u32(body, q.get(ATTR_RES_LQPN))
                if qpn is not None:
                    out.setdefault(qpn, []).extend(counters)
    return out


def psn_advance(before: int, after: int) -> int:
    """Packets between two PSNs of one queue (24-bit sequence space, wrapping)."""
    return (after - before) % PSN_MODULO


def _u32_attr(kind: int, value: int) -> bytes:
    return nl.attr(kind, struct.pack("=I", value))


class RdmaNetlinkClient:
    """The RDMA netlink requests the collector makes (a fake one replays bytes in tests)."""

    def __init__(self, sock_factory: Callable[[], nl.NetlinkSocket] | None = None) -> None:
        self._factory = sock_factory or (lambda: nl.NetlinkSocket(NETLINK_RDMA))
        self._sock: nl.NetlinkSocket | None = None

    def _req(self, op: int, payload: bytes, *, dump: bool = True) -> list[tuple[int, bytes]]:
        if self._sock is None:
            self._sock = self._factory()
        return self._sock.request(nldev_type(op), payload, dump=dump)

    def devices(self) -> list[tuple[int, str, int]]:
        return parse_devices(self._req(CMD_GET, b""))

    def qps(self, index: int, name: str) -> list[Qp]:
        return parse_qps(name, self._req(CMD_RES_QP_GET, _u32_attr(ATTR_DEV_INDEX, index)))

    def cm_ids(self, index: int) -> dict[int, tuple[str | None, str | None]]:
        return parse_cm_ids(self._req(CMD_RES_CM_ID_GET, _u32_attr(ATTR_DEV_INDEX, index)))

    def qp_counters(self, index: int) -> dict[int, list[tuple[str, int]]]:
        return parse_qp_counters(self._req(
            CMD_STAT_GET, _u32_attr(ATTR_DEV_INDEX, index)
            + _u32_attr(ATTR_STAT_RES, ATTR_RES_QP)))

    def port_counters(self, index: int, port: int) -> list[tuple[str, int]]:
        msgs = self._req(CMD_STAT_GET, _u32_attr(ATTR_DEV_INDEX, index)
                         + _u32_attr(ATTR_PORT_INDEX, port), dump=False)
        out: list[tuple[str, int]] = []
        for _t, body in msgs:
            out += parse_hwcounters(body, nl.attrs(body, 0, len(body)).get(
                ATTR_STAT_HWCOUNTERS))
        return out

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class RdmaQpCollector:
    name = "rdma_qp"

    def __init__(self, client: RdmaNetlinkClient | None = None, *, top_n: int = DEFAULT_TOP_N,
                 devices: Selection = ALL) -> None:
        self.client = client if client is not None else RdmaNetlinkClient()
        self.top_n = top_n
        self.devices = devices
        # (device, qpn) -> (monotonic ns, sq psn, rq psn) of the previous poll
        self._last: dict[tuple[str, int], tuple[int, int | None, int | None]] = {}
        self._no_device = False

    def close(self) -> None:
        self.client.close()

    def idle_s(self) -> float:
        """The scheduler's extra pause: none while there are RDMA devices."""
        return NO_DEVICE_RECHECK_S if self._no_device else 0.0

    def poll(self) -> tuple[list[tuple[Qp, float | None, float | None]], list[Fault]]:
        """Every QP with its send and receive PSN advance per second (None on its
        first poll), and the faults."""
        faults: list[Fault] = []
        self._no_device = False
        try:
            devs = self.client.devices()
        except OSError as e:
            if e.errno in (errno.EPROTONOSUPPORT, errno.EAFNOSUPPORT):
                self._no_device = True
                return [], []  # a kernel without RDMA: no devices, as in sysfs
            return [], [Fault(self.name, "unreadable", "rdma netlink", str(e))]
        self._no_device = not devs
        now = time.monotonic_ns()
        out: list[tuple[Qp, float | None, float | None]] = []
        last: dict[tuple[str, int], tuple[int, int | None, int | None]] = {}
        for index, name, _ports in devs:
            if not self.devices(name):
                continue
            try:
                qps = self.client.qps(index, name)
            except OSError as e:
                faults.append(Fault(self.name, "unreadable", name, f"QPs: {e}"))
                continue
            try:
                addrs = self.client.cm_ids(index)
            except OSError:
                addrs = {}  # no rdma_cm, or not supported: no addresses
            try:
                counters = self.client.qp_counters(index)
            except OSError:
                counters = {}  # the driver binds no counters to QPs
            for q in qps:
                a = addrs.get(q.qpn)
                c = counters.get(q.qpn)
                if a is not None or c:
                    q = Qp(q.device, q.port, q.qpn, q.type, q.state, q.peer_qpn, q.sq_psn,
                           q.rq_psn, q.owner, *(a or (None, None)), tuple(c or ()))
                key = (name, q.qpn)
                prev = self._last.get(key)
                last[key] = (now, q.sq_psn, q.rq_psn)
                sq_rate = rq_rate = None
                if prev is not None and now > prev[0]:
                    dt = (now - prev[0]) / 1e9
                    if prev[1] is not None and q.sq_psn is not None:
                        sq_rate = psn_advance(prev[1], q.sq_psn) / dt
                    if prev[2] is not None and q.rq_psn is not None:
                        rq_rate = psn_advance(prev[2], q.rq_psn) / dt
                out.append((q, sq_rate, rq_rate))
        self._last = last
        return out, faults

    def collect(self) -> Collection:
        t0 = time.perf_counter()
        qps, faults = self.poll()
        samples: list[Sample] = []
        totals: dict[tuple[str, str, str], int] = {}
        for q, _s, _r in qps:
            k = (q.device, q.type, q.state)
            totals[k] = totals.get(k, 0) + 1
        for k, n in sorted(totals.items()):
            samples.append(Sample(m.RDMA_QPS, k, float(n)))
        ranked = sorted(qps, key=lambda x: (-((x[1] or 0.0) + (x[2] or 0.0)),
                                            x[0].device, x[0].qpn))
        for q, sq_rate, rq_rate in ranked[:self.top_n]:
            qpn = str(q.qpn)
            samples.append(Sample(m.RDMA_QP_INFO, (
                q.device, qpn, "" if q.port is None else str(q.port), q.type, q.state,
                "" if q.peer_qpn is None else str(q.peer_qpn), q.local_address or "",
                q.peer_address or "", q.owner), 1.0))
            for queue, psn, rate in (("sq", q.sq_psn, sq_rate), ("rq", q.rq_psn, rq_rate)):
                if psn is not None:
                    samples.append(Sample(m.RDMA_QP_PSN, (q.device, qpn, queue), float(psn)))
                if rate is not None:
                    samples.append(Sample(m.RDMA_QP_PSN_RATE, (q.device, qpn, queue), rate))
            for cname, value in q.counters:
                samples.append(Sample(m.RDMA_QP_COUNTER, (q.device, qpn, cname), float(value)))
        return Collection(self.name, tuple(samples), tuple(faults), time.time_ns(),
                          time.perf_counter() - t0,
                          tuple(sorted({q.device for q, _s, _r in qps})))


def build_collector(cfg: RdmaQpConfig) -> RdmaQpCollector:
    return RdmaQpCollector(top_n=cfg.top_n, devices=cfg.devices)
