"""``progress="poll"``: the thread that waits drives the soft engine itself.

The conformance suite runs every case over it already (``soft-poll`` in conftest); these
cases are the ones only polled progress has: no loop thread, synchronous waits that must
fire the engine's retransmission timers themselves (a lossy link, a dead peer), the
timeout of a wait, close with work in flight, and two contexts driven by one thread.
Expected bytes are the seeded messages the test sends; expected statuses the
libibverbs numbers (``enum ibv_wc_status`` in ``infiniband/verbs.h``).
"""

from __future__ import annotations

import random
import threading

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import netio
from netio.roce.link import LinkFaults
from tests.api.conftest import soft_addresses

IBV_WC_SUCCESS = 0
IBV_WC_RETRY_EXC_ERR = 12


def _pair(**options: object) -> tuple[netio.Context, netio.Context, netio.Endpoint,
                                      netio.Endpoint]:
    server_ip, client_ip = soft_addresses()
    server = netio.open("soft", local_addr=server_ip, progress="poll", **options)
    client = netio.open("soft", local_addr=client_ip, progress="poll", **options)
    listener = server.listen(f"{server_ip}:0").wait(10)
    accepted = listener.accept(timeout_s=10)
    ep = client.connect(f"{server_ip}:{listener.address[1]}").wait(10)
    return server, client, ep, accepted.wait(10)


def test_no_loop_thread_and_one_thread_drives_both_ends() -> None:
    before = {t.name for t in threading.enumerate()}
    server, client, ep, peer = _pair()
    with server, client:
        assert not any(t.name == "netio-loop" for t in threading.enumerate())
        inbox = bytearray(64)
        for k in range(50):  # a ping-pong: each wait drives both contexts
            got = peer.recv(server.register(inbox))
            sent = ep.send(client.register(bytearray(k.to_bytes(8, "little"))))
            assert sent.wait(10).status == IBV_WC_SUCCESS
            c = got.wait(10)
            assert (c.status, c.byte_len) == (IBV_WC_SUCCESS, 8)
            assert int.from_bytes(inbox[:8], "little") == k
        assert {t.name for t in threading.enumerate()} - before <= {"netio-poll"}


def test_wait_times_out_and_the_handle_stays_usable() -> None:
    server, client, ep, peer = _pair()
    with server, client:
        inbox = bytearray(16)
        got = peer.recv(server.register(inbox))
        with pytest.raises(netio.Timeout):
            got.wait(0.05)  # nothing was sent
        assert not got.done()
        ep.send(client.register(bytearray(b"late"))).wait(10)
        assert got.wait(10).byte_len == 4 and inbox[:4] == b"late"


def test_close_with_work_in_flight_flushes_it() -> None:
    server, client, _, peer = _pair()
    with server:
        got = peer.recv(server.register(bytearray(16)))
        client.close()
        server.close()
        with pytest.raises(netio.FlushedError):
            got.wait(5)
    assert client.closed and server.closed


def test_dead_link_ends_in_retry_exceeded_without_a_loop() -> None:
    """Every datagram dropped: only the engine's timers, fired by the waiting thread,
    can end the SEND (retry_count 2 at ACK timeout 2**8 x 4.096 us)."""
    server, client, ep, _ = _pair(ack_timeout=8, retry_count=2, faults=LinkFaults(drop=1.0))
    with server, client:
        with pytest.raises(netio.RetryExceeded) as info:
            ep.send(client.register(bytearray(64))).wait(10)
        assert info.value.status == IBV_WC_RETRY_EXC_ERR
        counters = ep.counters()
        assert counters["driver_timer_fires"] >= 3  # the first try and two retries


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), drop=st.floats(0.0, 0.1), duplicate=st.floats(0.0, 0.1),
       reorder=st.floats(0.0, 0.1), delay=st.floats(0.0, 0.1))
@example(seed=1, drop=0.1, duplicate=0.1, reorder=0.1, delay=0.1)
def test_exactly_once_through_the_lossy_link(seed: int, drop: float, duplicate: float,
                                             reorder: float, delay: float) -> None:
    """Both egresses lossy, synchronous waits only: every SEND arrives once, in order,
    intact, and every WRITE lands (retransmissions driven by the waiting thread)."""
    faults = LinkFaults(drop=drop, duplicate=duplicate, reorder=reorder, delay=delay,
                        delay_ns=300_000, reorder_ns=200_000)
    rng = random.Random(seed)
    messages = [rng.randbytes(rng.choice((1, 300, 1024, 2500, 4000))) for _ in range(16)]
    # ACK timeout 2**11 x 4.096 us = 8 ms: a loaded 2-core machine may deschedule the
    # thread that drives both ends for longer than 1 ms, more than 7 times in a row
    server, client, ep, peer = _pair(faults=faults, fault_seed=seed, mtu=1024,
                                     ack_timeout=11, retry_count=7)
    with server, client:
        inboxes = [bytearray(4096) for _ in messages]
        recvs = [peer.recv(server.register(box)) for box in inboxes]
        target = bytearray(sum(len(m) for m in messages))
        remote = netio.RemoteRegion.from_descriptor(server.register(target).descriptor())
        sends, writes, at = [], [], 0
        for m in messages:
            local = client.register(bytearray(m))
            sends.append(ep.send(local))
            writes.append(ep.write(local, remote[at:at + len(m)]))
            at += len(m)
        for op in sends + writes:
            assert op.wait(30).status == IBV_WC_SUCCESS
        for m, box, r in zip(messages, inboxes, recvs, strict=True):
            c = r.wait(30)
            assert (c.status, c.byte_len) == (IBV_WC_SUCCESS, len(m))
            assert bytes(box[:len(m)]) == m
        assert bytes(target) == b"".join(messages)
        if drop >= 0.1:  # ~100 datagrams each way: this seed's links did drop some
            links = [ctx.backend.driver_for(ctx.describe().local_ip).link  # type: ignore[attr-defined]
                     for ctx in (server, client)]
            assert sum(link.counters.dropped for link in links if link is not None) > 0


def test_progress_takes_its_names_only() -> None:
    with pytest.raises(netio.IoError, match="progress 'spin' is not one of loop, poll"):
        netio.open("soft", progress="spin")
