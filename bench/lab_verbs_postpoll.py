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
the ratios. The guest is TCG-emulated: absolute times are meaningless, ratios are not.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from netio.api.types import Access, WcStatus, WrOpcode
from netio.backends.base import QpOptions, Segment, SendRequest
from netio.backends.verbs import VerbsBackend, VerbsQp

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


async def wait_for(qp: VerbsQp, n: int, timeout_s: float = 60.0) -> list[object]:
    got: list[object] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n:
        got.extend(qp.poll(n - len(got)))
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(got)} of {n} completions")
        if len(got) < n:
            await asyncio.sleep(0)
    return got


async def one_path(backend: VerbsBackend, ip: str, native: bool, rounds: int) -> None:
    if native:
        os.environ.pop("NETIO_VERBS_NATIVE", None)
    else:
        os.environ["NETIO_VERBS_NATIVE"] = "0"
    options = QpOptions(max_send_wr=256, max_recv_wr=16)
    a = await backend.create_qp(ip, options, lambda: None)
    b = await backend.create_qp(ip, options, lambda: None)
    name = a.data_path
    if native and name != "native":
        print(f"NATIVE-UNAVAILABLE {a.native_why_not}", flush=True)
        return
    mtu = min(a.address().mtu_bytes, 1024)
    await a.connect(b.address(), mtu)
    await b.connect(a.address(), mtu)
    src = bytearray(1 << 16)
    dst = bytearray(1 << 16)
    r_src = backend.register(memoryview(src), ALL)
    r_dst = backend.register(memoryview(dst), ALL)

    def batch(base: int, n: int, signal_all: bool) -> list[SendRequest]:
        return [SendRequest(base + i, WrOpcode.RDMA_WRITE, (Segment(r_src, 64 * i, 64),),
                            remote_addr=r_dst.addr + 64 * i, rkey=r_dst.rkey,
                            signaled=signal_all or i == n - 1) for i in range(n)]

    for k in range(10):  # warm up both paths the same way
        a.post_send(batch(k * 32, 32, False))
        await wait_for(a, 1)
    post_s = 0.0
    t0 = time.perf_counter()
    for k in range(rounds):
        reqs = batch(100000 + k * 32, 32, False)
        p0 = time.perf_counter()
        a.post_send(reqs)
        post_s += time.perf_counter() - p0
        done = await wait_for(a, 1)
        if done[0].status != WcStatus.SUCCESS:  # type: ignore[attr-defined]
            raise RuntimeError(f"{name}: {done[0]}")
    loop_s = time.perf_counter() - t0
    poll_s = 0.0
    polled = 0
    for k in range(max(5, rounds // 4)):
        a.post_send(batch(500000 + k * 64, 64, True))
        await asyncio.sleep(0.3)  # let the emulated kernel complete them
        p0 = time.perf_counter()
        got = a.poll(64)
        poll_s += time.perf_counter() - p0
        polled += len(got)
        await wait_for(a, 64 - len(got))
    print(f"FIGURE {name}_post32_us {post_s / rounds * 1e6:.1f}", flush=True)
    print(f"FIGURE {name}_poll_us_per_completion {poll_s / max(1, polled) * 1e6:.2f}",
          flush=True)
    print(f"FIGURE {name}_write64B_ops_per_s {rounds * 32 / loop_s:.0f}", flush=True)
    await a.close()
    await b.close()
    backend.deregister(r_src)
    backend.deregister(r_dst)


async def main(rounds: int) -> None:
    ip = os.environ.get("GUEST_IP", "")
    backend = VerbsBackend(local_addr=ip or None)
    try:
        await one_path(backend, ip, True, rounds)
        await one_path(backend, ip, False, rounds)
    finally:
        await backend.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
