"""Inside two rxe lab guests: where a verbs send_lat round trip spends its time.

    python3 bench/lab_verbs_lat_profile.py server IP:PORT ITERS
    python3 bench/lab_verbs_lat_profile.py client IP:PORT ITERS

The two sides connect once through netio (verbs backend) and then ping-pong 64 B SENDs
over the same RC QP at four levels, each a layer more of netio than the one before:

* ``native_spin``: the C data path alone (``NativeQp.post_send``/``poll``) in a busy loop:
  what Python plus one C call per post and poll costs; the floor for this design;
* ``backend_spin``: ``VerbsQp.post_send``/``post_recv``/``poll`` in a busy loop (adds the
  request checks and the Completion objects);
* ``backend_channel``: the same, but each side sleeps on the completion channel through
  asyncio (``loop.add_reader``, event read, ack, re-arm) as the backend does by default;
* ``api``: ``ep.send``/``ep.recv`` awaited, as ``netio bench send_lat`` does.

The client prints ``LEVEL name typical_us`` (median of half round trips, as ib_send_lat
reports ``t_typical``) and the per-call costs it timed in the busy loops (``COST name
us``). The guest is TCG-emulated: only differences and ratios mean anything.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import netio
from netio.api.types import Completion
from netio.backends.base import RecvRequest, Segment, SendRequest
from netio.backends.verbs import VerbsQp

SIZE = 64
LEVELS = ("native_lean", "native_spin", "backend_spin", "backend_channel", "api")
clock = time.perf_counter_ns


def spin(qp: VerbsQp, n: int) -> list[Completion]:
    got: list[Completion] = []
    while len(got) < n:
        got.extend(qp.poll(n - len(got)))
    return got


class Side:
    def __init__(self, ep: Any, region: Any, mine: Any, client: bool, iters: int) -> None:
        self.ep, self.qp = ep, ep._qp
        self.client = client
        self.iters = iters
        self.region = mine  # backend region
        self.api_region = region
        self.costs: dict[str, list[int]] = {}
        self.wr = 1 << 40
        self.bank = [0, 0]

    def cost(self, name: str, t0: int) -> None:
        self.costs.setdefault(name, []).append(clock() - t0)

    def count(self, completions: list[Completion]) -> None:
        """Bank the completions: [sends, receives] seen and not yet waited for."""
        for c in completions:
            if c.status != netio.WcStatus.SUCCESS:
                raise RuntimeError(f"error completion {c}")
            self.bank[1 if c.opcode >= netio.WcOpcode.RECV else 0] += 1

    def next_id(self) -> int:
        self.wr += 1
        return self.wr

    # -- native ---------------------------------------------------------------------------

    def native_lean(self) -> list[float]:
        return self.native_spin(lean=True)

    def native_spin(self, lean: bool = False) -> list[float]:
        """``lean``: as ib_send_lat, inline and unsignaled sends (one in 16 signaled, so
        the send queue drains), only the receive is waited for."""
        nat = self.qp._native
        addr, lkey = self.region.addr, self.region.lkey
        samples: list[float] = []
        signaled = 2

        def post_recv() -> None:
            wid = self.next_id()
            self.qp._recvs.append(wid)
            nat.post_recv([wid], [1], [addr], [SIZE], [lkey])

        sent = [0]

        def post_send() -> None:
            wid = self.next_id()
            self.qp._sends.append(_posted(wid))
            sent[0] += 1
            flags = (8 | (2 if sent[0] % 16 == 0 else 0)) if lean else signaled
            t0 = clock()
            nat.post_send([wid], [int(netio.WrOpcode.SEND)], [flags], [0], [0], [0], [0], [0], [1],
                          [addr + SIZE], [SIZE], [lkey])
            self.cost("native_post_send", t0)

        def wait(sends: int, recvs: int) -> None:
            deadline = time.monotonic() + 20
            while self.bank[0] < sends or self.bank[1] < recvs:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"native_spin: {self.bank}, {self.qp.counters()}")
                t0 = clock()
                rows = nat.poll(4)
                self.cost("native_poll_empty" if not rows else "native_poll_hit", t0)
                self.count([self.qp._completion(*row) for row in rows])
            self.bank[0] -= sends
            self.bank[1] -= recvs

        post_recv()
        self.barrier()
        for i in range(self.iters):
            more = i + 1 < self.iters  # no receive left over for the next level
            t0 = clock()
            if self.client:
                post_send()
                wait(0 if lean else 1, 1)  # the send's ACK and the pong
                if more:
                    post_recv()
            else:
                wait(0, 1)
                if more:
                    post_recv()
                post_send()
                wait(0 if lean else 1, 0)
            samples.append((clock() - t0) / 2e3)
        if lean:  # the signaled ones
            wait(sent[0] // 16, 0)
        self.barrier()
        return samples

    # -- backend --------------------------------------------------------------------------

    def _send_req(self) -> SendRequest:
        return SendRequest(self.next_id(), netio.WrOpcode.SEND,
                           (Segment(self.region, SIZE, SIZE),))

    def _recv_req(self) -> RecvRequest:
        return RecvRequest(self.next_id(), (Segment(self.region, 0, SIZE),))

    def backend_spin(self) -> list[float]:
        qp = self.qp
        samples: list[float] = []

        def timed(name: str, fn: Callable[[], Any]) -> Any:
            t0 = clock()
            out = fn()
            self.cost(name, t0)
            return out

        def wait(sends: int, recvs: int) -> None:
            deadline = time.monotonic() + 20
            while self.bank[0] < sends or self.bank[1] < recvs:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"backend_spin: {self.bank}, {qp.counters()}")
                t0 = clock()
                c = qp.poll(4)
                self.cost("backend_poll_empty" if not c else "backend_poll_hit", t0)
                self.count(c)
            self.bank[0] -= sends
            self.bank[1] -= recvs

        qp.post_recv([self._recv_req()])
        self.barrier()
        for i in range(self.iters):
            more = i + 1 < self.iters
            t0 = clock()
            if self.client:
                timed("backend_post_send", lambda: qp.post_send([self._send_req()]))
                wait(1, 1)
                if more:
                    timed("backend_post_recv", lambda: qp.post_recv([self._recv_req()]))
            else:
                wait(0, 1)
                if more:
                    timed("backend_post_recv", lambda: qp.post_recv([self._recv_req()]))
                timed("backend_post_send", lambda: qp.post_send([self._send_req()]))
                wait(1, 0)
            samples.append((clock() - t0) / 2e3)
        self.barrier()
        return samples

    async def backend_channel(self) -> list[float]:
        qp = self.qp
        loop = asyncio.get_running_loop()
        samples: list[float] = []
        waiter: list[asyncio.Future[None]] = []
        saved = qp._notify

        def notify() -> None:
            if waiter and not waiter[0].done():
                waiter[0].set_result(None)

        async def wait(sends: int, recvs: int) -> None:
            bank = self.bank
            while True:
                self.count(qp.poll(4))
                if bank[0] >= sends and bank[1] >= recvs:
                    break
                waiter[:] = [loop.create_future()]
                self.count(qp.poll(4))  # completions between the poll and the wait
                if bank[0] >= sends and bank[1] >= recvs:
                    break
                await asyncio.wait_for(waiter[0], 20)
            bank[0] -= sends
            bank[1] -= recvs

        qp._notify = notify
        try:
            qp.post_recv([self._recv_req()])
            self.barrier()
            for i in range(self.iters):
                more = i + 1 < self.iters
                t0 = clock()
                if self.client:
                    qp.post_send([self._send_req()])
                    await wait(1, 1)
                    if more:
                        qp.post_recv([self._recv_req()])
                else:
                    await wait(0, 1)
                    if more:
                        qp.post_recv([self._recv_req()])
                    qp.post_send([self._send_req()])
                    await wait(1, 0)
                samples.append((clock() - t0) / 2e3)
            self.barrier()
        finally:
            qp._notify = saved
        return samples

    async def api(self) -> list[float]:
        ep = self.ep
        inbox, outbox = self.api_region[0:SIZE], self.api_region[SIZE:2 * SIZE]
        samples: list[float] = []
        pending = ep.recv(inbox)
        self.barrier()
        for i in range(self.iters):
            t0 = clock()
            if self.client:
                await ep.send(outbox)
                await pending
            else:
                await pending
                if i + 1 < self.iters:
                    pending = ep.recv(inbox)
                await ep.send(outbox)
            if self.client and i + 1 < self.iters:
                pending = ep.recv(inbox)
            samples.append((clock() - t0) / 2e3)
        self.barrier()
        return samples

    def barrier(self) -> None:
        """Both sides reach this point: a short sleep is enough, the other side spins or
        sleeps on its completions (a receive is always posted before)."""
        time.sleep(0.3)


def _posted(wid: int) -> Any:
    from netio.backends.verbs import _Posted
    return _Posted(wid, netio.WcOpcode.SEND)


async def main(role: str, where: str, iters: int) -> None:
    async with netio.open("verbs", timeout_s=60) as ctx:
        buf = bytearray(4 * SIZE)
        region = ctx.register(buf)
        if role == "server":
            listener = await ctx.listen(where)
            ep = await listener.accept(timeout_s=None)
        else:
            ep = None
            for _ in range(600):
                try:
                    ep = await ctx.connect(where, timeout_s=60)
                    break
                except netio.ConnectFailed:
                    await asyncio.sleep(0.1)
            assert ep is not None
        side = Side(ep, region, region.backend_region, role == "client", iters)
        print(f"data path {side.qp.data_path}, notify {side.qp.notify_mode}", flush=True)
        results: dict[str, list[float]] = {}
        for level in LEVELS:
            fn = getattr(side, level)
            out = fn()
            results[level] = await out if asyncio.iscoroutine(out) else out
            print(f"done {level}", flush=True)
        if side.client:
            for level in LEVELS:
                s = results[level]
                q = statistics.quantiles(s, n=10)
                print(f"LEVEL {level} {statistics.median(s):.1f}", flush=True)
                print(f"  {level}: min {min(s):.0f} p10 {q[0]:.0f} p90 {q[-1]:.0f} us",
                      flush=True)
            for name, v in sorted(side.costs.items()):
                print(f"COST {name} {statistics.median(v) / 1e3:.1f} (n={len(v)})", flush=True)
        await ep.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
