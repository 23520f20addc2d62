"""The IO API conformance suite: the same cases, unchanged, over every backend pairing.

Expected statuses and opcodes are the libibverbs numbers, written out here from
``infiniband/verbs.h`` (``enum ibv_wc_status``, ``enum ibv_wc_opcode``), not taken from
netio's enums; atomics follow IBTA vol 1 §9.4.5 (the responder returns the original
value; FetchAdd adds modulo 2**64; CmpSwap replaces only on equality).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import netio
from tests.api.conftest import BACKENDS, Pair, connected, run

# enum ibv_wc_status / enum ibv_wc_opcode (rdma-core libibverbs/verbs.h)
IBV_WC_SUCCESS = 0
IBV_WC_LOC_LEN_ERR = 1
IBV_WC_WR_FLUSH_ERR = 5
IBV_WC_REM_INV_REQ_ERR = 9
IBV_WC_REM_ACCESS_ERR = 10
IBV_WC_RETRY_EXC_ERR = 12
IBV_WC_RNR_RETRY_EXC_ERR = 13
IBV_WC_SEND = 0
IBV_WC_RDMA_WRITE = 1
IBV_WC_RDMA_READ = 2
IBV_WC_RECV = 128
IBV_WC_RECV_RDMA_WITH_IMM = 129

# 0 B, 1 B, inline-sized, one 1024-byte MTU, several MTUs, more than 1 MiB
SIZES = (0, 1, 60, 1024, 9000, (1 << 20) + 3)

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def pattern(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_write_lands_in_place_every_size(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        target = np.zeros(max(SIZES) + 16, dtype=np.uint8)
        region = p.server.register(target)
        remote = netio.RemoteRegion.from_descriptor(region.descriptor())
        for i, size in enumerate(SIZES):
            src = pattern(size, i)
            local = p.client.register(src) if size else p.client.register(bytearray(1))
            c = await p.ep.write(local[0:size], remote[8:8 + size])
            assert (c.status, c.opcode, c.byte_len) == (IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, size)
            assert np.array_equal(target[8:8 + size], src), size
            assert target[:8].sum() == 0 and target[8 + size:].sum() == 0  # nothing beyond
            target[:] = 0
        # the peer registered the array itself: the bytes are in the caller's object
        assert region.view.obj is target or np.shares_memory(np.asarray(region.view), target)

    run(backend, scenario)


def test_read_every_size(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        source = pattern(max(SIZES), 7)
        remote = netio.RemoteRegion.from_descriptor(p.server.register(source).descriptor())
        for size in SIZES:
            dst = np.zeros(max(size, 1), dtype=np.uint8)
            c = await p.ep.read(p.client.register(dst)[0:size], remote[0:size])
            assert (c.status, c.opcode) == (IBV_WC_SUCCESS, IBV_WC_RDMA_READ)
            assert np.array_equal(dst[:size], source[:size])

    run(backend, scenario)


def test_send_recv_every_size_with_and_without_immediate(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        for i, size in enumerate(SIZES):
            inbox = np.zeros(max(size, 1), dtype=np.uint8)
            got = p.peer.recv(p.server.register(inbox))
            src = pattern(size, 100 + i)
            imm = None if i % 2 else 0xDEADBEEF - i
            sent = await p.ep.send(p.client.register(src if size else bytearray(1))[0:size],
                                   imm=imm, inline=size <= 60)
            c = await got
            assert (sent.status, sent.opcode) == (IBV_WC_SUCCESS, IBV_WC_SEND)
            assert (c.status, c.opcode, c.byte_len) == (IBV_WC_SUCCESS, IBV_WC_RECV, size)
            assert c.imm_data == imm
            assert np.array_equal(inbox[:size], src)

    run(backend, scenario)


def test_write_with_immediate_consumes_a_receive(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        target = np.zeros(4096, dtype=np.uint8)
        remote = netio.RemoteRegion.from_descriptor(p.server.register(target).descriptor())
        got = p.peer.recv(p.server.register(bytearray(16)))
        src = pattern(3000, 3)
        await p.ep.write(p.client.register(src), remote[100:3100], imm=0x01020304)
        c = await got
        assert (c.status, c.opcode, c.imm_data, c.byte_len) == (
            IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, 0x01020304, 3000)
        assert np.array_equal(target[100:3100], src)

    run(backend, scenario)


def test_atomics_follow_ibta(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        cell = np.array([2**64 - 3], dtype=np.uint64)
        region = p.server.register(cell, netio.Access.LOCAL_WRITE | netio.Access.REMOTE_ATOMIC)
        remote = netio.RemoteRegion.from_descriptor(region.descriptor())
        old = np.zeros(1, dtype=np.uint64)
        local = p.client.register(old)
        assert await p.ep.fetch_add(local, remote, 5) == 2**64 - 3
        assert int(old[0]) == 2**64 - 3  # the original also lands in the local buffer
        assert int(cell[0]) == 2  # modulo 2**64
        assert await p.ep.compare_swap(local, remote, 7, 99) == 2  # no match: unchanged
        assert int(cell[0]) == 2
        assert await p.ep.compare_swap(local, remote, 2, 99) == 2
        assert int(cell[0]) == 99

    run(backend, scenario)


def test_scatter_gather_lists(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        src = pattern(3000, 11)
        region = p.client.register(src)
        parts = [region[0:1000], region[1500:2500], region[2900:3000]]
        inbox_a = np.zeros(1200, dtype=np.uint8)
        inbox_b = np.zeros(1200, dtype=np.uint8)
        got = p.peer.recv([p.server.register(inbox_a), p.server.register(inbox_b)])
        await p.ep.send(parts)
        c = await got
        want = np.concatenate([src[0:1000], src[1500:2500], src[2900:3000]])
        assert c.byte_len == 2100
        assert np.array_equal(np.concatenate([inbox_a, inbox_b])[:2100], want)

    run(backend, scenario)


def test_unsignaled_work_and_batches(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        target = np.zeros(64 * 100, dtype=np.uint8)
        remote = netio.RemoteRegion.from_descriptor(p.server.register(target).descriptor())
        src = pattern(64 * 100, 5)
        local = p.client.register(src)
        handles = [p.ep.write(local[i * 64:(i + 1) * 64], remote[i * 64:(i + 1) * 64],
                              signaled=i == 49) for i in range(50)]
        for h in handles:
            assert (await h).status == IBV_WC_SUCCESS
        requests = [netio.WorkRequest.write(local[i * 64:(i + 1) * 64],
                                            remote[i * 64:(i + 1) * 64], signaled=False,
                                            wr_id=1000 + i) for i in range(50, 100)]
        completions = await p.ep.post(requests)
        assert [c.wr_id for c in completions] == list(range(1050, 1100))
        assert all(c.status == IBV_WC_SUCCESS for c in completions)
        assert np.array_equal(target, src)

    run(backend, scenario)


def test_registration_cache_and_busy_region(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        buf = np.zeros(4096, dtype=np.uint8)
        a = p.client.register(buf)
        assert p.client.register(buf) is a  # same buffer, range and access
        assert p.client.register(buf[:2048]) is not a
        assert p.client.register(buf, netio.Access.LOCAL_WRITE) is not a
        inbox = p.server.register(bytearray(4096))
        pending = p.peer.recv(inbox)
        await asyncio.sleep(0)
        with pytest.raises(netio.RegionBusy):
            inbox.deregister()
        await p.ep.send(a[0:10])
        await pending
        inbox.deregister()
        assert not inbox.registered

    run(backend, scenario)


@pytest.mark.parametrize("case", ["wrong_rkey", "out_of_bounds", "missing_access"])
def test_remote_access_errors_leave_memory_untouched(backend: str, case: str) -> None:
    async def scenario(p: Pair) -> None:
        target = np.zeros(1024, dtype=np.uint8)
        access = netio.Access.LOCAL_WRITE | netio.Access.REMOTE_READ
        if case != "missing_access":
            access |= netio.Access.REMOTE_WRITE
        real = netio.RemoteRegion.from_descriptor(p.server.register(target, access).descriptor())
        if case == "wrong_rkey":
            remote = netio.RemoteRegion(real.addr, real.rkey ^ 0x5A00, 1024, real.transport)[0:64]
        elif case == "out_of_bounds":
            remote = netio.RemoteRegion(real.addr, real.rkey, 4096, real.transport)[1000:1100]
        else:
            remote = real[0:64]
        local = p.client.register(np.full(128, 7, dtype=np.uint8))
        with pytest.raises(netio.RemoteAccessError) as info:
            await p.ep.write(local[0:len(range(remote.offset, remote.offset + remote.length))],
                             remote)
        assert info.value.status == IBV_WC_REM_ACCESS_ERR
        assert info.value.hint
        assert target.sum() == 0
        # RC: the error moves the endpoint to the error state; later work is flushed
        with pytest.raises(netio.FlushedError) as flushed:
            await p.ep.write(local[0:8], real[0:8])
        assert flushed.value.status == IBV_WC_WR_FLUSH_ERR

    run(backend, scenario)


def test_send_larger_than_receive_is_an_invalid_request(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        got = p.peer.recv(p.server.register(bytearray(100)))
        with pytest.raises(netio.RemoteInvalidRequest) as info:
            await p.ep.send(p.client.register(bytearray(200)))
        assert info.value.status == IBV_WC_REM_INV_REQ_ERR
        with pytest.raises(netio.LocalError) as local:
            await got
        assert local.value.status == IBV_WC_LOC_LEN_ERR

    run(backend, scenario)


def test_receiver_not_ready_exhausts_rnr_retries(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        with pytest.raises(netio.RnrRetryExceeded) as info:
            await p.ep.send(p.client.register(bytearray(10)))
        assert info.value.status == IBV_WC_RNR_RETRY_EXC_ERR
        assert "rnr_retry=0" in info.value.hint

    run(backend, scenario, rnr_retry=0, min_rnr_timer=1)


def test_receiver_not_ready_then_posted_succeeds(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        sent = p.ep.send(p.client.register(bytearray(b"late receive")))
        await asyncio.sleep(0.05)
        inbox = bytearray(32)
        c = await p.peer.recv(p.server.register(inbox))
        assert (await sent).status == IBV_WC_SUCCESS
        assert c.byte_len == 12 and inbox[:12] == b"late receive"

    run(backend, scenario, min_rnr_timer=1)


def test_peer_gone_gives_retry_exceeded(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        remote = netio.RemoteRegion.from_descriptor(
            p.server.register(bytearray(1 << 20)).descriptor())
        await p.server.aclose()
        with pytest.raises(netio.RetryExceeded) as info:
            await p.ep.write(p.client.register(bytearray(1 << 20)), remote)
        assert info.value.status == IBV_WC_RETRY_EXC_ERR
        assert info.value.hint  # names the peer / both GIDs and the settings
        with pytest.raises(netio.FlushedError):
            await p.ep.write(p.client.register(bytearray(8)), remote[0:8])

    run(backend, scenario, ack_timeout=8, retry_count=2)


def test_close_with_operations_in_flight_flushes_them(backend: str) -> None:
    async def scenario(p: Pair) -> None:
        receives = [p.peer.recv(p.server.register(bytearray(64))) for _ in range(8)]
        await asyncio.sleep(0)
        await p.peer.aclose()
        await p.peer.aclose()  # idempotent
        for r in receives:
            with pytest.raises(netio.FlushedError):
                await r
        with pytest.raises(netio.ClosedError):
            await p.peer.recv(p.server.register(bytearray(64)))

    run(backend, scenario)


def test_many_endpoints_at_once(backend: str) -> None:
    async def main() -> None:
        async with connected(backend) as p:
            host, port = p.listener.address
            target = np.zeros(16 * 4096, dtype=np.uint8)
            remote = netio.RemoteRegion.from_descriptor(p.server.register(target).descriptor())
            eps = await asyncio.gather(*(p.client.connect(f"{host}:{port}") for _ in range(16)))
            for _ in eps:
                await p.listener.accept(timeout_s=10)
            src = pattern(16 * 4096, 9)
            local = p.client.register(src)
            await asyncio.gather(*(ep.write(local[i * 4096:(i + 1) * 4096],
                                            remote[i * 4096:(i + 1) * 4096])
                                   for i, ep in enumerate(eps)))
            assert np.array_equal(target, src)

    asyncio.run(asyncio.wait_for(main(), 60))
