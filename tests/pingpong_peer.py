"""Both ends of the soft one-call ping-pong's tests (tests/backends/test_soft_pingpong.py,
tests/lab/test_lab_soft_pingpong.py).

``Peer`` is the other end through the public IO API (the soft engine, or verbs on the
kernel's rxe in a lab guest); ``initiator``/``answerer`` run the call
(:mod:`netio.backends.soft.pingpong`) on a soft endpoint and then one more exchange
through the engine. As a script, for the lab:

    python -m tests.pingpong_peer peer answer|ping BACKEND LISTEN_IP PORT SIZE N
    python -m tests.pingpong_peer call initiator|answerer PEER_IP:PORT SIZE N LOCAL_IP

The peer prints ``LISTENING`` once it listens, then ``PEER ok`` or ``PEER FAIL errors``;
the call prints ``CALL ok`` with its figures, or raises. Exit status 0 when all went well.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
from collections.abc import Callable
from typing import Any

import netio
from netio.backends.soft.backend import SoftBackend
from netio.backends.soft.pingpong import PingPongRun, SoftPingPong

SIZE = 64
MTU = 4096  # the path MTU two soft contexts agree on


def ping_bytes(size: int) -> bytes:
    return bytes((7 * i + 1) & 0xFF for i in range(size))


def pong_bytes(size: int) -> bytes:
    return bytes((255 - 3 * i) & 0xFF for i in range(size))


PING, PONG = ping_bytes(SIZE), pong_bytes(SIZE)
AFTER, AFTER_OK = b"after the call", b"after: ok"


class Peer:
    """The other end, through the IO API (the soft engine, or verbs over the kernel's rxe
    in a lab guest), driven by its own thread (polled), or by a loop thread
    (``progress="loop"``: it answers while its thread sleeps)."""

    def __init__(self, ip: str, progress: str = "poll", size: int = SIZE,
                 backend: str = "soft", port: int = 0, **options: Any) -> None:
        if backend == "soft":
            options["local_addr"] = ip
        self.ctx = netio.open(backend, progress=progress, **options)
        self.size = size
        self.listener = self.ctx.listen(f"{ip}:{port}").wait(10)
        self.address = f"{ip}:{self.listener.address[1]}"
        self.errors: list[str] = []
        self.inbox = bytearray(max(256, size))
        self.outbox = bytearray(pong_bytes(size)) + bytearray(ping_bytes(size))
        self.inbox_region = self.ctx.register(self.inbox)
        self.out_region = self.ctx.register(self.outbox)
        self.extra: list[netio.Endpoint] = []
        self.release = threading.Event()
        self.lingering = False
        self._thread: threading.Thread | None = None

    def start(self, role: Callable[[netio.Endpoint], None], endpoints: int = 1,
              linger_s: float | None = None) -> None:
        """Accept ``endpoints`` connections and play ``role`` on the first in a thread;
        then go on serving the context until :meth:`join` (or for ``linger_s``)."""
        self.lingering = linger_s is not None

        def run() -> None:
            try:
                ep = self.listener.accept(timeout_s=60).wait(60)
                self.extra = [self.listener.accept(timeout_s=60).wait(60)
                              for _ in range(endpoints - 1)]
                role(ep)
                # a polled context progresses only while its thread waits: go on until
                # the test is done (the other side waits for this side's last ACKs)
                idle = ep.recv(self.inbox_region[0:len(self.inbox)])
                if linger_s is not None:
                    threading.Timer(linger_s, self.release.set).start()
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
        if not self.lingering:
            self.release.set()
        self._thread.join(300)
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
        size = self.size

        def role(ep: netio.Endpoint) -> None:
            inbox = self.inbox_region[0:len(self.inbox)]
            got = ep.recv(inbox)
            self.sent(ep.send(self.out_region[size:size + 5]).wait(10), "ready")
            for k in range(n):
                self.check(got.wait(20), f"ping {k}", ping_bytes(size))
                got = ep.recv(inbox)
                if then is not None and k == n // 2:
                    then()
                self.sent(ep.send(self.out_region[0:size]).wait(20), f"pong {k}")
            self.check(got.wait(20), "after", AFTER)
            self.outbox[:len(AFTER_OK)] = AFTER_OK
            ep.send(self.out_region[0:len(AFTER_OK)]).wait(10)
        return role

    def ping(self, n: int) -> Callable[[netio.Endpoint], None]:
        """Send ``n`` pings (the first after the call's side said go), then the message
        after the call."""
        size = self.size

        def role(ep: netio.Endpoint) -> None:
            inbox = self.inbox_region[0:len(self.inbox)]
            go = ep.recv(inbox)
            self.check(go.wait(10), "go", b"go")
            for k in range(n):
                pong = ep.recv(inbox)
                self.sent(ep.send(self.out_region[size:2 * size]).wait(20), f"ping {k}")
                self.check(pong.wait(20), f"pong {k}", pong_bytes(size))
            got = ep.recv(inbox)
            self.outbox[:len(AFTER)] = AFTER
            ep.send(self.out_region[0:len(AFTER)]).wait(10)
            self.check(got.wait(20), "after", AFTER_OK)
        return role


async def connect(ctx: netio.Context, address: str) -> netio.Endpoint:
    return await ctx.connect(address, timeout_s=10)


def call(ctx: netio.Context, ep: netio.Endpoint, buffer: bytearray, *,
          timeout_s: float = 10.0, size: int = SIZE) -> SoftPingPong:
    """The call on ``ep``: answers into ``buffer[0:size]``, requests from
    ``buffer[size:2 * size]``."""
    region = ctx.register(buffer)
    backend = ctx.backend
    assert isinstance(backend, SoftBackend)
    call = backend.pingpong(ep.address.qpn, region[size:2 * size].segment(),
                            region[0:size].segment(), timeout_s)
    assert call is not None
    return call


async def ready(ctx: netio.Context, address: str, size: int = SIZE
                ) -> tuple[netio.Endpoint, bytearray, netio.Region]:
    """Connect to the peer and take its "ready": the endpoint, and a buffer laid out as
    :func:`call` wants it (answers, then the request: the ping pattern, then 64 bytes for
    messages through the engine) with its region."""
    ep = await connect(ctx, address)
    buffer = bytearray(size) + bytearray(ping_bytes(size)) + bytearray(64)
    region = ctx.register(buffer)
    await ep.recv(region[2 * size:2 * size + 64])
    return ep, buffer, region


async def initiator(peer_address: str, n: int, client_ip: str, size: int = SIZE,
                     **options: Any) -> tuple[PingPongRun, bytes, bytes]:
    """This side pings ``n`` times in one call, then exchanges a message through the
    engine; (the run, the last answer, the message after)."""
    async with netio.open("soft", local_addr=client_ip, **options) as ctx:
        ep, buffer, region = await ready(ctx, peer_address, size)
        control = region[2 * size:2 * size + 64]
        run = call(ctx, ep, buffer, size=size).run(n, initiator=True)
        answer = bytes(buffer[:size])
        buffer[size:size + len(AFTER)] = AFTER
        reply = ep.recv(control)
        await ep.send(region[size:size + len(AFTER)])
        c = await reply
        return run, answer, bytes(buffer[2 * size:2 * size + c.byte_len])


async def answerer(peer_address: str, n: int, client_ip: str, size: int = SIZE,
                    **options: Any) -> bytes:
    """This side answers ``n`` pings, the first taken through the engine as the bench
    server does; then the message after the call. Returns what the last ping held."""
    async with netio.open("soft", local_addr=client_ip, **options) as ctx:
        ep = await connect(ctx, peer_address)
        buffer = bytearray(size) + bytearray(pong_bytes(size)) + bytearray(b"go")
        region = ctx.register(buffer)
        first = ep.recv(region[0:size])
        await ep.send(region[2 * size:2 * size + 2])
        await first
        call(ctx, ep, buffer, size=size).run(n, initiator=False, answer_first=True)
        last = bytes(buffer[:size])
        got = ep.recv(region[0:size])
        c = await got
        assert bytes(buffer[:c.byte_len]) == AFTER
        buffer[size:size + len(AFTER_OK)] = AFTER_OK
        await ep.send(region[size:size + len(AFTER_OK)])
        return last


def main(argv: list[str]) -> int:
    if argv[:1] == ["peer"] and len(argv) == 7:
        role, backend, ip, port, size, n = argv[1], argv[2], argv[3], int(argv[4]), \
            int(argv[5]), int(argv[6])
        # verbs has no polled progress: its loop thread answers
        peer = Peer(ip, progress="poll" if backend == "soft" else "loop", size=size,
                    backend=backend, port=port, timeout_s=60)
        print("LISTENING", peer.address, flush=True)
        peer.start(peer.answer(n) if role == "answer" else peer.ping(n), linger_s=2.0)
        peer.join()
        print("PEER ok" if not peer.errors else f"PEER FAIL {peer.errors}", flush=True)
        return 0 if not peer.errors else 1
    if argv[:1] == ["call"] and len(argv) == 6:
        role, address, size, n, local = argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5]
        if role == "initiator":
            run, answer, after = asyncio.run(initiator(address, n, local, size))
            ok = answer == pong_bytes(size) and after == AFTER_OK and len(run.rtt_ns) == n
            print(f"CALL {'ok' if ok else 'FAIL'} size={size} n={n} median_rtt_us="
                  f"{statistics.median(run.rtt_ns) / 1e3:.1f} retransmits={run.retransmits} "
                  f"sent={run.packets_sent} received={run.packets_received}", flush=True)
            return 0 if ok else 1
        last = asyncio.run(answerer(address, n, local, size))
        ok = last == ping_bytes(size)
        print(f"CALL {'ok' if ok else 'FAIL'} size={size} n={n}", flush=True)
        return 0 if ok else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
