"""Exactly-once delivery between two in-memory engines under seeded link faults.

Every message arrives exactly once, in order and byte-identical; every work request gets
exactly one completion, matching it; the run ends within a bounded virtual time.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netio.roce import Access, LinkFaults, QpState, RecvWr, SendWr, WcOpcode, WcStatus, WrOpcode
from netio.roce.sim import connected_pair

MTU = 256
SLOT = 4 * MTU  # bytes of target memory per operation
MAX_VIRTUAL_NS = 30_000_000_000

OPS = [WrOpcode.SEND, WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM,
       WrOpcode.RDMA_READ, WrOpcode.ATOMIC_CMP_AND_SWP, WrOpcode.ATOMIC_FETCH_AND_ADD]

rate = st.sampled_from([0.0, 0.01, 0.03, 0.05, 0.1])
faults = st.builds(LinkFaults, drop=rate, duplicate=rate, corrupt=rate, reorder=rate,
                   delay=rate)
workload = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 3 * MTU + 17)),
                    min_size=1, max_size=10)
start_psn = st.one_of(st.integers(0, 0xFFFFFF), st.integers(0xFFFFF0, 0xFFFFFF))


def _pattern(index: int, size: int) -> bytes:
    return bytes((index * 31 + i * 7 + 1) & 0xFF for i in range(size))


def run_workload(ops: list[tuple[WrOpcode, int]], fab: LinkFaults, fba: LinkFaults, seed: int,
                 psn_a: int, psn_b: int) -> None:
    pair, a, b = connected_pair(seed=seed, faults_ab=fab, faults_ba=fba, psn_a=psn_a,
                                psn_b=psn_b, path_mtu_bytes=MTU, timeout=8, retry_cnt=7)
    n = len(ops)
    src = bytearray(b"".join(_pattern(i, SLOT) for i in range(n)))
    read_back = bytearray(n * SLOT)
    atomic_out = bytearray(8 * n)
    mr_src = a.pd.register(src, Access.LOCAL_WRITE)
    mr_rd = a.pd.register(read_back, Access.LOCAL_WRITE)
    mr_at = a.pd.register(atomic_out, Access.LOCAL_WRITE)
    # Remote memory: per-op slots; READ slots prefilled with a pattern; cell 0 a counter.
    remote = bytearray(n * SLOT + 16)
    for i, (op, _) in enumerate(ops):
        if op is WrOpcode.RDMA_READ:
            remote[i * SLOT : (i + 1) * SLOT] = _pattern(1000 + i, SLOT)
    counter_at = n * SLOT
    remote_before = bytes(remote)
    mr_remote = b.pd.register(remote, Access.LOCAL_WRITE | Access.REMOTE_WRITE
                              | Access.REMOTE_READ | Access.REMOTE_ATOMIC)
    recv_buf = bytearray(n * SLOT)
    mr_recv = b.pd.register(recv_buf, Access.LOCAL_WRITE)
    expect_recv: list[tuple[int, int, int | None, WcOpcode]] = []
    counter = 0
    expected_originals: dict[int, int] = {}
    for i, (op, size) in enumerate(ops):
        b.qp.post_recv(RecvWr(1000 + i, (mr_recv.sge(i * SLOT, SLOT),)))
        imm = (0xA5000000 | i) if op in (WrOpcode.SEND_WITH_IMM,
                                         WrOpcode.RDMA_WRITE_WITH_IMM) else None
        if op in (WrOpcode.SEND, WrOpcode.SEND_WITH_IMM):
            wr = SendWr(i, op, (mr_src.sge(i * SLOT, size),), imm_data=imm)
            expect_recv.append((i, size, imm, WcOpcode.RECV))
        elif op in (WrOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM):
            wr = SendWr(i, op, (mr_src.sge(i * SLOT, size),),
                        remote_addr=mr_remote.addr + i * SLOT, rkey=mr_remote.rkey,
                        imm_data=imm)
            if imm is not None:
                expect_recv.append((i, size, imm, WcOpcode.RECV_RDMA_WITH_IMM))
        elif op is WrOpcode.RDMA_READ:
            wr = SendWr(i, op, (mr_rd.sge(i * SLOT, size),),
                        remote_addr=mr_remote.addr + i * SLOT, rkey=mr_remote.rkey)
        elif op is WrOpcode.ATOMIC_FETCH_AND_ADD:
            wr = SendWr(i, op, (mr_at.sge(8 * i, 8),), remote_addr=mr_remote.addr + counter_at,
                        rkey=mr_remote.rkey, compare_add=3)
            expected_originals[i] = counter
            counter += 3
        else:
            wr = SendWr(i, op, (mr_at.sge(8 * i, 8),), remote_addr=mr_remote.addr + counter_at,
                        rkey=mr_remote.rkey, compare_add=counter, swap=counter + 5)
            expected_originals[i] = counter
            counter += 5
        a.qp.post_send(wr)
    done = pair.run(lambda: len(a.cq) >= n and len(b.cq) >= len(expect_recv),
                    max_time_ns=MAX_VIRTUAL_NS)
    assert done, f"not finished at {pair.now_ns} ns: {len(a.cq)}/{n} send completions"
    # Keep running: nothing may complete twice.
    pair.run(max_time_ns=50_000_000)
    send_wcs = a.cq.poll(10 * n)
    recv_wcs = b.cq.poll(10 * n)
    assert [wc.wr_id for wc in send_wcs] == list(range(n))
    for wc, (op, _size) in zip(send_wcs, ops, strict=True):
        assert wc.status is WcStatus.SUCCESS, (wc, op)
        assert wc.qp_num == a.qp.qp_num
    assert len(recv_wcs) == len(expect_recv)
    for wc, (i, size, imm, opcode) in zip(recv_wcs, expect_recv, strict=True):
        assert wc.status is WcStatus.SUCCESS
        assert wc.wr_id == 1000 + len([x for x in expect_recv if x[0] < i])
        assert (wc.opcode, wc.byte_len, wc.imm_data) == (opcode, size, imm)
    # Data: SENDs land in the receive buffers in order, WRITEs in their slots.
    recv_index = 0
    for i, (op, size) in enumerate(ops):
        data = _pattern(i, SLOT)[:size]
        if op in (WrOpcode.SEND, WrOpcode.SEND_WITH_IMM):
            slot = recv_wcs[recv_index].wr_id - 1000
            assert bytes(recv_buf[slot * SLOT : slot * SLOT + size]) == data
            recv_index += 1
        elif op in (WrOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM):
            assert bytes(remote[i * SLOT : i * SLOT + size]) == data
            assert remote[i * SLOT + size : (i + 1) * SLOT] == remote_before[
                i * SLOT + size : (i + 1) * SLOT]
            if op is WrOpcode.RDMA_WRITE_WITH_IMM:
                recv_index += 1
        elif op is WrOpcode.RDMA_READ:
            assert bytes(read_back[i * SLOT : i * SLOT + size]) == _pattern(1000 + i, SLOT)[:size]
            assert not any(read_back[i * SLOT + size : (i + 1) * SLOT])
            assert remote[i * SLOT : (i + 1) * SLOT] == remote_before[i * SLOT : (i + 1) * SLOT]
        else:
            assert int.from_bytes(atomic_out[8 * i : 8 * i + 8], "little") == (
                expected_originals[i])
    # Atomics executed exactly once: the counter moved by exactly the sum of the operations.
    assert int.from_bytes(remote[counter_at : counter_at + 8], "little") == counter
    assert a.qp.state is QpState.RTS and b.qp.state is QpState.RTS


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=workload, fab=faults, fba=faults, seed=st.integers(0, 2**32 - 1),
       psn_a=start_psn, psn_b=start_psn)
def test_rc_exactly_once_under_faults(ops: list[tuple[WrOpcode, int]], fab: LinkFaults,
                                      fba: LinkFaults, seed: int, psn_a: int,
                                      psn_b: int) -> None:
    run_workload(ops, fab, fba, seed, psn_a, psn_b)


def test_rc_heavy_faults_long_stream_across_psn_wrap() -> None:
    f = LinkFaults(drop=0.1, duplicate=0.1, corrupt=0.1, reorder=0.1, delay=0.1)
    ops = [(OPS[i % len(OPS)], (i * 97) % (3 * MTU + 1)) for i in range(40)]
    run_workload(ops, f, dataclasses.replace(f), 7, 0xFFFFF0, 0xFFFFFA)


def test_rc_no_faults_every_opcode() -> None:
    run_workload([(op, s) for op in OPS for s in (0, 1, MTU, MTU + 1, 3 * MTU)], LinkFaults(),
                 LinkFaults(), 1, 0, 0)
