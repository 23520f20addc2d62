"""Inside an rxe lab guest: the verbs backend's post and poll cost, native against pyverbs.

    python3 bench/lab_verbs_postpoll.py [ROUNDS]

Two RC QPs of one VerbsBackend on the guest's rxe0, connected to each other (the kernel
loops the traffic back). For each data path (``NETIO_VERBS_NATIVE`` unset: the C module;
``=0``: pyverbs), in the same process:

* post: the time inside ``post_send`` of a batch of 32 RDMA WRITEs of 64 B (the last
  signaled), then wait for its completion;
* poll: 64 signaled WRITEs are posted and left to complete for 0.3 s, then the time of
  one ``poll(64)`` per completion it returned (the rest is drained untimed);
* rate: WRITEs per second over the whole post-wait-poll loop (the emulated kernel rxe
  dominates it; only the first two isolate what netio's own code costs).

Prints ``FIGURE <path>_<what> value`` lines; bench/bench_lab_verbs.py runs it and prints
the ratios. The two paths run round by round, interleaved, so that a change of the host's load hits
both. The guest is TCG-emulated: absolute times are meaningless, ratios are not.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from netio.api.types import Access, Completion, WcStatus, WrOpcode
from netio.backends.base import QpOptions, Segment, SendRequest
from netio.backends.verbs import VerbsBackend, VerbsQp

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


async def wait_for(qp: VerbsQp, n: int, timeout_s: float = 60.0) -> list[Completion]:
    got: list[Completion] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n:
        got.extend(qp.poll(n - len(got)))
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(got)} of {n} completions")
        if len(got) < n:
            await asyncio.sleep(0)
    return got


class Path:
    """One data path: a connected RC QP pair (the kernel loops the WRITEs back) and its
    accumulated timings."""

    def __init__(self, name: str, a: VerbsQp, src: Any, dst: Any) -> None:
        self.name, self.a, self.src, self.dst = name, a, src, dst
        self.post_s = self.loop_s = self.poll_s = 0.0
        self.posts = self.polled = 0
        self.next_id = 0

    def batch(self, n: int, signal_all: bool) -> list[SendRequest]:
        base, self.next_id = self.next_id, self.next_id + n
        return [SendRequest(base + i, WrOpcode.RDMA_WRITE, (Segment(self.src, 64 * i, 64),),
                            remote_addr=self.dst.addr + 64 * i, rkey=self.dst.rkey,
                            signaled=signal_all or i == n - 1) for i in range(n)]

    async def post_round(self, timed: bool) -> None:
        reqs = self.batch(32, False)
        t0 = time.perf_counter()
        self.a.post_send(reqs)
        t1 = time.perf_counter()
        done = await wait_for(self.a, 1)
        if done[0].status != WcStatus.SUCCESS:
            raise RuntimeError(f"{self.name}: {done[0]}")
        if timed:
            self.post_s += t1 - t0
            self.loop_s += time.perf_counter() - t0
            self.posts += 1

    async def poll_round(self) -> None:
        self.a.post_send(self.batch(64, True))
        await asyncio.sleep(0.3)  # let the emulated kernel complete them
        t0 = time.perf_counter()
        got = self.a.poll(64)
        self.poll_s += time.perf_counter() - t0
        self.polled += len(got)
        await wait_for(self.a, 64 - len(got))

    def report(self) -> None:
        n = self.name
        print(f"FIGURE {n}_post32_us {self.post_s / self.posts * 1e6:.1f}", flush=True)
        print(f"FIGURE {n}_poll_us_per_completion {self.poll_s / max(1, self.polled) * 1e6:.2f}",
              flush=True)
        print(f"FIGURE {n}_write64B_ops_per_s {self.posts * 32 / self.loop_s:.0f}", flush=True)


async def make_path(backend: VerbsBackend, ip: str, native: bool) -> Path | None:
    if native:
        os.environ.pop("NETIO_VERBS_NATIVE", None)
    else:
        os.environ["NETIO_VERBS_NATIVE"] = "0"
    options = QpOptions(max_send_wr=256, max_recv_wr=16)
    a = await backend.create_qp(ip, options, lambda: None)
    b = await backend.create_qp(ip, options, lambda: None)
    if native and a.data_path != "native":
        print(f"NATIVE-UNAVAILABLE {a.native_why_not}", flush=True)
        return None
    mtu = min(a.address().mtu_bytes, 1024)
    await a.connect(b.address(), mtu)
    await b.connect(a.address(), mtu)
    src = backend.register(memoryview(bytearray(1 << 16)), ALL)
    dst = backend.register(memoryview(bytearray(1 << 16)), ALL)
    return Path(a.data_path, a, src, dst)


async def main(rounds: int) -> None:
    ip = os.environ.get("GUEST_IP", "")
    backend = VerbsBackend(local_addr=ip or None)
    try:
        native = await make_path(backend, ip, True)
        plain = await make_path(backend, ip, False)
        if native is None or plain is None:
            return
        paths = (native, plain)
        for _ in range(10):  # warm up both the same way
            for p in paths:
                await p.post_round(timed=False)
        for _ in range(rounds):  # interleaved: a load change hits both paths alike
            for p in paths:
                await p.post_round(timed=True)
        for _ in range(max(5, rounds // 4)):
            for p in paths:
                await p.poll_round()
        for p in paths:
            p.report()
    finally:
        await backend.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
