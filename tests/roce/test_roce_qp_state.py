"""QP state machine: IBTA-legal transitions succeed, illegal ones raise; ERR flushes."""

from __future__ import annotations

import ipaddress
import itertools

import pytest

from netio.errors import RoceError
from netio.roce import (
    LEGAL_TRANSITIONS,
    Access,
    QpAttributes,
    QpState,
    QpType,
    QueuePair,
    RecvWr,
    RoceEngine,
    SendWr,
    WcStatus,
    WrOpcode,
)

ATTRS = QpAttributes(dest_qp_num=0x20, remote_ip=ipaddress.IPv4Address("10.0.0.2"))
PATH = {
    QpState.RESET: [],
    QpState.INIT: [QpState.INIT],
    QpState.RTR: [QpState.INIT, QpState.RTR],
    QpState.RTS: [QpState.INIT, QpState.RTR, QpState.RTS],
    QpState.SQD: [QpState.INIT, QpState.RTR, QpState.RTS, QpState.SQD],
    QpState.ERR: [QpState.ERR],
}


def _qp_in(state: QpState, qp_type: QpType = QpType.RC) -> QueuePair:
    engine = RoceEngine("10.0.0.1")
    pd = engine.alloc_pd()
    cq = engine.create_cq()
    qp = engine.create_qp(pd, qp_type, cq)
    for s in PATH[state]:
        qp.modify(s, ATTRS)
    assert qp.state is state
    return qp


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(PATH, QpState)))
def test_transition_table(src: QpState, dst: QpState) -> None:
    qp = _qp_in(src)
    if dst in LEGAL_TRANSITIONS[src]:
        qp.modify(dst, ATTRS)
        assert qp.state is dst
    else:
        with pytest.raises(RoceError):
            qp.modify(dst, ATTRS)
        assert qp.state is src


def test_legal_table_matches_ibta() -> None:
    # Every state may be reset or errored; the forward path is RESET-INIT-RTR-RTS.
    for s in QpState:
        assert {QpState.RESET, QpState.ERR} <= LEGAL_TRANSITIONS[s]
    assert QpState.RTS not in LEGAL_TRANSITIONS[QpState.INIT]
    assert QpState.RTR not in LEGAL_TRANSITIONS[QpState.RESET]
    assert LEGAL_TRANSITIONS[QpState.ERR] == {QpState.RESET, QpState.ERR}


def test_sqe_to_rts_only_for_uc_ud() -> None:
    for qp_type, ok in ((QpType.RC, False), (QpType.UC, True), (QpType.UD, True)):
        qp = _qp_in(QpState.RTS, qp_type)
        qp.state = QpState.SQE  # entered by a send error, never by modify
        if ok:
            qp.modify(QpState.RTS)
        else:
            with pytest.raises(RoceError):
                qp.modify(QpState.RTS)


def test_rtr_needs_the_remote_address() -> None:
    engine = RoceEngine("10.0.0.1")
    pd = engine.alloc_pd()
    qp = engine.create_qp(pd, QpType.RC, engine.create_cq())
    qp.modify(QpState.INIT, QpAttributes())
    with pytest.raises(RoceError):
        qp.modify(QpState.RTR)


def test_post_send_needs_rts() -> None:
    for state in (QpState.RESET, QpState.INIT, QpState.RTR):
        qp = _qp_in(state)
        mr = qp.pd.register(bytearray(8), Access.LOCAL_WRITE)
        with pytest.raises(RoceError):
            qp.post_send(SendWr(1, WrOpcode.SEND, (mr.sge(),)))


def test_error_state_flushes_everything() -> None:
    qp = _qp_in(QpState.RTS)
    mr = qp.pd.register(bytearray(4096), Access.LOCAL_WRITE)
    for i in range(5):
        qp.post_send(SendWr(i, WrOpcode.SEND, (mr.sge(0, 3000),), signaled=i % 2 == 0))
        qp.post_recv(RecvWr(100 + i, (mr.sge(),)))
    qp.engine.datagrams_to_send(0)  # some WRs are in flight, others not started
    qp.modify(QpState.ERR)
    wcs = qp.send_cq.poll(100)
    sends = [(w.wr_id, w.status) for w in wcs if w.wr_id < 100]
    recvs = [(w.wr_id, w.status) for w in wcs if w.wr_id >= 100]
    assert sends == [(i, WcStatus.WR_FLUSH_ERR) for i in range(5)]  # unsignaled too
    assert recvs == [(100 + i, WcStatus.WR_FLUSH_ERR) for i in range(5)]
    assert qp.engine.get_timer() is None
    # Posting in ERR completes at once with a flush error.
    qp.post_send(SendWr(9, WrOpcode.SEND, (mr.sge(0, 1),)))
    qp.post_recv(RecvWr(109, (mr.sge(),)))
    assert [(w.wr_id, w.status) for w in qp.send_cq.poll()] == [
        (9, WcStatus.WR_FLUSH_ERR), (109, WcStatus.WR_FLUSH_ERR)]
    qp.modify(QpState.RESET)
    assert qp.state is QpState.RESET


def test_attribute_validation() -> None:
    with pytest.raises(RoceError):
        QpAttributes(path_mtu_bytes=1500)
    with pytest.raises(RoceError):
        QpAttributes(retry_cnt=8)
    with pytest.raises(RoceError):
        QpAttributes(sq_psn=1 << 24)
