"""Retries that run out: RETRY_EXC_ERR, RNR_RETRY_EXC_ERR, and the timer API."""

from __future__ import annotations

import pytest

from netio.roce import Access, LinkFaults, QpState, RecvWr, SendWr, WcStatus, WrOpcode
from netio.roce.sim import Endpoint, connected_pair
from netio.wire.ext import rnr_timer_ns

TIMEOUT = 10  # 4.096 µs * 2**10 = 4.19 ms
TIMEOUT_NS = 4096 << TIMEOUT


def _post_three(a: Endpoint, b: Endpoint) -> tuple[bytearray, bytearray]:
    src = bytearray(b"x" * 3000)
    target = bytearray(4096)
    mr = a.pd.register(src, Access.LOCAL_WRITE)
    rmr = b.pd.register(target, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ)
    a.qp.post_send(SendWr(1, WrOpcode.SEND, (mr.sge(0, 100),)))
    a.qp.post_send(SendWr(2, WrOpcode.RDMA_WRITE, (mr.sge(0, 3000),), remote_addr=rmr.addr,
                          rkey=rmr.rkey))
    a.qp.post_send(SendWr(3, WrOpcode.RDMA_READ, (mr.sge(0, 2000),), remote_addr=rmr.addr,
                          rkey=rmr.rkey))
    b.qp.post_recv(RecvWr(9, (b.pd.register(bytearray(256), Access.LOCAL_WRITE).sge(),)))
    return src, target


@pytest.mark.parametrize("retry_cnt", [0, 1, 3, 7])
@pytest.mark.parametrize("direction", ["requests", "responses", "both"])
def test_retry_exceeded_when_the_link_is_dead(retry_cnt: int, direction: str) -> None:
    dead = LinkFaults(drop=1.0)
    pair, a, b = connected_pair(faults_ab=dead if direction != "responses" else None,
                                faults_ba=dead if direction != "requests" else None,
                                timeout=TIMEOUT, retry_cnt=retry_cnt)
    _post_three(a, b)
    assert pair.run(lambda: len(a.cq) == 3, max_time_ns=100 * TIMEOUT_NS)
    wcs = a.cq.poll()
    assert [(w.wr_id, w.status) for w in wcs] == [
        (1, WcStatus.RETRY_EXC_ERR), (2, WcStatus.WR_FLUSH_ERR), (3, WcStatus.WR_FLUSH_ERR)]
    assert a.qp.state is QpState.ERR
    # One original transmission plus retry_cnt retries, each followed by a full timeout.
    assert (retry_cnt + 1) * TIMEOUT_NS <= pair.now_ns <= (retry_cnt + 2) * TIMEOUT_NS
    assert a.qp.requester.recovery.timeouts == retry_cnt + 1
    assert a.engine.get_timer() is None
    pair.run(max_time_ns=10 * TIMEOUT_NS)
    assert len(a.cq) == 0  # nothing more, ever


@pytest.mark.parametrize(("outage_timeouts", "ok"), [(2, True), (5, True), (12, False)])
def test_outage_shorter_than_the_retries_recovers(outage_timeouts: int, ok: bool) -> None:
    outage = LinkFaults(blackout_ns=(0, outage_timeouts * TIMEOUT_NS))
    pair, a, b = connected_pair(faults_ab=outage, timeout=TIMEOUT, retry_cnt=7)
    src, target = _post_three(a, b)
    assert pair.run(lambda: len(a.cq) == 3, max_time_ns=100 * TIMEOUT_NS)
    statuses = [w.status for w in a.cq.poll()]
    if ok:
        assert statuses == [WcStatus.SUCCESS] * 3
        assert target[:3000] == src
    else:
        assert statuses == [WcStatus.RETRY_EXC_ERR, WcStatus.WR_FLUSH_ERR, WcStatus.WR_FLUSH_ERR]


@pytest.mark.parametrize("rnr_retry", [0, 1, 2, 6])
@pytest.mark.parametrize("opcode", [WrOpcode.SEND, WrOpcode.RDMA_WRITE_WITH_IMM])
def test_rnr_retry_exceeded(rnr_retry: int, opcode: WrOpcode) -> None:
    pair, a, b = connected_pair(rnr_retry=rnr_retry, min_rnr_timer=14, timeout=TIMEOUT)
    mr = a.pd.register(bytearray(5000), Access.LOCAL_WRITE)
    target = bytearray(5000)
    rmr = b.pd.register(target, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    imm = 7 if opcode is WrOpcode.RDMA_WRITE_WITH_IMM else None
    a.qp.post_send(SendWr(1, opcode, (mr.sge(0, 2500),), remote_addr=rmr.addr, rkey=rmr.rkey,
                          imm_data=imm))
    a.qp.post_send(SendWr(2, WrOpcode.SEND, (mr.sge(0, 10),)))
    assert pair.run(lambda: len(a.cq) == 2, max_time_ns=10**10)
    assert [w.status for w in a.cq.poll()] == [WcStatus.RNR_RETRY_EXC_ERR, WcStatus.WR_FLUSH_ERR]
    assert a.qp.requester.recovery.rnr_naks == rnr_retry + 1
    assert b.qp.responder.rnr_naks_sent == rnr_retry + 1
    assert pair.now_ns >= rnr_retry * rnr_timer_ns(14)


def test_rnr_infinite_retry_waits_for_a_receive() -> None:
    pair, a, b = connected_pair(rnr_retry=7, min_rnr_timer=1, timeout=TIMEOUT)
    mr = a.pd.register(bytearray(b"hello world"), Access.LOCAL_WRITE)
    a.qp.post_send(SendWr(1, WrOpcode.SEND, (mr.sge(),)))
    pair.run(max_time_ns=5_000_000, max_steps=2000)
    assert len(a.cq) == 0
    assert b.qp.responder.rnr_naks_sent > 10
    buf = bytearray(64)
    b.qp.post_recv(RecvWr(5, (b.pd.register(buf, Access.LOCAL_WRITE).sge(),)))
    assert pair.run(lambda: len(a.cq) == 1 and len(b.cq) == 1, max_time_ns=10**9)
    assert a.cq.poll()[0].status is WcStatus.SUCCESS
    wc = b.cq.poll()[0]
    assert (wc.wr_id, wc.status, wc.byte_len) == (5, WcStatus.SUCCESS, 11)
    assert buf[:11] == b"hello world"


def test_timer_follows_the_ack_timeout() -> None:
    _pair, a, b = connected_pair(timeout=TIMEOUT)
    assert a.engine.get_timer() is None
    mr = a.pd.register(bytearray(10), Access.LOCAL_WRITE)
    b.qp.post_recv(RecvWr(1, (b.pd.register(bytearray(10), Access.LOCAL_WRITE).sge(),)))
    a.qp.post_send(SendWr(1, WrOpcode.SEND, (mr.sge(),)))
    out = a.engine.datagrams_to_send(5_000)
    assert len(out) == 1
    assert a.engine.get_timer() == 5_000 + TIMEOUT_NS
    for d in out:
        b.engine.receive_datagram(d.payload, a.engine.local_ip, 6_000, d.src_udp_port)
    for d in b.engine.datagrams_to_send(6_000):
        a.engine.receive_datagram(d.payload, b.engine.local_ip, 7_000, d.src_udp_port)
    assert a.engine.get_timer() is None
    assert [w.status for w in a.cq.poll()] == [WcStatus.SUCCESS]


def test_timeout_zero_means_no_timer() -> None:
    pair, a, _b = connected_pair(timeout=0, faults_ab=LinkFaults(drop=1.0))
    mr = a.pd.register(bytearray(10), Access.LOCAL_WRITE)
    a.qp.post_send(SendWr(1, WrOpcode.SEND, (mr.sge(),)))
    pair.run(max_time_ns=10**9)
    assert a.engine.get_timer() is None
    assert len(a.cq) == 0
