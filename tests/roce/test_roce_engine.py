"""Engine surface: IP-packet input with ICRC, SRQ, READ/atomic limit, SQD, IPv6."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest

from netio.roce import (
    Access,
    QpAttributes,
    QpState,
    QpType,
    RecvWr,
    RoceEngine,
    SendWr,
    WcStatus,
    WrOpcode,
)
from netio.roce.engine import udp_payload_icrc_ok
from netio.roce.sim import EnginePair, connected_pair
from netio.wire.ip import IpProto, Ipv4
from netio.wire.udp import ROCEV2_UDP_PORT, Udp


def _ip_packet(payload: bytes, src: str, dst: str, src_port: int, ip_id: int) -> bytes:
    udp = Udp(src_port, ROCEV2_UDP_PORT, 8 + len(payload), 0).encode()
    ip = Ipv4(ipaddress.IPv4Address(src), ipaddress.IPv4Address(dst), IpProto.UDP,
              total_length=28 + len(payload), identification=ip_id).encode()
    return ip + udp + payload


@pytest.mark.parametrize(("ip_id", "accepted"), [(0, True), (0x1234, False)])
def test_receive_ip_packet_checks_the_icrc_as_sent(ip_id: int, accepted: bool) -> None:
    _pair, a, b = connected_pair()
    buf = bytearray(16)
    b.qp.post_recv(RecvWr(1, (b.pd.register(buf, Access.LOCAL_WRITE).sge(),)))
    a.qp.post_send(SendWr(1, WrOpcode.SEND, (a.pd.register(bytearray(b"abc"),
                                                           Access.NONE).sge(),)))
    (d,) = a.engine.datagrams_to_send(0)
    # The engine computed the ICRC for IP ID 0 (what a DF UDP socket sends).
    assert udp_payload_icrc_ok(d.payload, a.engine.local_ip, b.engine.local_ip, d.src_udp_port)
    b.engine.receive_ip_packet(_ip_packet(d.payload, "10.0.0.1", "10.0.0.2", d.src_udp_port,
                                          ip_id), 1)
    assert (len(b.cq) == 1) is accepted
    assert b.engine.stats.dropped_icrc == (0 if accepted else 1)
    if not accepted:
        # Through a UDP socket the IP ID is unknown: ip_id=None skips the ICRC check.
        b.engine.receive_datagram(d.payload, "10.0.0.1", 2, d.src_udp_port, ip_id=None)
        assert len(b.cq) == 1
    assert buf[:3] == b"abc"


def test_corrupted_datagram_is_dropped() -> None:
    _pair, a, b = connected_pair()
    b.qp.post_recv(RecvWr(1, (b.pd.register(bytearray(16), Access.LOCAL_WRITE).sge(),)))
    a.qp.post_send(SendWr(1, WrOpcode.SEND, (a.pd.register(bytearray(b"abc"),
                                                           Access.NONE).sge(),)))
    (d,) = a.engine.datagrams_to_send(0)
    bad = bytearray(d.payload)
    bad[12] ^= 1
    b.engine.receive_datagram(bytes(bad), "10.0.0.1", 1, d.src_udp_port)
    assert len(b.cq) == 0 and b.engine.stats.dropped_icrc == 1


def test_shared_receive_queue() -> None:
    ea, eb = RoceEngine("10.0.0.1"), RoceEngine("10.0.0.2")
    pda, pdb = ea.alloc_pd(), eb.alloc_pd()
    cqa, cqb = ea.create_cq(), eb.create_cq()
    srq = eb.create_srq(pdb)
    buf = bytearray(64 * 4)
    mr = pdb.register(buf, Access.LOCAL_WRITE)
    for i in range(4):
        srq.post_recv(RecvWr(i, (mr.sge(64 * i, 64),)))
    qas = [ea.create_qp(pda, QpType.RC, cqa) for _ in range(2)]
    qbs = [eb.create_qp(pdb, QpType.RC, cqb, srq=srq) for _ in range(2)]
    for qa, qb in zip(qas, qbs, strict=True):
        for me, peer, ip in ((qa, qb, eb.local_ip), (qb, qa, ea.local_ip)):
            me.modify(QpState.INIT, QpAttributes(dest_qp_num=peer.qp_num, remote_ip=ip))
            me.modify(QpState.RTR)
            me.modify(QpState.RTS)
    src = pda.register(bytearray(b"0123456789"), Access.NONE)
    for n, qa in enumerate(qas * 2):
        qa.post_send(SendWr(n, WrOpcode.SEND, (src.sge(0, n + 1),)))
    pair = EnginePair(ea, eb)
    assert pair.run(lambda: len(cqb) == 4 and len(cqa) == 4, max_time_ns=10**9)
    wcs = cqb.poll()
    assert sorted(w.wr_id for w in wcs) == [0, 1, 2, 3] and len(srq) == 0
    assert {w.qp_num for w in wcs} == {q.qp_num for q in qbs}
    assert all(w.status is WcStatus.SUCCESS for w in cqa.poll())


def test_max_rd_atomic_limits_outstanding_reads() -> None:
    pair, a, b = connected_pair(max_rd_atomic=1)
    remote = b.pd.register(bytearray(b"r" * 64), Access.LOCAL_WRITE | Access.REMOTE_READ)
    local = a.pd.register(bytearray(64 * 3), Access.LOCAL_WRITE)
    for i in range(3):
        a.qp.post_send(SendWr(i, WrOpcode.RDMA_READ, (local.sge(64 * i, 64),),
                              remote_addr=remote.addr, rkey=remote.rkey))
    assert len(a.engine.datagrams_to_send(0)) == 1
    assert pair.run(lambda: len(a.cq) == 3, max_time_ns=10**9)
    assert bytes(local.buffer) == b"r" * 192


def test_sqd_starts_no_new_work() -> None:
    pair, a, b = connected_pair()
    b.qp.post_recv(RecvWr(1, (b.pd.register(bytearray(8), Access.LOCAL_WRITE).sge(),)))
    a.qp.modify(QpState.SQD)
    a.qp.post_send(SendWr(1, WrOpcode.SEND, (a.pd.register(bytearray(4),
                                                           Access.NONE).sge(),)))
    assert a.engine.datagrams_to_send(0) == []
    a.qp.modify(QpState.RTS)
    assert pair.run(lambda: len(a.cq) == 1, max_time_ns=10**9)


def test_ipv6_pair() -> None:
    ea, eb = RoceEngine("fd00::1"), RoceEngine("fd00::2")
    ends = []
    for e in (ea, eb):
        pd = e.alloc_pd()
        cq = e.create_cq()
        ends.append((e, pd, cq, e.create_qp(pd, QpType.RC, cq)))
    (_, pda, cqa, qa), (_, pdb, _cqb, qb) = ends
    base = QpAttributes(path_mtu_bytes=1024)
    qa.modify(QpState.INIT, dataclasses.replace(base, dest_qp_num=qb.qp_num,
                                                remote_ip=eb.local_ip))
    qb.modify(QpState.INIT, dataclasses.replace(base, dest_qp_num=qa.qp_num,
                                                remote_ip=ea.local_ip))
    for q in (qa, qb):
        q.modify(QpState.RTR)
        q.modify(QpState.RTS)
    remote = pdb.register(bytearray(b"v6" * 1500), Access.LOCAL_WRITE | Access.REMOTE_READ)
    local = pda.register(bytearray(3000), Access.LOCAL_WRITE)
    qa.post_send(SendWr(1, WrOpcode.RDMA_READ, (local.sge(),), remote_addr=remote.addr,
                        rkey=remote.rkey))
    assert EnginePair(ea, eb).run(lambda: len(cqa) == 1, max_time_ns=10**9)
    assert cqa.poll()[0].status is WcStatus.SUCCESS
    assert bytes(local.buffer) == b"v6" * 1500
