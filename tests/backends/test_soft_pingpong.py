"""The soft backend's ping-pong in one call into C (``netio/backends/soft/pingpong.py``).

The peer is always the engine through the public IO API (its own thread, polled
progress; in one case another process with ``NETIO_PURE=1``: the pure-Python engine,
the reference, checks every header and ICRC of what the C loop sends). Each case checks
the bytes that arrived, then that the endpoint goes on through the engine after the call
(so the PSNs and MSN went back right), under loss, duplication and reordering too.
Expected error texts are the IBTA's names (vol 1 §9.7.5.2: RNR NAK; retry count).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import netio
from netio.backends.soft.backend import SoftBackend
from netio.backends.soft.pingpong import PingPongRun, SoftPingPong
from netio.roce.link import LinkFaults
from netio.wire.cnp import Cnp, cnp_bth
from netio.wire.packet import build_roce_udp_payload
from tests.api.conftest import soft_addresses
from tests.pingpong_peer import (
    AFTER,
    AFTER_OK,
    MTU,
    PING,
    PONG,
    SIZE,
    Peer,
    answerer,
    call,
    connect,
    initiator,
    ping_bytes,
    pong_bytes,
    ready,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("size", [64, MTU, MTU + 1, 64 << 10, 1 << 20])
def test_initiator_against_the_engine(size: int) -> None:
    """One packet; exactly one MTU; two packets (a 1-byte LAST); 16 packets; 256
    packets: more than the window of 128 unacknowledged PSNs and than the 64 packets
    after which a sender asks for an ACK."""
    server_ip, client_ip = soft_addresses()
    n = 300 if size <= MTU else 30
    # ACK timeouts of 4.3 s: only a lost packet (none on loopback) resends, not a stall
    peer = Peer(server_ip, size=size, ack_timeout=20)
    peer.start(peer.answer(n))
    run, answer, after = asyncio.run(initiator(peer.address, n, client_ip, size,
                                                ack_timeout=20))
    peer.join()
    assert peer.errors == []
    assert answer == pong_bytes(size) and after == AFTER_OK
    assert len(run.rtt_ns) == n and all(t > 0 for t in run.rtt_ns)
    assert run.retransmits == 0
    packets = -(-size // MTU)
    # each round trip: the request's packets, the ACK of the last answer (its AckReq)
    # and at most one ACK for every 64 packets of an answer before its last (rxe's
    # AckReq rule; those that arrive in one receive batch share an ACK)
    assert n * (packets + 1) <= run.packets_sent <= n * (packets + 1 + (packets - 1) // 64)


def test_initiator_against_the_pure_engine_in_another_process() -> None:
    """The pure-Python engine checks what the C loop sends (ICRC, opcodes, PSNs)."""
    server_ip, client_ip = soft_addresses()
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from tests.pingpong_peer import Peer;"
        "p = Peer(sys.argv[2]); print(p.address, flush=True);"
        "p.start(p.answer(100)); p.join();"
        "print('errors', p.errors, flush=True); sys.exit(1 if p.errors else 0)")
    proc = subprocess.Popen([sys.executable, "-c", script, str(REPO), server_ip],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NETIO_PURE": "1"})
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        run, answer, after = asyncio.run(initiator(address, 100, client_ip))
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out + err
    assert answer == PONG and after == AFTER_OK and len(run.rtt_ns) == 100


@pytest.mark.parametrize("size", [64, MTU + 1, 1 << 20])
def test_answerer_against_the_engine(size: int) -> None:
    server_ip, client_ip = soft_addresses()
    n = 200 if size <= MTU else 30
    peer = Peer(server_ip, size=size)
    peer.start(peer.ping(n))
    last = asyncio.run(answerer(peer.address, n, client_ip, size))
    peer.join()
    assert peer.errors == []
    assert last == ping_bytes(size)


@pytest.mark.parametrize(("seed", "size"), [(1, 64), (2, 64), (3, 3 * MTU + 100),
                                            (4, 300 * MTU)])
def test_loss_duplication_and_reordering_from_the_peer(seed: int, size: int) -> None:
    """The peer's egress drops, duplicates and reorders (seeded): the call resends on
    its timer or a PSN sequence NAK, ACKs duplicates again, NAKs and drops what comes
    past a gap; both ends agree on every message and go on through the engine after.
    ACK timeouts of 16.8 ms: seven in a row must mean a dead peer, not a busy host."""
    server_ip, client_ip = soft_addresses()
    faults = LinkFaults(drop=0.05, duplicate=0.05, reorder=0.05, latency_ns=0,
                        reorder_ns=200_000)
    n = 200 if size <= MTU else 20 if size < 64 * MTU else 4
    peer = Peer(server_ip, size=size, faults=faults, fault_seed=seed, ack_timeout=12)
    peer.start(peer.answer(n))
    run, answer, after = asyncio.run(initiator(peer.address, n, client_ip, size,
                                                ack_timeout=12))
    peer.join()
    assert peer.errors == []
    assert answer == pong_bytes(size) and after == AFTER_OK and len(run.rtt_ns) == n
    # the faults happened and the call saw them
    assert run.retransmits + run.duplicates + run.dropped > 0

    peer = Peer(server_ip, size=size, faults=faults, fault_seed=seed, ack_timeout=12)
    peer.start(peer.ping(n))
    assert asyncio.run(answerer(peer.address, n, client_ip, size,
                                 ack_timeout=12)) == ping_bytes(size)
    peer.join()
    assert peer.errors == []


def test_another_endpoints_message_during_the_call_reaches_the_engine() -> None:
    server_ip, client_ip = soft_addresses()
    peer = Peer(server_ip)
    note = b"for the other endpoint"

    note_region = peer.ctx.register(bytearray(note))
    sends: list[netio.Pending[netio.Completion]] = []

    def send_on_the_other() -> None:  # not waited for: this side ACKs it after the call
        sends.append(peer.extra[0].send(note_region[0:len(note)]))

    peer.start(peer.answer(100, then=send_on_the_other), endpoints=2)

    async def main() -> tuple[PingPongRun, bytes]:
        async with netio.open("soft", local_addr=client_ip) as ctx:
            ep = await connect(ctx, peer.address)
            other = await connect(ctx, peer.address)
            side = bytearray(64)
            side_got = other.recv(ctx.register(side))
            buffer = bytearray(SIZE) + bytearray(PING) + bytearray(64)
            region = ctx.register(buffer)
            await ep.recv(region[2 * SIZE:3 * SIZE])
            run = call(ctx, ep, buffer).run(100, initiator=True)
            c = await side_got
            buffer[SIZE:SIZE + len(AFTER)] = AFTER
            reply = ep.recv(region[2 * SIZE:3 * SIZE])
            await ep.send(region[SIZE:SIZE + len(AFTER)])
            await reply
            return run, bytes(side[:c.byte_len])

    run, side = asyncio.run(main())
    peer.join()
    assert peer.errors == []
    assert side == note
    assert sends[0].done() and sends[0].result().status == netio.WcStatus.SUCCESS
    assert run.set_aside >= 1


def _late_receiver(peer: Peer, delay_s: float, done: threading.Event) -> Callable[
        [netio.Endpoint], None]:
    """Say ready with no receive posted; post it ``delay_s`` later and answer once."""
    def role(ep: netio.Endpoint) -> None:
        peer.sent(ep.send(peer.out_region[SIZE:SIZE + 5]).wait(10), "ready")
        if not done.wait(delay_s):
            got = ep.recv(peer.inbox_region[0:256])
            peer.check(got.wait(20), "ping", PING)
            peer.sent(ep.send(peer.out_region[0:SIZE]).wait(20), "pong")
        done.wait(30)
    return role


async def _one_ping(address: str, client_ip: str, **options: Any) -> PingPongRun:
    async with netio.open("soft", local_addr=client_ip, **options) as ctx:
        ep, buffer, _region = await ready(ctx, address)
        return call(ctx, ep, buffer).run(1, initiator=True)


def test_rnr_naks_are_retried_after_the_peers_rnr_timer() -> None:
    """The peer posts its receive 50 ms late; its RNR NAKs (timer code 1: 10 us, IBTA
    table 45) make the call resend until the ping lands."""
    server_ip, client_ip = soft_addresses()
    peer = Peer(server_ip, progress="loop", min_rnr_timer=1)
    done = threading.Event()
    peer.start(_late_receiver(peer, 0.05, done))
    try:
        run = asyncio.run(_one_ping(peer.address, client_ip))
    finally:
        done.set()
        peer.join()
    assert peer.errors == []
    assert run.rnr_naks > 0 and len(run.rtt_ns) == 1


def test_rnr_retry_exceeded_ends_the_call_with_a_clear_error() -> None:
    server_ip, client_ip = soft_addresses()
    peer = Peer(server_ip, progress="loop")
    done = threading.Event()
    peer.start(_late_receiver(peer, 60, done))

    async def main() -> None:
        async with netio.open("soft", local_addr=client_ip, rnr_retry=0) as ctx:
            ep, buffer, region = await ready(ctx, peer.address)
            with pytest.raises(netio.IoError, match=r"RNR retry count exceeded \(an RNR NAK "
                                                    r".*\) after 0 of 10 round trips"):
                call(ctx, ep, buffer).run(10, initiator=True)
            # the QP is in the error state, as the engine leaves it
            with pytest.raises(netio.NetioError):
                await ep.send(region[0:8])

    try:
        asyncio.run(main())
    finally:
        done.set()
        peer.join()


def test_a_silent_peer_exceeds_the_retry_count() -> None:
    server_ip, client_ip = soft_addresses()
    peer = Peer(server_ip)
    gone = threading.Event()

    def vanish(ep: netio.Endpoint) -> None:
        ep.send(peer.out_region[SIZE:SIZE + 5]).wait(10)
        gone.wait(30)

    peer.start(vanish)

    async def main() -> None:
        async with netio.open("soft", local_addr=client_ip, ack_timeout=6,
                              retry_count=2) as ctx:
            ep, buffer, _region = await ready(ctx, peer.address)
            peer.ctx.close()  # gone: nothing answers any more
            with pytest.raises(netio.IoError, match=r"retry count exceeded .* after 0 of 5"):
                call(ctx, ep, buffer).run(5, initiator=True)

    try:
        asyncio.run(main())
    finally:
        gone.set()
        peer.join()


def test_an_answer_longer_than_the_buffer_is_refused() -> None:
    server_ip, client_ip = soft_addresses()
    peer = Peer(server_ip)

    def long_answer(ep: netio.Endpoint) -> None:
        got = ep.recv(peer.inbox_region[0:256])
        ep.send(peer.out_region[SIZE:SIZE + 5]).wait(10)
        got.wait(10)
        ep.send(peer.out_region[0:2 * SIZE]).wait(10)

    peer.start(long_answer)

    async def main() -> None:
        async with netio.open("soft", local_addr=client_ip) as ctx:
            ep, buffer, _region = await ready(ctx, peer.address)
            with pytest.raises(netio.IoError, match=r"a message of 128 bytes or more is longer"):
                call(ctx, ep, buffer).run(1, initiator=True)

    asyncio.run(main())
    peer.join()


def test_only_on_the_thread_of_the_contexts_loop() -> None:
    server_ip, client_ip = soft_addresses()
    peer = Peer(server_ip)
    peer.start(lambda ep: ep.send(peer.out_region[SIZE:SIZE + 5]).wait(10))

    async def main() -> None:
        async with netio.open("soft", local_addr=client_ip) as ctx:
            ep, buffer, region = await ready(ctx, peer.address)
            the_call = call(ctx, ep, buffer)
            failed: list[BaseException] = []

            def elsewhere() -> None:
                try:
                    the_call.run(1, initiator=True)
                except netio.IoError as exc:
                    failed.append(exc)

            await asyncio.to_thread(elsewhere)
            assert len(failed) == 1 and "thread of the context's event loop" in str(failed[0])
            # work in flight: the engine has it, the call must not take the QP over
            ep.recv(region[0:SIZE])
            assert not SoftPingPong.usable(the_call.driver, the_call.qp)
            backend = ctx.backend
            assert isinstance(backend, SoftBackend)
            assert backend.pingpong(ep.address.qpn, region[SIZE:2 * SIZE].segment(),
                                    region[0:SIZE].segment(), 1.0) is None

    asyncio.run(main())
    peer.join()


def _swallower(peer: Peer, done: threading.Event) -> Callable[[netio.Endpoint], None]:
    """Say ready, take one ping (the engine ACKs it), never answer."""
    def role(ep: netio.Endpoint) -> None:
        got = ep.recv(peer.inbox_region[0:256])
        peer.sent(ep.send(peer.out_region[SIZE:SIZE + 5]).wait(10), "ready")
        peer.check(got.wait(20), "ping", PING)
        done.wait(30)
    return role


def _blast(target: tuple[str, int], datagrams: list[bytes | Callable[[int], bytes]],
           source: str, seconds: float, stop: threading.Event) -> threading.Thread:
    """Send ``datagrams`` to ``target`` in turn, one a millisecond, from ``source`` (a
    callable makes its datagram from the source port)."""
    def run() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((source, 0))
            # DF, IPv4 ID 0: the header a RoCE packet's ICRC assumes (a raw receiver checks)
            s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER = IP_PMTUDISC_DO
            end = time.monotonic() + seconds
            k = 0
            while time.monotonic() < end and not stop.is_set():
                data = datagrams[k % len(datagrams)]
                s.sendto(data(s.getsockname()[1]) if callable(data) else data, target)
                k += 1
                time.sleep(0.001)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_traffic_for_others_does_not_keep_a_call_with_a_silent_peer_alive() -> None:
    """The peer takes the ping and never answers while datagrams for no QP of ours keep
    arriving on port 4791: the call still ends at its idle timeout."""
    server_ip, client_ip = soft_addresses()
    peer = Peer(server_ip, progress="loop")
    done, stop = threading.Event(), threading.Event()
    peer.start(_swallower(peer, done))

    async def main() -> float:
        async with netio.open("soft", local_addr=client_ip) as ctx:
            ep, buffer, _region = await ready(ctx, peer.address)
            junk = _blast((client_ip, 4791), [b"\x00" * 64], server_ip, 10.0, stop)
            t0 = time.monotonic()
            try:
                with pytest.raises(netio.IoError, match=r"nothing from the peer for 1 s "
                                                        r"after 0 of 1 round trips"):
                    call(ctx, ep, buffer, timeout_s=1.0).run(1, initiator=True)
                return time.monotonic() - t0
            finally:
                stop.set()
                junk.join(5)

    try:
        took_s = asyncio.run(main())
    finally:
        done.set()
        peer.join()
    assert 1.0 <= took_s < 5.0


def test_cnps_during_the_call_are_dropped() -> None:
    """CNPs (RoCEv2 congestion notifications, PSN 0, for our QP, from the peer's address)
    arriving throughout a call change nothing: the engine drops them too."""
    server_ip, client_ip = soft_addresses()
    peer = Peer(server_ip, size=SIZE, ack_timeout=20)
    peer.start(peer.answer(300))
    stop = threading.Event()

    async def main() -> tuple[PingPongRun, bytes]:
        async with netio.open("soft", local_addr=client_ip, ack_timeout=20) as ctx:
            ep, buffer, region = await ready(ctx, peer.address)

            def cnp(src_port: int) -> bytes:
                return build_roce_udp_payload(
                    src_ip=server_ip, dst_ip=client_ip, src_port=src_port,
                    bth=cnp_bth(ep.address.qpn),
                    cnp=Cnp())

            blaster = _blast((client_ip, 4791), [cnp], server_ip, 30.0, stop)
            try:
                time.sleep(0.01)  # some arrive before the call starts, most during it
                run = call(ctx, ep, buffer).run(300, initiator=True)
            finally:
                stop.set()
                blaster.join(5)
            answer = bytes(buffer[:SIZE])
            buffer[SIZE:SIZE + len(AFTER)] = AFTER
            reply = ep.recv(region[2 * SIZE:3 * SIZE])
            await ep.send(region[SIZE:SIZE + len(AFTER)])
            await reply
            return run, answer

    run, answer = asyncio.run(main())
    peer.join()
    assert peer.errors == []
    assert answer == PONG and len(run.rtt_ns) == 300 and run.retransmits == 0
    assert run.dropped > 0  # the CNPs, counted and dropped


def test_another_message_in_place_of_the_answer_ends_the_call_at_once() -> None:
    """The peer answers with a SEND with immediate data, which this loop does not take:
    the engine gets it, and the call says so at once instead of waiting for an answer
    that can no longer come in order."""
    server_ip, client_ip = soft_addresses()
    peer = Peer(server_ip)

    def imm_answer(ep: netio.Endpoint) -> None:
        got = ep.recv(peer.inbox_region[0:256])
        peer.sent(ep.send(peer.out_region[SIZE:SIZE + 5]).wait(10), "ready")
        peer.check(got.wait(20), "ping", PING)
        ep.send(peer.out_region[0:SIZE], imm=7)

    peer.start(imm_answer)

    async def main() -> None:
        async with netio.open("soft", local_addr=client_ip) as ctx:
            ep, buffer, _region = await ready(ctx, peer.address)
            t0 = time.monotonic()
            with pytest.raises(netio.IoError, match=r"another message \(opcode 0x05\) in "
                                                    r"place of the answer after 0 of 3"):
                call(ctx, ep, buffer, timeout_s=30.0).run(3, initiator=True)
            assert time.monotonic() - t0 < 10

    asyncio.run(main())
    peer.join()
