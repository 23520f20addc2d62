"""Remote access violations: the right NAK, the right error completion, memory untouched."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from netio.roce import (
    Access,
    FaultyLink,
    MemoryRegion,
    OutgoingDatagram,
    QpState,
    RecvWr,
    SendWr,
    WcStatus,
    WrOpcode,
)
from netio.roce.sim import Endpoint, connected_pair
from netio.wire.bth import Opcode
from netio.wire.ext import AckType, NakCode
from netio.wire.packet import decode_roce

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
MTU = 256
TARGET_BYTES = 1024

Case = Callable[[Endpoint, Endpoint, MemoryRegion, MemoryRegion], SendWr]


def _write(size: int, *, offset: int = 0, rkey_delta: int = 0) -> Case:
    def make(a: Endpoint, _b: Endpoint, local: MemoryRegion, remote: MemoryRegion) -> SendWr:
        return SendWr(1, WrOpcode.RDMA_WRITE, (local.sge(0, size),),
                      remote_addr=remote.addr + offset, rkey=remote.rkey + rkey_delta)
    return make


def _read(size: int, *, offset: int = 0) -> Case:
    def make(a: Endpoint, _b: Endpoint, local: MemoryRegion, remote: MemoryRegion) -> SendWr:
        return SendWr(1, WrOpcode.RDMA_READ, (local.sge(0, size),),
                      remote_addr=remote.addr + offset, rkey=remote.rkey)
    return make


def _atomic(op: WrOpcode, *, offset: int = 0) -> Case:
    def make(a: Endpoint, _b: Endpoint, local: MemoryRegion, remote: MemoryRegion) -> SendWr:
        return SendWr(1, op, (local.sge(0, 8),), remote_addr=remote.addr + offset,
                      rkey=remote.rkey, compare_add=0, swap=0xFFFF)
    return make


def _deregistered(inner: Case) -> Case:
    def make(a: Endpoint, b: Endpoint, local: MemoryRegion, remote: MemoryRegion) -> SendWr:
        b.pd.deregister(remote)
        return inner(a, b, local, remote)
    return make


CASES: dict[str, tuple[Access, Case, NakCode, WcStatus]] = {
    "write wrong rkey": (ALL, _write(100, rkey_delta=0x100), NakCode.REMOTE_ACCESS_ERROR,
                         WcStatus.REM_ACCESS_ERR),
    "write out of bounds": (ALL, _write(3 * MTU, offset=TARGET_BYTES - 100),
                            NakCode.REMOTE_ACCESS_ERROR, WcStatus.REM_ACCESS_ERR),
    "write before the region": (ALL, _write(10, offset=-8), NakCode.REMOTE_ACCESS_ERROR,
                                WcStatus.REM_ACCESS_ERR),
    "write without REMOTE_WRITE": (Access.LOCAL_WRITE | Access.REMOTE_READ, _write(600),
                                   NakCode.REMOTE_ACCESS_ERROR, WcStatus.REM_ACCESS_ERR),
    "read without REMOTE_READ": (Access.LOCAL_WRITE | Access.REMOTE_WRITE, _read(100),
                                 NakCode.REMOTE_ACCESS_ERROR, WcStatus.REM_ACCESS_ERR),
    "read larger than the region": (ALL, _read(TARGET_BYTES + 1), NakCode.REMOTE_ACCESS_ERROR,
                                    WcStatus.REM_ACCESS_ERR),
    "atomic without REMOTE_ATOMIC": (Access.LOCAL_WRITE | Access.REMOTE_WRITE
                                     | Access.REMOTE_READ,
                                     _atomic(WrOpcode.ATOMIC_FETCH_AND_ADD),
                                     NakCode.REMOTE_ACCESS_ERROR, WcStatus.REM_ACCESS_ERR),
    "misaligned fetch-add": (ALL, _atomic(WrOpcode.ATOMIC_FETCH_AND_ADD, offset=4),
                             NakCode.INVALID_REQUEST, WcStatus.REM_INV_REQ_ERR),
    "misaligned compare-swap": (ALL, _atomic(WrOpcode.ATOMIC_CMP_AND_SWP, offset=1),
                                NakCode.INVALID_REQUEST, WcStatus.REM_INV_REQ_ERR),
    "atomic out of bounds": (ALL, _atomic(WrOpcode.ATOMIC_CMP_AND_SWP, offset=TARGET_BYTES),
                             NakCode.REMOTE_ACCESS_ERROR, WcStatus.REM_ACCESS_ERR),
    "write to a deregistered region": (ALL, _deregistered(_write(100)),
                                       NakCode.REMOTE_ACCESS_ERROR, WcStatus.REM_ACCESS_ERR),
    "read from a deregistered region": (ALL, _deregistered(_read(100)),
                                        NakCode.REMOTE_ACCESS_ERROR, WcStatus.REM_ACCESS_ERR),
}


@pytest.mark.parametrize("name", list(CASES))
def test_remote_access_violation(name: str) -> None:
    access, make, nak, status = CASES[name]
    pair, a, b = connected_pair(path_mtu_bytes=MTU, timeout=10)
    naks: list[NakCode | int | None] = []

    def spy(d: OutgoingDatagram) -> bool:
        hdrs, _payload, _icrc = decode_roce(d.payload)
        if hdrs.bth.opcode is Opcode.RC_ACKNOWLEDGE and hdrs.aeth is not None and (
            hdrs.aeth.ack_type is AckType.NAK
        ):
            naks.append(hdrs.aeth.nak_code)
        return False

    pair.ba = FaultyLink(5, drop_if=spy)
    local_buf = bytearray(b"\xaa" * 2 * TARGET_BYTES)
    local = a.pd.register(local_buf, Access.LOCAL_WRITE)
    target = bytearray(bytes(range(256)) * (TARGET_BYTES // 256))
    before = bytes(target)
    remote = b.pd.register(target, access)
    b.qp.post_recv(RecvWr(50, (b.pd.register(bytearray(64), Access.LOCAL_WRITE).sge(),)))
    wr = make(a, b, local, remote)
    a.qp.post_send(wr)
    a.qp.post_send(SendWr(2, WrOpcode.SEND, (local.sge(0, 16),)))
    assert pair.run(lambda: len(a.cq) == 2, max_time_ns=10**9)
    assert [(w.wr_id, w.status) for w in a.cq.poll()] == [(1, status),
                                                          (2, WcStatus.WR_FLUSH_ERR)]
    assert naks == [nak]
    assert bytes(target) == before
    assert local_buf == b"\xaa" * 2 * TARGET_BYTES  # nothing read back, no original value
    assert a.qp.state is QpState.ERR and b.qp.state is QpState.ERR
    # The responder flushed its posted receive when it entered ERR.
    assert [(w.wr_id, w.status) for w in b.cq.poll()] == [(50, WcStatus.WR_FLUSH_ERR)]


def test_send_larger_than_the_receive_buffer() -> None:
    pair, a, b = connected_pair(path_mtu_bytes=MTU)
    local = a.pd.register(bytearray(1000), Access.LOCAL_WRITE)
    b.qp.post_recv(RecvWr(7, (b.pd.register(bytearray(300), Access.LOCAL_WRITE).sge(),)))
    a.qp.post_send(SendWr(1, WrOpcode.SEND, (local.sge(),)))
    assert pair.run(lambda: len(a.cq) == 1 and len(b.cq) == 1, max_time_ns=10**9)
    assert a.cq.poll()[0].status is WcStatus.REM_INV_REQ_ERR
    assert b.cq.poll()[0].status is WcStatus.LOC_LEN_ERR


def test_qp_without_remote_write_permission_rejects_writes() -> None:
    pair, a, b = connected_pair(access=Access.LOCAL_WRITE | Access.REMOTE_READ)
    target = bytearray(64)
    remote = b.pd.register(target, ALL)
    local = a.pd.register(bytearray(b"z" * 64), Access.LOCAL_WRITE)
    a.qp.post_send(SendWr(1, WrOpcode.RDMA_WRITE, (local.sge(),), remote_addr=remote.addr,
                          rkey=remote.rkey))
    assert pair.run(lambda: len(a.cq) == 1, max_time_ns=10**9)
    assert a.cq.poll()[0].status is WcStatus.REM_INV_REQ_ERR
    assert target == bytearray(64)
