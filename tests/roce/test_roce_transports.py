"""UC (no retransmission), UD (Q_Key, GRH) and the rxe UDP source port."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netio.errors import RoceError
from netio.pcap import open_capture
from netio.roce import (
    Access,
    LinkFaults,
    QpAttributes,
    QpState,
    QpType,
    RecvWr,
    RoceEngine,
    SendWr,
    UdAddress,
    WcFlags,
    WcOpcode,
    WcStatus,
    WrOpcode,
    default_udp_source_port,
    udp_source_port,
)
from netio.roce.sim import Endpoint, EnginePair, connected_pair
from netio.wire.bth import Transport
from netio.wire.packet import decode_frame

REF_PCAP = Path(__file__).parents[2] / ".." / "shared" / "rxe-lab" / "ref-rxe-rc.pcap"
MTU = 256
rate = st.sampled_from([0.0, 0.02, 0.05, 0.1])


def _message(index: int, size: int) -> bytes:
    head = index.to_bytes(4, "big")
    return (head + bytes((index + i) & 0xFF for i in range(size)))[:size]


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(4, 4 * MTU), min_size=1, max_size=25),
       drop=rate, dup=rate, corrupt=rate, reorder=rate, seed=st.integers(0, 2**32 - 1),
       psn=st.one_of(st.integers(0, 0xFFFFFF), st.just(0xFFFFFE)))
def test_uc_loss_drops_whole_messages_never_corrupts(sizes: list[int], drop: float, dup: float,
                                                      corrupt: float, reorder: float, seed: int,
                                                      psn: int) -> None:
    f = LinkFaults(drop=drop, duplicate=dup, corrupt=corrupt, reorder=reorder)
    pair, a, b = connected_pair(QpType.UC, seed=seed, faults_ab=f, path_mtu_bytes=MTU, psn_a=psn)
    src = bytearray(b"".join(_message(i, s) for i, s in enumerate(sizes)))
    mr = a.pd.register(src, Access.LOCAL_WRITE)
    slot = 4 * MTU
    dst = bytearray(slot * len(sizes))
    rmr = b.pd.register(dst, Access.LOCAL_WRITE)
    for i in range(len(sizes)):
        b.qp.post_recv(RecvWr(i, (rmr.sge(i * slot, slot),)))
    offset = 0
    for i, s in enumerate(sizes):
        a.qp.post_send(SendWr(i, WrOpcode.SEND, (mr.sge(offset, s),)))
        offset += s
    pair.run(max_time_ns=10**9)
    # The requester completes every UC send (no acknowledgements exist).
    assert [(w.wr_id, w.status) for w in a.cq.poll(100)] == [
        (i, WcStatus.SUCCESS) for i in range(len(sizes))]
    seen = []
    for wc in b.cq.poll(100):
        assert wc.status is WcStatus.SUCCESS
        got = bytes(dst[wc.wr_id * slot : wc.wr_id * slot + wc.byte_len])
        index = int.from_bytes(got[:4], "big")
        assert got == _message(index, sizes[index])
        seen.append(index)
    assert seen == sorted(set(seen))  # in order, never twice
    if drop == dup == corrupt == reorder == 0.0:
        assert seen == list(range(len(sizes)))


def test_uc_rdma_write() -> None:
    pair, a, b = connected_pair(QpType.UC, path_mtu_bytes=MTU)
    src = bytearray(range(256)) * 4
    dst = bytearray(1024)
    rmr = b.pd.register(dst, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    a.qp.post_send(SendWr(1, WrOpcode.RDMA_WRITE, (a.pd.register(src, Access.NONE).sge(),),
                          remote_addr=rmr.addr, rkey=rmr.rkey))
    pair.run(max_time_ns=10**8)
    assert [w.status for w in a.cq.poll()] == [WcStatus.SUCCESS]
    assert dst == src


def test_uc_rejects_read_and_atomics() -> None:
    _pair, a, _b = connected_pair(QpType.UC)
    mr = a.pd.register(bytearray(8), Access.LOCAL_WRITE)
    for op in (WrOpcode.RDMA_READ, WrOpcode.ATOMIC_FETCH_AND_ADD):
        with pytest.raises(RoceError):
            a.qp.post_send(SendWr(1, op, (mr.sge(),)))


def _ud_pair(qkey_b: int = 0x1234) -> tuple[EnginePair, Endpoint, Endpoint]:
    ends = []
    for ip, qkey in (("10.0.0.1", 0x1234), ("10.0.0.2", qkey_b)):
        e = RoceEngine(ip)
        pd = e.alloc_pd()
        cq = e.create_cq()
        qp = e.create_qp(pd, QpType.UD, cq)
        qp.modify(QpState.INIT, QpAttributes(qkey=qkey, path_mtu_bytes=1024))
        qp.modify(QpState.RTR)
        qp.modify(QpState.RTS)
        ends.append(Endpoint(e, pd, cq, qp))
    return EnginePair(ends[0].engine, ends[1].engine), ends[0], ends[1]


@pytest.mark.parametrize(("wr_qkey", "delivered"), [(0x1234, True), (0x4321, False),
                                                    (0x8000_0000, True)])
def test_ud_send_checks_the_qkey(wr_qkey: int, delivered: bool) -> None:
    pair, a, b = _ud_pair()
    pda, cqa, qpa, pdb, cqb, qpb = a.pd, a.cq, a.qp, b.pd, b.cq, b.qp
    buf = bytearray(40 + 100)
    qpb.post_recv(RecvWr(3, (pdb.register(buf, Access.LOCAL_WRITE).sge(),)))
    msg = bytearray(b"u" * 100)
    dest = UdAddress(ipaddress.IPv4Address("10.0.0.2"), qpb.qp_num, wr_qkey)
    qpa.post_send(SendWr(1, WrOpcode.SEND_WITH_IMM, (pda.register(msg, Access.NONE).sge(),),
                         imm_data=0xBEEF, ud=dest))
    pair.run(max_time_ns=10**8)
    assert [w.status for w in cqa.poll()] == [WcStatus.SUCCESS]
    wcs = cqb.poll()
    if not delivered:
        assert wcs == []
        return
    (wc,) = wcs
    assert (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.src_qp, wc.imm_data) == (
        3, WcStatus.SUCCESS, WcOpcode.RECV, 140, qpa.qp_num, 0xBEEF)
    assert wc.wc_flags == WcFlags.GRH | WcFlags.WITH_IMM
    assert buf[40:] == msg
    assert buf[20] == 0x45 and bytes(buf[32:40]) == bytes([10, 0, 0, 1, 10, 0, 0, 2])


def test_ud_message_larger_than_mtu_is_refused() -> None:
    _pair, a, _b = _ud_pair()
    pda, qpa = a.pd, a.qp
    mr = pda.register(bytearray(2000), Access.NONE)
    with pytest.raises(RoceError):
        qpa.post_send(SendWr(1, WrOpcode.SEND, (mr.sge(),),
                             ud=UdAddress(ipaddress.IPv4Address("10.0.0.2"), 0x11, 0x1234)))


def test_udp_source_port_is_symmetric_and_in_range() -> None:
    for a, b in ((0x11, 0x12), (0xFFFFFF, 0x123456), (1, 1)):
        assert udp_source_port(a, b) == udp_source_port(b, a)
        assert 0xC000 <= udp_source_port(a, b) <= 0xFFFF
        assert 0xC000 <= default_udp_source_port(a) <= 0xFFFF


def test_udp_source_port_matches_kernel_rxe_capture() -> None:
    """In the rxe reference capture, every QP's source port is the one rxe derives."""
    flows: dict[tuple[str, str, int], tuple[Transport, set[int]]] = {}
    with open_capture(REF_PCAP) as reader:
        for rec in reader:
            frame = decode_frame(rec.frame, rec.linktype)
            if frame.roce is None or frame.ip is None or frame.udp is None:
                continue
            bth = frame.roce.bth
            key = (str(frame.ip.src_ip), str(frame.ip.dst_ip), bth.dest_qp)
            flows.setdefault(key, (bth.transport, set()))[1].add(frame.udp.src_port)
    checked = 0
    for (src, dst, dest_qp), (transport, ports) in flows.items():
        if transport is Transport.UD:
            assert ports == {default_udp_source_port(dest_qp)}
            checked += 1
            continue
        reverse = [qp for (s, d, qp) in flows if s == dst and d == src and qp == dest_qp]
        if dest_qp == 27:
            continue  # the rdma_cm (rping) connection sets its own flow label
        assert reverse, (src, dst, dest_qp)
        assert ports == {udp_source_port(dest_qp, dest_qp)}
        checked += 1
    assert checked >= 10
