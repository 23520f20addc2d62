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
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import netio
from netio.backends.soft.backend import SoftBackend
from netio.backends.soft.pingpong import PingPongRun, SoftPingPong
from netio.roce.link import LinkFaults
from tests.api.conftest import soft_addresses

REPO = Path(__file__).resolve().parents[2]
SIZE = 64
PING = bytes(range(SIZE))
PONG = bytes(255 - b for b in range(SIZE))
AFTER, AFTER_OK = b"after the call", b"after: ok"


class Peer:
    """The engine's end, through the IO API, driven by its own thread (polled), or by a
    loop thread (``progress="loop"``: it answers while its thread sleeps)."""

    def __init__(self, ip: str, progress: str = "poll", **options: Any) -> None:
        self.ctx = netio.open("soft", local_addr=ip, progress=progress, **options)
        self.listener = self.ctx.listen(f"{ip}:0").wait(10)
        self.address = f"{ip}:{self.listener.address[1]}"
        self.errors: list[str] = []
        self.inbox = bytearray(256)
        self.outbox = bytearray(PONG) + bytearray(PING)
        self.inbox_region = self.ctx.register(self.inbox)
        self.out_region = self.ctx.register(self.outbox)
        self.extra: list[netio.Endpoint] = []
        self.release = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, role: Callable[[netio.Endpoint], None], endpoints: int = 1) -> None:
        def run() -> None:
            try:
                ep = self.listener.accept(timeout_s=10).wait(10)
                self.extra = [self.listener.accept(timeout_s=10).wait(10)
                              for _ in range(endpoints - 1)]
                role(ep)
                # a polled context progresses only while its thread waits: go on until
                # the test is done (the other side waits for this side's last ACKs)
                idle = ep.recv(self.inbox_region[0:256])
                while not self.release.is_set():
                    try:
                        idle.wait(0.01)
                    except netio.Timeout:
                        continue
                    break
            except Exception as exc:  # reported by the test
                self.errors.append(f"{type(exc).__name__}: {exc}")

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def join(self) -> None:
        assert self._thread is not None
        self.release.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the peer did not finish"
        self.ctx.close()

    def sent(self, completion: netio.Completion, what: str) -> None:
        if completion.status != netio.WcStatus.SUCCESS:
            self.errors.append(f"{what}: {completion.status!r}")

    def check(self, completion: netio.Completion, what: str, expected: bytes) -> None:
        if completion.status != netio.WcStatus.SUCCESS:
            self.errors.append(f"{what}: {completion.status!r}")
        elif bytes(self.inbox[:completion.byte_len]) != expected:
            self.errors.append(f"{what}: got {bytes(self.inbox[:completion.byte_len])!r}")

    def answer(self, n: int, *, then: Callable[[], None] | None = None) -> Callable[
            [netio.Endpoint], None]:
        """Answer ``n`` pings (each receive posted before the answer that precedes it),
        then the message after the call."""
        def role(ep: netio.Endpoint) -> None:
            inbox = self.inbox_region[0:256]
            got = ep.recv(inbox)
            self.sent(ep.send(self.out_region[SIZE:SIZE + 5]).wait(10), "ready")
            for k in range(n):
                self.check(got.wait(20), f"ping {k}", PING)
                got = ep.recv(inbox)
                if then is not None and k == n // 2:
                    then()
                self.sent(ep.send(self.out_region[0:SIZE]).wait(20), f"pong {k}")
            self.check(got.wait(20), "after", AFTER)
            self.outbox[:len(AFTER_OK)] = AFTER_OK
            ep.send(self.out_region[0:len(AFTER_OK)]).wait(10)
        return role

    def ping(self, n: int) -> Callable[[netio.Endpoint], None]:
        """Send ``n`` pings (the first after the call's side said go), then the message
        after the call."""
        def role(ep: netio.Endpoint) -> None:
            inbox = self.inbox_region[0:256]
            go = ep.recv(inbox)
            self.check(go.wait(10), "go", b"go")
            for k in range(n):
                pong = ep.recv(inbox)
                self.sent(ep.send(self.out_region[SIZE:2 * SIZE]).wait(20), f"ping {k}")
                self.check(pong.wait(20), f"pong {k}", PONG)
            got = ep.recv(inbox)
            self.outbox[:len(AFTER)] = AFTER
            ep.send(self.out_region[0:len(AFTER)]).wait(10)
            self.check(got.wait(20), "after", AFTER_OK)
        return role


async def _connect(ctx: netio.Context, address: str) -> netio.Endpoint:
    return await ctx.connect(address, timeout_s=10)


def _call(ctx: netio.Context, ep: netio.Endpoint, buffer: bytearray, *,
          timeout_s: float = 10.0) -> SoftPingPong:
    region = ctx.register(buffer)
    backend = ctx.backend
    assert isinstance(backend, SoftBackend)
    call = backend.pingpong(ep.address.qpn, region[SIZE:2 * SIZE].segment(),
                            region[0:SIZE].segment(), timeout_s)
    assert call is not None
    return call


async def _initiator(peer_address: str, n: int, client_ip: str,
                     **options: Any) -> tuple[PingPongRun, bytes, bytes]:
    """This side pings ``n`` times in one call, then exchanges a message through the
    engine; (the run, the last answer, the message after)."""
    async with netio.open("soft", local_addr=client_ip, **options) as ctx:
        ep = await _connect(ctx, peer_address)
        buffer = bytearray(SIZE) + bytearray(PING) + bytearray(64)
        region = ctx.register(buffer)
        await ep.recv(region[2 * SIZE:3 * SIZE])  # the peer is ready
        run = _call(ctx, ep, buffer).run(n, initiator=True)
        answer = bytes(buffer[:SIZE])
        buffer[SIZE:SIZE + len(AFTER)] = AFTER
        reply = ep.recv(region[2 * SIZE:3 * SIZE])
        await ep.send(region[SIZE:SIZE + len(AFTER)])
        c = await reply
        return run, answer, bytes(buffer[2 * SIZE:2 * SIZE + c.byte_len])


def test_initiator_against_the_engine() -> None:
    server_ip, client_ip = soft_addresses()
    peer = Peer(server_ip)
    peer.start(peer.answer(300))
    run, answer, after = asyncio.run(_initiator(peer.address, 300, client_ip))
    peer.join()
    assert peer.errors == []
    assert answer == PONG and after == AFTER_OK
    assert len(run.rtt_ns) == 300 and all(t > 0 for t in run.rtt_ns)
    assert run.retransmits == 0
    # one request per round trip, and the ACKs of all but the first answer with them
    assert run.packets_sent == 300 + 300


def test_initiator_against_the_pure_engine_in_another_process() -> None:
    """The pure-Python engine checks what the C loop sends (ICRC, opcodes, PSNs)."""
    server_ip, client_ip = soft_addresses()
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from tests.backends.test_soft_pingpong import Peer;"
        "p = Peer(sys.argv[2]); print(p.address, flush=True);"
        "p.start(p.answer(100)); p.join();"
        "print('errors', p.errors, flush=True); sys.exit(1 if p.errors else 0)")
    proc = subprocess.Popen([sys.executable, "-c", script, str(REPO), server_ip],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NETIO_PURE": "1"})
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        run, answer, after = asyncio.run(_initiator(address, 100, client_ip))
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out + err
    assert answer == PONG and after == AFTER_OK and len(run.rtt_ns) == 100


async def _answerer(peer_address: str, n: int, client_ip: str, **options: Any) -> bytes:
    """This side answers ``n`` pings, the first taken through the engine as the bench
    server does; then the message after the call. Returns what the last ping held."""
    async with netio.open("soft", local_addr=client_ip, **options) as ctx:
        ep = await _connect(ctx, peer_address)
        buffer = bytearray(SIZE) + bytearray(PONG) + bytearray(b"go")
        region = ctx.register(buffer)
        first = ep.recv(region[0:SIZE])
        await ep.send(region[2 * SIZE:2 * SIZE + 2])
        await first
        _call(ctx, ep, buffer).run(n, initiator=False, answer_first=True)
        last = bytes(buffer[:SIZE])
        got = ep.recv(region[0:SIZE])
        c = await got
        assert bytes(buffer[:c.byte_len]) == AFTER
        buffer[SIZE:SIZE + len(AFTER_OK)] = AFTER_OK
        await ep.send(region[SIZE:SIZE + len(AFTER_OK)])
        return last


def test_answerer_against_the_engine() -> None:
    server_ip, client_ip = soft_addresses()
    peer = Peer(server_ip)
    peer.start(peer.ping(200))
    last = asyncio.run(_answerer(peer.address, 200, client_ip))
    peer.join()
    assert peer.errors == []
    assert last == PING


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_loss_duplication_and_reordering_from_the_peer(seed: int) -> None:
    """The peer's egress drops, duplicates and reorders (seeded): the call resends on
    its timer, ACKs duplicates again, drops what comes past a gap; both ends agree
    on every message and go on through the engine after."""
    server_ip, client_ip = soft_addresses()
    faults = LinkFaults(drop=0.05, duplicate=0.05, reorder=0.05, latency_ns=0,
                        reorder_ns=200_000)
    peer = Peer(server_ip, faults=faults, fault_seed=seed, ack_timeout=8)
    peer.start(peer.answer(200))
    run, answer, after = asyncio.run(_initiator(peer.address, 200, client_ip, ack_timeout=8))
    peer.join()
    assert peer.errors == []
    assert answer == PONG and after == AFTER_OK and len(run.rtt_ns) == 200
    # the faults happened and the call saw them
    assert run.retransmits + run.duplicates > 0

    peer = Peer(server_ip, faults=faults, fault_seed=seed, ack_timeout=8)
    peer.start(peer.ping(200))
    assert asyncio.run(_answerer(peer.address, 200, client_ip, ack_timeout=8)) == PING
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
            ep = await _connect(ctx, peer.address)
            other = await _connect(ctx, peer.address)
            side = bytearray(64)
            side_got = other.recv(ctx.register(side))
            buffer = bytearray(SIZE) + bytearray(PING) + bytearray(64)
            region = ctx.register(buffer)
            await ep.recv(region[2 * SIZE:3 * SIZE])
            run = _call(ctx, ep, buffer).run(100, initiator=True)
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
        ep = await _connect(ctx, address)
        buffer = bytearray(SIZE) + bytearray(PING) + bytearray(SIZE)
        region = ctx.register(buffer)
        await ep.recv(region[2 * SIZE:3 * SIZE])
        return _call(ctx, ep, buffer).run(1, initiator=True)


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
            ep = await _connect(ctx, peer.address)
            buffer = bytearray(3 * SIZE)
            region = ctx.register(buffer)
            await ep.recv(region[2 * SIZE:3 * SIZE])
            with pytest.raises(netio.IoError, match=r"RNR retry count exceeded \(an RNR NAK "
                                                    r".*\) after 0 of 10 round trips"):
                _call(ctx, ep, buffer).run(10, initiator=True)
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
            ep = await _connect(ctx, peer.address)
            buffer = bytearray(3 * SIZE)
            region = ctx.register(buffer)
            await ep.recv(region[2 * SIZE:3 * SIZE])
            peer.ctx.close()  # gone: nothing answers any more
            with pytest.raises(netio.IoError, match=r"retry count exceeded .* after 0 of 5"):
                _call(ctx, ep, buffer).run(5, initiator=True)

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
            ep = await _connect(ctx, peer.address)
            buffer = bytearray(3 * SIZE)
            region = ctx.register(buffer)
            await ep.recv(region[2 * SIZE:3 * SIZE])
            with pytest.raises(netio.IoError, match=r"a message of 128 bytes is longer"):
                _call(ctx, ep, buffer).run(1, initiator=True)

    asyncio.run(main())
    peer.join()


def test_only_on_the_thread_of_the_contexts_loop() -> None:
    server_ip, client_ip = soft_addresses()
    peer = Peer(server_ip)
    peer.start(lambda ep: ep.send(peer.out_region[SIZE:SIZE + 5]).wait(10))

    async def main() -> None:
        async with netio.open("soft", local_addr=client_ip) as ctx:
            ep = await _connect(ctx, peer.address)
            buffer = bytearray(3 * SIZE)
            region = ctx.register(buffer)
            await ep.recv(region[2 * SIZE:3 * SIZE])
            call = _call(ctx, ep, buffer)
            failed: list[BaseException] = []

            def elsewhere() -> None:
                try:
                    call.run(1, initiator=True)
                except netio.IoError as exc:
                    failed.append(exc)

            await asyncio.to_thread(elsewhere)
            assert len(failed) == 1 and "thread of the context's event loop" in str(failed[0])
            # work in flight: the engine has it, the call must not take the QP over
            ep.recv(region[0:SIZE])
            assert not SoftPingPong.usable(call.driver, call.qp, SIZE)
            backend = ctx.backend
            assert isinstance(backend, SoftBackend)
            assert backend.pingpong(ep.address.qpn, region[SIZE:2 * SIZE].segment(),
                                    region[0:SIZE].segment(), 1.0) is None

    asyncio.run(main())
    peer.join()
