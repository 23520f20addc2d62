"""Per-QP RDMA telemetry: RDMA netlink replies built here from the uapi layout
(``rdma/rdma_netlink.h``: RDMA_NL_NLDEV = 5, RES_QP_GET = 10, the attribute
numbers written out below), decoded into QPs, ranked, bounded, profiled."""

from __future__ import annotations

import socket
import struct

import pytest

from netio.daemon.app import Daemon
from netio.daemon.config import Config, parse_config
from netio.telemetry import metrics as m
from netio.telemetry.profile import to_json_dict
from netio.telemetry.rdma_qp import RdmaNetlinkClient, RdmaQpCollector, psn_advance

NLDEV_TYPE = lambda op: (5 << 10) + op  # noqa: E731  RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)


def a(kind: int, payload: bytes, nested: bool = False) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind | (0x8000 if nested else 0)) + payload
    return raw + b"\0" * (-len(raw) % 4)


def u32(kind: int, v: int) -> bytes:
    return a(kind, struct.pack("=I", v))


def u8(kind: int, v: int) -> bytes:
    return a(kind, bytes([v]))


def s(kind: int, text: str) -> bytes:
    return a(kind, text.encode() + b"\0")


def qp_entry(qpn: int, *, rqpn: int | None, sq: int, rq: int, qtype: int = 2, state: int = 3,
             pid: int | None = 4242, port: int | None = 1) -> bytes:
    body = u32(21, qpn)  # RES_LQPN
    if port is not None:
        body = u32(3, port) + body  # PORT_INDEX
    if rqpn is not None:
        body += u32(22, rqpn)  # RES_RQPN
    body += u32(23, rq) + u32(24, sq) + u8(25, 0) + u8(26, qtype) + u8(27, state)
    body += u32(28, pid) if pid is not None else s(29, "ib_core")
    return a(20, body, nested=True)  # RES_QP_ENTRY


def sockaddr_in(ip: str, port: int) -> bytes:
    raw = struct.pack("<H", socket.AF_INET) + struct.pack(">H", port) + socket.inet_aton(ip)
    return raw + b"\0" * (128 - len(raw))


class FakeSocket:
    """Answers each request type with the messages given (bytes after nlmsghdr)."""

    def __init__(self, answers: dict[int, list[bytes]]) -> None:
        self.answers = answers
        self.requests: list[tuple[int, bytes]] = []

    def request(self, msg_type: int, payload: bytes, *, dump: bool = True
                ) -> list[tuple[int, bytes]]:
        self.requests.append((msg_type, payload))
        if msg_type not in self.answers:
            raise OSError(95, "Operation not supported")
        return [(msg_type, b) for b in self.answers[msg_type]]

    def close(self) -> None:
        pass


def fake(sq: int, extra_sq: int = 0) -> FakeSocket:
    dev = u32(1, 3) + s(2, "rxe0")
    return FakeSocket({
        NLDEV_TYPE(1): [dev + u32(3, 1)],  # one device, one port
        NLDEV_TYPE(10): [
            dev + a(19, qp_entry(1, rqpn=None, sq=0, rq=0, qtype=1, pid=None, port=1)
                    + qp_entry(17, rqpn=18, sq=sq, rq=500, pid=4242), nested=True),
            dev + a(19, qp_entry(19, rqpn=20, sq=100 + extra_sq, rq=7), nested=True),
        ],
        NLDEV_TYPE(11): [dev + a(30, a(31, u32(21, 19) + a(33, sockaddr_in("10.78.0.10", 4791))
                                           + a(34, sockaddr_in("10.78.0.11", 5000)),
                                       nested=True), nested=True)],
        # STAT_GET, STAT_RES = RES_QP: one counter (id 1) bound to QP 17, with two
        # hardware counters (STAT_HWCOUNTERS > HWCOUNTER_ENTRY {NAME, VALUE u64})
        NLDEV_TYPE(17): [dev + a(77, a(78, u32(3, 1) + u32(79, 1) + a(80, (
            a(81, s(82, "rx_read_requests") + a(83, struct.pack("=Q", 2**40)), nested=True)
            + a(81, s(82, "out_of_sequence") + a(83, struct.pack("=Q", 3)), nested=True)),
            nested=True) + a(19, a(20, u32(21, 17), nested=True), nested=True),
            nested=True), nested=True)],
    })


def test_qps_decoded_ranked_and_bounded() -> None:
    sock = fake(sq=0xFFFFF0)
    col = RdmaQpCollector(RdmaNetlinkClient(lambda: sock), top_n=2)  # type: ignore[arg-type,return-value]
    first = col.poll()[0]
    assert col.idle_s() == 0.0
    by = {q.qpn: (q, sr, rr) for q, sr, rr in first}
    gsi, rc, cm = by[1][0], by[17][0], by[19][0]
    assert (gsi.type, gsi.owner, gsi.peer_qpn) == ("GSI", "ib_core", None)
    assert (rc.type, rc.state, rc.peer_qpn, rc.sq_psn, rc.rq_psn, rc.port, rc.owner) == \
        ("RC", "RTS", 18, 0xFFFFF0, 500, 1, "pid 4242")
    assert (cm.local_address, cm.peer_address) == ("10.78.0.10:4791", "10.78.0.11:5000")
    assert by[17][1] is None  # no rate before a second poll
    # the request for QPs names the device by index (DEV_INDEX = 1, u32 3)
    assert (NLDEV_TYPE(10), u32(1, 3)) in sock.requests
    # QP 17's send PSN wraps past 2^24 - 1 by 0x20 packets; QP 19 advances by 5
    col.client = RdmaNetlinkClient(lambda: fake(sq=0x10, extra_sq=5))  # type: ignore[arg-type,return-value]
    out = col.collect()
    v = {smp.key: smp.value for smp in out.samples}
    info = [k for k in v if k[0] == m.RDMA_QP_INFO.name]
    assert len(info) == 2  # top_n of the 3 QPs
    assert {k[1][1] for k in info} == {"17", "19"}  # the most active (GSI did not move)
    assert v[(m.RDMA_QPS.name, ("rxe0", "RC", "RTS"))] == 2
    assert v[(m.RDMA_QPS.name, ("rxe0", "GSI", "RTS"))] == 1
    rate17 = v[(m.RDMA_QP_PSN_RATE.name, ("rxe0", "17", "sq"))]
    rate19 = v[(m.RDMA_QP_PSN_RATE.name, ("rxe0", "19", "sq"))]
    assert rate17 / rate19 == pytest.approx(0x20 / 5)
    assert v[(m.RDMA_QP_COUNTER.name, ("rxe0", "17", "rx_read_requests"))] == 2**40
    assert v[(m.RDMA_QP_COUNTER.name, ("rxe0", "17", "out_of_sequence"))] == 3
    assert not [k for k in v if k[0] == m.RDMA_QP_COUNTER.name and k[1][1] != "17"]
    assert psn_advance(0xFFFFF0, 0x10) == 0x20


def test_qps_in_the_profile_joinable_by_qpn() -> None:
    col = RdmaQpCollector(RdmaNetlinkClient(lambda: fake(sq=10)))  # type: ignore[arg-type,return-value]
    d = Daemon(Config(), jobs_factory=lambda c: [])
    d.ingest(col.collect())
    doc = to_json_dict(d.snapshot.profile)
    qps = {q["qpn"]: q for q in doc["rdma_qps"]}
    assert qps[17]["peer_qpn"] == 18 and qps[17]["type"] == "RC" and qps[17]["port"] == 1
    assert qps[19]["peer_address"] == "10.78.0.11:5000"
    assert qps[1]["peer_qpn"] is None
    assert qps[17]["counters"] == {"rx_read_requests": 2**40, "out_of_sequence": 3}


def test_a_kernel_without_rdma_is_no_fault() -> None:
    # This host's kernel has no RDMA (NETLINK_RDMA is refused): no QPs, no fault.
    qp = RdmaQpCollector()
    col = qp.collect()
    assert col.faults == () and col.samples == ()
    assert qp.idle_s() == 10.0  # looked at again every 10 s, not every second


def test_config_section() -> None:
    cfg = parse_config({"collectors": {"rdma_qp": {"top_n": 5, "interval_s": 2.0}}})
    assert cfg.rdma_qp.top_n == 5 and cfg.rdma_qp.interval_s == 2.0
    from netio.errors import ConfigError

    with pytest.raises(ConfigError) as ei:
        parse_config({"collectors": {"rdma_qp": {"top_n": -1}}})
    assert ei.value.key == "collectors.rdma_qp.top_n"
