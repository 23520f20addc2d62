"""The soft backend's native data path against real UDP peers, two processes on loopback.

Run: ``python bench/bench_soft.py [--runs 3] [--quick]`` (root or CAP_NET_RAW gives the
raw-socket receive path; iperf3 and sockperf from Debian: ``apt-get install iperf3
sockperf``; a section whose tool is missing says so and is skipped).

Every netio figure uses the public API (``netio.open("soft", local_addr=...)``,
``ep.post([...])``, asyncio) with one process per side, path MTU 4096. In the same run:

* bandwidth: RC WRITE of 1 MiB messages (the client's time from first post to last
  completion) against ``iperf3 -u -b 0 -l 4096`` and against a plain ``sendmmsg`` /
  ``recvmmsg`` pair in C (netio._native's udpbench: no headers, no ICRC, 4 KiB
  datagrams); the references count what the receiver got, per second between its first
  and last datagram;
* latency: 64 B SEND ping-pong, half the round trip (sockperf's convention): ``netio
  bench send_lat`` (the whole loop in one call into C per side, on the engine's QP, as
  sockperf and ib_send_lat run theirs) in the receive mode asked for and with UDP
  receive, against ``sockperf ping-pong`` UDP 64 B in its default mode (epoll) and with
  ``--nonblocked`` (busy-polling, like netio's loop), medians and averages; then through
  the IO API (one ``op.wait`` per message) in synchronous code with ``progress="poll"``,
  with the private loop thread, and with asyncio, and a plain Python asyncio UDP
  ping-pong (the floor of any asyncio design), with the client's CPU time per round trip;
* message rate: 64 B WRITE and SEND posted with ``ep.post`` in batches (polled and
  asyncio) against the C pair with 64 B datagrams;
* UDP GSO/GRO: the 1 MiB WRITE with the soft driver's ``gso`` and ``gro`` off and on
  (``NETIO_SOFT_GSO``/``NETIO_SOFT_GRO``; UDP receive on both sides), against the same
  pair and iperf3;
* MSG_ZEROCOPY: 1 MiB messages as 60 KiB GSO sends with and without it (a plain UDP
  pair, not the engine: whether it could pay at all here);
* native against pure (``NETIO_PURE=1``): the same workloads;
* zero copy: one WRITE into a registered numpy array, its address before and after,
  and copies per payload byte from the engines' counters.

Each side runs once per round, ``--runs`` rounds interleaved; figures are medians, ratios
the median (and range) of the per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

MIB = 1 << 20
MTU = 4096
TARGET_MIB = 16


def _addresses() -> tuple[str, str]:
    base = random.SystemRandom().randrange(1 << 16) << 8
    return (str(ipaddress.IPv4Address((127 << 24) | base | 1)),
            str(ipaddress.IPv4Address((127 << 24) | base | 2)))


def _env(pure: bool, gso: str = "off", gro: str = "off") -> None:
    # netio.open does not take the soft driver's gso option: the driver reads it here
    os.environ["NETIO_SOFT_GSO"] = gso
    os.environ["NETIO_SOFT_GRO"] = gro
    if pure:
        os.environ["NETIO_PURE"] = "1"
    else:
        os.environ.pop("NETIO_PURE", None)


# -- netio server and client (one process each) -------------------------------------------

def _profiled(role: str, main: Callable[[], Any]) -> None:
    """Run ``asyncio.run(main())``, under cProfile when NETIO_BENCH_PROFILE names a folder
    (ROLE.prof is written there: where the time goes, for a target that is missed)."""
    folder = os.environ.get("NETIO_BENCH_PROFILE")
    if not folder:
        asyncio.run(main())
        return
    import cProfile

    profile = cProfile.Profile()
    profile.enable()
    try:
        asyncio.run(main())
    finally:
        profile.disable()
        profile.dump_stats(os.path.join(folder, f"{role}.prof"))


def _server(job: dict[str, Any], ip: str, port_q: Any, out_q: Any) -> None:
    _env(job["pure"], job.get("gso", "off"), job.get("gro", "off"))

    async def main() -> None:
        import numpy as np

        import netio
        from netio.api.endpoint import WorkRequest
        from netio.backends.soft.sockets import RxMode

        async with netio.open("soft", local_addr=ip, mtu=MTU,
                              rx_mode=RxMode(job.get("rx_mode", "auto"))) as ctx:
            target = np.zeros(TARGET_MIB * MIB, dtype=np.uint8)
            address = target.ctypes.data
            region = ctx.register(target)
            listener = await ctx.listen(f"{ip}:0")
            port_q.put(listener.address[1])
            ep = await listener.accept(timeout_s=60)
            inbox = ctx.register(bytearray(64 * 65536))
            posted: list[Any] = []
            if job["kind"] == "send_rate":  # receives first: a SEND consumes the oldest
                n = job["count"]
                posted = [ep.post([WorkRequest.recv(inbox[(k % 65536) * 64:(k % 65536 + 1) * 64])
                                   for k in range(i, min(n, i + 1024))])
                          for i in range(0, n, 1024)]
            ping = ctx.register(bytearray(128))
            nxt = ep.recv(ping[0:64]) if job["kind"] == "latency" else None
            done = ep.recv(ctx.register(bytearray(64))) if nxt is None else None
            await ep.send(ctx.register(bytearray(region.descriptor())))
            cpu0 = time.process_time()
            if nxt is not None:
                for k in range(job["count"]):
                    await nxt
                    # the next ping's receive is posted before the pong goes (no RNR)
                    nxt = ep.recv(ping[0:64]) if k + 1 < job["count"] else ep.recv(
                        ctx.register(bytearray(64)))
                    await ep.send(ping[64:128])
                done = nxt
            for p in posted:
                await p
            await done
            expect = job.get("expect")
            landed = None
            if expect is not None:
                landed = bool(np.array_equal(target[:expect],
                                             np.arange(expect, dtype=np.uint32).astype(np.uint8)))
            out_q.put({"server": ep.counters(), "address_same": target.ctypes.data == address,
                       "landed": landed,
                       "server_cpu_us": (time.process_time() - cpu0) / job["count"] * 1e6})

    _profiled("server", main)


def _client(job: dict[str, Any], ip: str, server_ip: str, port: int, out_q: Any) -> None:
    _env(job["pure"], job.get("gso", "off"), job.get("gro", "off"))

    async def main() -> None:
        import numpy as np

        import netio
        from netio.api.endpoint import WorkRequest
        from netio.backends.soft.sockets import RxMode

        async with netio.open("soft", local_addr=ip, mtu=MTU,
                              rx_mode=RxMode(job.get("rx_mode", "auto"))) as ctx:
            ep = await ctx.connect(f"{server_ip}:{port}")
            box = bytearray(netio.api.region.DESCRIPTOR_BYTES)
            await ep.recv(ctx.register(box))
            remote = netio.RemoteRegion.from_descriptor(box)
            size, count, kind = job["size"], job["count"], job["kind"]
            source = np.arange(max(size, 64), dtype=np.uint32).astype(np.uint8)
            local = ctx.register(source)
            result: dict[str, Any] = {}
            slots = TARGET_MIB * MIB // size
            t0 = time.perf_counter()
            cpu0 = time.process_time()
            if kind in ("write_bw", "write_rate", "send_rate"):
                batch = job["batch"]

                def request(k: int) -> WorkRequest:
                    if kind == "send_rate":
                        return WorkRequest.send(local[0:size])
                    at = (k % slots) * size
                    return WorkRequest.write(local[0:size], remote[at:at + size])

                inflight: list[Any] = []
                for i in range(0, count, batch):
                    inflight.append(ep.post([request(k) for k in range(i, min(count, i + batch))]))
                    if len(inflight) >= job["batches_in_flight"]:
                        await inflight.pop(0)
                for p in inflight:
                    await p
                took = time.perf_counter() - t0
                result = {"seconds": took, "mib_s": count * size / took / MIB,
                          "msg_s": count / took, "client_cpu_us": (time.process_time()
                                                                  - cpu0) / count * 1e6}
            elif kind == "latency":
                ping = ctx.register(bytearray(64))
                rtts = []
                cpu0 = time.process_time()
                for _ in range(count):
                    t = time.perf_counter()
                    pong = ep.recv(ping)
                    await ep.send(ping)
                    await pong
                    rtts.append(time.perf_counter() - t)
                result = {"one_way_us": statistics.median(rtts) / 2 * 1e6,
                          "one_way_avg_us": statistics.fmean(rtts) / 2 * 1e6,
                          "client_cpu_us": (time.process_time() - cpu0) / count * 1e6}
            elif kind == "zero_copy":
                await ep.write(local[0:size], remote[0:size])
            result["client"] = ep.counters()
            await ep.send(ctx.register(bytearray(b"done")))
            out_q.put(result)

    _profiled("client", main)


def _profiled_sync(role: str, main: Callable[[], Any]) -> None:
    """``main()`` (synchronous), under cProfile as :func:`_profiled` says."""
    folder = os.environ.get("NETIO_BENCH_PROFILE")
    if not folder:
        main()
        return
    import cProfile

    profile = cProfile.Profile()
    profile.enable()
    try:
        main()
    finally:
        profile.disable()
        profile.dump_stats(os.path.join(folder, f"{role}.prof"))


def _sync_server(job: dict[str, Any], ip: str, port_q: Any, out_q: Any) -> None:
    """The server in synchronous code: ``progress`` "poll" (the waiting thread drives the
    engine) or "loop" (a private loop thread); kinds ``latency`` and ``*_rate``."""
    _env(job["pure"])

    def main() -> None:
        import netio
        from netio.api.endpoint import WorkRequest
        from netio.backends.soft.sockets import RxMode

        with netio.open("soft", local_addr=ip, mtu=MTU, progress=job["progress"],
                        rx_mode=RxMode(job.get("rx_mode", "auto"))) as ctx:
            target = ctx.register(bytearray(TARGET_MIB * MIB))
            listener = ctx.listen(f"{ip}:0").wait(30)
            port_q.put(listener.address[1])
            ep = listener.accept(timeout_s=60).wait(60)
            count = job["count"]
            posted = []
            if job["kind"] == "send_rate":  # receives first: a SEND consumes the oldest
                inbox = ctx.register(bytearray(64 * 65536))
                posted = [ep.post([WorkRequest.recv(inbox[(k % 65536) * 64:
                                                          (k % 65536 + 1) * 64])
                                   for k in range(i, min(count, i + 1024))])
                          for i in range(0, count, 1024)]
            ping = ctx.register(bytearray(128))
            nxt = ep.recv(ping[0:64])
            ep.send(ctx.register(bytearray(target.descriptor()))).wait(30)
            cpu0 = time.process_time()
            if job["kind"] == "latency":
                for _ in range(count):
                    nxt.wait(30)
                    nxt = ep.recv(ping[0:64])  # the next ping's receive before the pong
                    ep.send(ping[64:128]).wait(30)
            for p in posted:
                p.wait(300)
            nxt.wait(300)  # the client's "done"
            out_q.put({"server": ep.counters(),
                       "server_cpu_us": (time.process_time() - cpu0) / count * 1e6})

    _profiled_sync("server", main)


def _sync_client(job: dict[str, Any], ip: str, server_ip: str, port: int, out_q: Any) -> None:
    _env(job["pure"])

    def main() -> None:
        import netio
        from netio.api.endpoint import WorkRequest
        from netio.backends.soft.sockets import RxMode

        with netio.open("soft", local_addr=ip, mtu=MTU, progress=job["progress"],
                        rx_mode=RxMode(job.get("rx_mode", "auto"))) as ctx:
            ep = ctx.connect(f"{server_ip}:{port}").wait(30)
            box = bytearray(netio.api.region.DESCRIPTOR_BYTES)
            ep.recv(ctx.register(box)).wait(30)
            remote = netio.RemoteRegion.from_descriptor(box)
            ping = ctx.register(bytearray(64))
            count, kind = job["count"], job["kind"]
            result: dict[str, Any] = {}
            cpu0 = time.process_time()
            if kind == "latency":
                rtts = []
                for _ in range(count):
                    t = time.perf_counter()
                    pong = ep.recv(ping)
                    ep.send(ping).wait(30)
                    pong.wait(30)
                    rtts.append(time.perf_counter() - t)
                result = {"one_way_us": statistics.median(rtts) / 2 * 1e6,
                          "one_way_avg_us": statistics.fmean(rtts) / 2 * 1e6}
            else:
                size, batch = job["size"], job["batch"]
                slots = TARGET_MIB * MIB // size
                t0 = time.perf_counter()
                inflight: list[Any] = []
                for i in range(0, count, batch):
                    if kind == "send_rate":
                        reqs = [WorkRequest.send(ping[0:size])
                                for _ in range(i, min(count, i + batch))]
                    else:
                        reqs = [WorkRequest.write(ping[0:size], remote[(k % slots) * size:
                                                                       (k % slots + 1) * size])
                                for k in range(i, min(count, i + batch))]
                    inflight.append(ep.post(reqs))
                    if len(inflight) >= job["batches_in_flight"]:
                        inflight.pop(0).wait(60)
                for p in inflight:
                    p.wait(60)
                took = time.perf_counter() - t0
                result = {"seconds": took, "msg_s": count / took}
            result["client_cpu_us"] = (time.process_time() - cpu0) / count * 1e6
            ep.send(ctx.register(bytearray(b"done"))).wait(30)
            result["client"] = ep.counters()
            out_q.put(result)

    _profiled_sync("client", main)


def netio_run(job: dict[str, Any]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    server_ip, client_ip = _addresses()
    port_q, out_q = ctx.Queue(), ctx.Queue()
    sync = "progress" in job  # the synchronous API, polled or with a loop thread
    server = ctx.Process(target=_sync_server if sync else _server,
                         args=(job, server_ip, port_q, out_q))
    server.start()
    try:
        port = port_q.get(timeout=60)
        client = ctx.Process(target=_sync_client if sync else _client,
                             args=(job, client_ip, server_ip, port, out_q))
        client.start()
        first = out_q.get(timeout=300)
        second = out_q.get(timeout=60)
        client.join(30)
        server.join(30)
    finally:
        for p in mp.active_children():
            p.kill()
    return {**first, **second}


# -- the references ------------------------------------------------------------------------

def _sink(ip: str, size: int, count: int, ready: Any, out_q: Any) -> None:
    from netio import native

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((ip, 0))
    ready.put(sock.getsockname()[1])
    ffi, lib = native.ffi, native.lib
    buf = ffi.new("uint8_t[]", 64 * 65536)
    nbytes, first, last = ffi.new("uint64_t *"), ffi.new("uint64_t *"), ffi.new("uint64_t *")
    got = lib.netio_udp_sink(sock.fileno(), buf, 65536, count, 500, nbytes, first, last)
    span = (last[0] - first[0]) / 1e9
    out_q.put({"datagrams": got, "bytes": nbytes[0], "seconds": span})


def udp_pair(size: int, count: int) -> dict[str, float]:
    """sendmmsg/recvmmsg between two processes: what the receiver got per second."""
    from netio import native

    ctx = mp.get_context("spawn")
    rx_ip, tx_ip = _addresses()
    ready, out_q = ctx.Queue(), ctx.Queue()
    sink = ctx.Process(target=_sink, args=(rx_ip, size, count, ready, out_q))
    sink.start()
    port = ready.get(timeout=30)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind((tx_ip, 0))
    data = native.ffi.new("uint8_t[]", size)
    native.lib.netio_udp_blast(sock.fileno(), int(ipaddress.IPv4Address(rx_ip)), port, data,
                               size, count)
    r = out_q.get(timeout=120)
    sink.join(10)
    sock.close()
    span = max(r["seconds"], 1e-9)
    return {"mib_s": r["bytes"] / span / MIB, "msg_s": r["datagrams"] / span,
            "loss": 1 - r["datagrams"] / count}


_SO_ZEROCOPY = 60  # asm-generic/socket.h
_MSG_ZEROCOPY = 0x4000000
_UDP_SEGMENT = 103
_SO_EE_ORIGIN_ZEROCOPY = 5
_SO_EE_CODE_ZEROCOPY_COPIED = 1


def _zc_drain(sock: socket.socket, block: bool) -> tuple[int, int]:
    """Zero-copy notifications on the error queue: (sends completed, sends the kernel
    reported as copied after all)."""
    import select
    import struct

    done = copied = 0
    while True:
        if block:  # the error queue shows as POLLERR (select's sets would not)
            poller = select.poll()
            poller.register(sock, select.POLLERR)
            if not poller.poll(5000):
                return done, copied
        try:
            _, anc, _, _ = sock.recvmsg(0, 256, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return done, copied
        for _level, _type, data in anc:
            _errno, origin, _kind, code, _pad, lo, hi = struct.unpack("=IBBBBII", data[:16])
            if origin == _SO_EE_ORIGIN_ZEROCOPY:
                done += hi - lo + 1
                copied += (hi - lo + 1) if code & _SO_EE_CODE_ZEROCOPY_COPIED else 0
        block = False


def zerocopy_pair(zerocopy: bool, mib: int) -> dict[str, float]:
    """1 MiB messages as 60 KiB UDP GSO sends (15 x 4096 B datagrams) from one buffer to a
    UDP sink in another process, with or without MSG_ZEROCOPY. With it the buffer is not
    reused before every send of the message has its notification (what the engine's
    completion would have to wait for). Sender CPU per MiB and what the receiver got."""
    import struct

    ctx = mp.get_context("spawn")
    rx_ip, tx_ip = _addresses()
    ready, out_q = ctx.Queue(), ctx.Queue()
    count = mib * 256
    sink = ctx.Process(target=_sink, args=(rx_ip, 4096, count, ready, out_q))
    sink.start()
    port = ready.get(timeout=30)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind((tx_ip, 0))
    sock.connect((rx_ip, port))
    flags = 0
    if zerocopy:
        sock.setsockopt(socket.SOL_SOCKET, _SO_ZEROCOPY, 1)
        flags = _MSG_ZEROCOPY
    buf = memoryview(bytearray(MIB))
    cmsg = [(socket.IPPROTO_UDP, _UDP_SEGMENT, struct.pack("=H", 4096))]
    done = copied = sent = 0
    cpu0 = time.process_time()
    for _ in range(mib):
        for off in range(0, MIB, 61440):  # 15 datagrams: under the 65507-byte limit
            while True:
                try:
                    sock.sendmsg([buf[off:off + 61440]], cmsg, flags)
                    break
                except OSError as exc:  # ENOBUFS: out of optmem for pinned pages
                    if not zerocopy or exc.errno != 105:
                        raise
                    d, c = _zc_drain(sock, True)
                    done, copied = done + d, copied + c
            sent += 1
        while zerocopy and done < sent:  # the buffer is reused: wait for its sends
            d, c = _zc_drain(sock, True)
            if not d:
                break
            done, copied = done + d, copied + c
    cpu = time.process_time() - cpu0
    r = out_q.get(timeout=120)
    sink.join(10)
    sock.close()
    span = max(r["seconds"], 1e-9)
    return {"mib_s": r["bytes"] / span / MIB, "loss": 1 - r["datagrams"] / count,
            "cpu_ms_per_mib": cpu / mib * 1e3,
            "copied": copied / sent if zerocopy and sent else 0.0}


def iperf3_udp(size: int, seconds: float) -> dict[str, float] | None:
    if shutil.which("iperf3") is None:
        return None
    server_ip, _ = _addresses()
    port = random.randrange(20000, 60000)
    srv = subprocess.Popen(["iperf3", "-s", "-1", "-B", server_ip, "-p", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = subprocess.run(["iperf3", "-c", server_ip, "-p", str(port), "-u", "-b", "0",
                              "-l", str(size), "-t", str(seconds), "-J"],
                             capture_output=True, text=True, timeout=seconds + 30)
        doc = json.loads(out.stdout)
        end = doc["end"]
        received = end.get("sum_received") or end["sum"]
        sent = end.get("sum_sent") or end["sum"]
        return {"mib_s": received["bits_per_second"] / 8 / MIB,
                "sent_mib_s": sent["bits_per_second"] / 8 / MIB,
                "loss": end["sum"].get("lost_percent", 0.0) / 100}
    finally:
        srv.kill()
        srv.wait()


def _echo(ip: str, port_q: Any) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        class Echo(asyncio.DatagramProtocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport

            def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
                if data == b"bye":
                    done.set_result(None)
                else:
                    self.transport.sendto(data, addr)  # type: ignore[attr-defined]

        transport, _ = await loop.create_datagram_endpoint(Echo, local_addr=(ip, 0))
        port_q.put(transport.get_extra_info("sockname")[1])
        await done
        transport.close()

    asyncio.run(main())


def asyncio_udp_latency(count: int) -> dict[str, float]:
    """The floor of any asyncio design: a Python asyncio UDP ping-pong of 64 B between two
    processes (DatagramProtocol, one future per round trip), half the round trip (median)
    and the client's CPU per round trip, in us."""
    ctx = mp.get_context("spawn")
    server_ip, _ = _addresses()
    port_q = ctx.Queue()
    server = ctx.Process(target=_echo, args=(server_ip, port_q))
    server.start()
    port = port_q.get(timeout=30)

    async def client() -> dict[str, float]:
        loop = asyncio.get_running_loop()
        waiting: list[asyncio.Future[bytes]] = []

        class Client(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
                waiting.pop().set_result(data)

        transport, _ = await loop.create_datagram_endpoint(Client,
                                                           remote_addr=(server_ip, port))
        rtts = []
        cpu0 = time.process_time()
        for _ in range(count):
            waiting.append(loop.create_future())
            t = time.perf_counter()
            transport.sendto(bytes(64))
            await waiting[0]
            rtts.append(time.perf_counter() - t)
        cpu_us = (time.process_time() - cpu0) / count * 1e6
        transport.sendto(b"bye")
        transport.close()
        return {"one_way_us": statistics.median(rtts) / 2 * 1e6, "client_cpu_us": cpu_us}

    try:
        return asyncio.run(client())
    finally:
        server.join(10)
        if server.is_alive():
            server.kill()


def sockperf_latency(seconds: float, *, busy: bool = False) -> dict[str, float] | None:
    """sockperf ping-pong UDP 64 B, half the round trip in us: its average and median.
    ``busy``: both ends with ``--nonblocked`` (they spin on non-blocking sockets, as
    netio's one-call ping-pong does); else sockperf's default (epoll, sleeping)."""
    if shutil.which("sockperf") is None:
        return None
    server_ip, _ = _addresses()
    port = str(random.randrange(20000, 60000))
    mode = ["--nonblocked"] if busy else []
    srv = subprocess.Popen(["sockperf", "server", "-i", server_ip, "-p", port, *mode],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = subprocess.run(["sockperf", "ping-pong", "-i", server_ip, "-p", port, "-m", "64",
                              "-t", str(int(max(1, seconds))), *mode], capture_output=True,
                             text=True, timeout=seconds + 30)
        text = out.stdout + out.stderr
        avg = re.search(r"avg-lat(?:ency)?=\s*([0-9.]+)", text)
        p50 = re.search(r"percentile 50\.000 =\s*([0-9.]+)", text)
        if avg is None or p50 is None:
            return None
        return {"one_way_us": float(p50.group(1)), "avg_us": float(avg.group(1))}
    finally:
        srv.kill()
        srv.wait()


def netio_bench_latency(count: int, rx_mode: str) -> dict[str, float]:
    """``netio bench send_lat -s 64`` on the soft backend, two processes: the one-call
    ping-pong in C (netio/backends/soft/pingpong.py); half round trips in us, median
    (t_typical) and average, and the client's CPU per round trip."""
    server_ip, client_ip = _addresses()
    port = str(random.randrange(20000, 60000))
    cli = [sys.executable, "-m", "netio.cli.main", "bench", "--backend", "soft",
           "--rx-mode", rx_mode]
    srv = subprocess.Popen([*cli, "--listen", f"{server_ip}:{port}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out = subprocess.run([*cli, "--local-addr", client_ip, "--json", "send_lat",
                              f"{server_ip}:{port}", "-s", "64", "-n", str(count)],
                             capture_output=True, text=True, timeout=120, check=True)
        result = json.loads(out.stdout)["results"][0]
    finally:
        srv.wait(30)
    avg_us = float(result["t_avg_s"]) * 1e6
    return {"one_way_us": float(result["t_typical_s"]) * 1e6, "avg_us": avg_us,
            "client_cpu_us": 2 * avg_us * float(result["cpu_client_fraction"])}


# -- the report ----------------------------------------------------------------------------

_LAST: dict[str, list[dict[str, Any]]] = {}  # the whole results of the last _rounds


def _rounds(runs: int, fns: dict[str, Callable[[], Any]], key: str) -> dict[str, list[float]]:
    """Each of ``fns`` once per round, ``runs`` rounds, interleaved so that a change of load
    on the machine hits every side alike; the values of ``key`` (NaN where a tool is
    missing), by name."""
    out: dict[str, list[float]] = {name: [] for name in fns}
    _LAST.clear()
    for _ in range(runs):
        for name, fn in fns.items():
            r = fn()
            if isinstance(r, dict):
                _LAST.setdefault(name, []).append(r)
            out[name].append(float(r[key]) if isinstance(r, dict) else
                             float(r) if r is not None else float("nan"))
    return out


def _med(values: list[float]) -> float:
    ok = [v for v in values if v == v]
    return statistics.median(ok) if ok else float("nan")


def _ratio(a: list[float], b: list[float]) -> str:
    """Median of the per-round ratios a/b, and its range."""
    ratios = [x / y for x, y in zip(a, b, strict=False) if y and x == x and y == y]
    if not ratios:
        return "n/a"
    return f"{statistics.median(ratios):.3g}x [{min(ratios):.3g}..{max(ratios):.3g}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller counts (smoke test)")
    parser.add_argument("--only", choices=("bw", "gso", "zc", "lat", "rate", "zero"), default=None)
    parser.add_argument("--rx-mode", choices=("auto", "raw", "udp"), default="auto",
                        help="the soft backend's receive socket (auto: raw when permitted)")
    args = parser.parse_args(argv)
    base: dict[str, Any] = {"rx_mode": args.rx_mode}
    q = 0.25 if args.quick else 1.0
    runs = args.runs
    print(f"soft backend native data path, loopback, MTU {MTU}, median of {runs} runs, "
          f"receive mode {args.rx_mode}; load average {os.getloadavg()[0]:.2f} at start")

    if args.only in (None, "bw"):
        mib = int(512 * q)
        bw_job = {**base, "kind": "write_bw", "size": MIB, "count": mib, "batch": 4,
                  "batches_in_flight": 2, "pure": False}
        bw = _rounds(runs, {
            "native": lambda: netio_run(bw_job),
            "pure": lambda: netio_run({**bw_job, "pure": True, "count": max(8, mib // 8)}),
            "pair": lambda: udp_pair(4096, mib * 256),
            "iperf3": lambda: iperf3_udp(4096, 3 * q + 1),
        }, "mib_s")
        print("\n1 MiB RC WRITE bandwidth [MiB/s] (references: what the receiver got)")
        print(f"  netio soft native      {_med(bw['native']):9.1f}")
        print(f"  netio soft pure        {_med(bw['pure']):9.1f}   native/pure "
              f"{_ratio(bw['native'], bw['pure'])}")
        print(f"  sendmmsg/recvmmsg pair {_med(bw['pair']):9.1f}   netio/pair "
              f"{_ratio(bw['native'], bw['pair'])}")
        print(f"  iperf3 -u -b 0 -l 4096 {_med(bw['iperf3']):9.1f}   netio/iperf3 "
              f"{_ratio(bw['native'], bw['iperf3'])}")

    if args.only in (None, "gso"):
        mib = int(512 * q)
        # UDP receive on both sides: a raw receiver would see GSO super-packets whole
        gso_job = {**base, "rx_mode": "udp", "kind": "write_bw", "size": MIB, "count": mib,
                   "batch": 4, "batches_in_flight": 2, "pure": False}
        g = _rounds(runs, {
            "off": lambda: netio_run({**gso_job, "gso": "off"}),
            "on": lambda: netio_run({**gso_job, "gso": "on"}),
            "gro": lambda: netio_run({**gso_job, "gro": "on"}),
            "both": lambda: netio_run({**gso_job, "gso": "on", "gro": "on"}),
            "pair": lambda: udp_pair(4096, mib * 256),
            "iperf3": lambda: iperf3_udp(4096, 3 * q + 1),
        }, "mib_s")
        print("\n1 MiB RC WRITE bandwidth, UDP receive, UDP GSO and GRO off/on [MiB/s]")
        print(f"  netio GSO off          {_med(g['off']):9.1f}   netio/pair "
              f"{_ratio(g['off'], g['pair'])}")
        print(f"  netio GSO on           {_med(g['on']):9.1f}   on/off "
              f"{_ratio(g['on'], g['off'])}   netio/pair {_ratio(g['on'], g['pair'])}")
        print(f"  netio GRO on           {_med(g['gro']):9.1f}   gro/off "
              f"{_ratio(g['gro'], g['off'])}")
        print(f"  netio GSO+GRO on       {_med(g['both']):9.1f}   both/off "
              f"{_ratio(g['both'], g['off'])}   both/GSO {_ratio(g['both'], g['on'])}")
        print(f"  sendmmsg/recvmmsg pair {_med(g['pair']):9.1f}")
        print(f"  iperf3 -u -b 0 -l 4096 {_med(g['iperf3']):9.1f}   GSO on/iperf3 "
              f"{_ratio(g['on'], g['iperf3'])}")
        # GRO must not change how often a payload byte is copied (the split is in place)
        per_byte = {name: [1 + r["server"]["engine_rx_user_copy_bytes"]
                           / max(1, r["server"]["engine_rx_payload_bytes"])
                           for r in _LAST.get(name, [])] for name in ("off", "on", "gro", "both")}
        print("  receiver copies per payload byte: "
              + ", ".join(f"{name} {_med(v):.3f}" for name, v in per_byte.items()))
        # the receiver's CPU per MiB: what GRO saves, less sensitive than MiB/s to a host
        # that other work keeps busy
        rx_cpu = {name: [r["server_cpu_us"] / 1000 for r in _LAST.get(name, [])]
                  for name in ("off", "on", "gro", "both")}
        print("  receiver CPU per MiB [ms]: "
              + ", ".join(f"{name} {_med(v):.2f}" for name, v in rx_cpu.items())
              + f"; gro/off {_ratio(rx_cpu['gro'], rx_cpu['off'])}, both/GSO "
              f"{_ratio(rx_cpu['both'], rx_cpu['on'])}")

    if args.only in (None, "zc"):
        mib = int(512 * q)
        z = _rounds(runs, {"copy": lambda: zerocopy_pair(False, mib),
                           "zerocopy": lambda: zerocopy_pair(True, mib)}, "mib_s")
        zl = dict(_LAST)
        cpu = {k: [float(r["cpu_ms_per_mib"]) for r in v] for k, v in zl.items()}
        print("\nMSG_ZEROCOPY: 1 MiB messages as 60 KiB GSO sends, buffer reused after its "
              "notifications [MiB/s received; sender CPU ms per MiB]")
        print(f"  copy                   {_med(z['copy']):9.1f}   CPU {_med(cpu['copy']):6.2f}")
        print(f"  MSG_ZEROCOPY           {_med(z['zerocopy']):9.1f}   CPU "
              f"{_med(cpu['zerocopy']):6.2f}   zerocopy/copy "
              f"{_ratio(z['zerocopy'], z['copy'])}; sends the kernel copied anyway: "
              f"{_med([float(r['copied']) for r in zl['zerocopy']]):.0%}")

    if args.only in (None, "lat"):
        n = int(4000 * q)
        lat_job = {**base, "kind": "latency", "size": 64, "count": n, "pure": False}
        lat = _rounds(runs, {
            "bench": lambda: netio_bench_latency(5 * n, args.rx_mode),
            "bench_udp": lambda: netio_bench_latency(5 * n, "udp"),
            "poll": lambda: netio_run({**lat_job, "progress": "poll"}),
            "thread": lambda: netio_run({**lat_job, "progress": "loop"}),
            "native": lambda: netio_run(lat_job),
            "pure": lambda: netio_run({**lat_job, "pure": True}),
            "sockperf": lambda: sockperf_latency(3 * q + 1) or {"one_way_us": float("nan"),
                                                                 "avg_us": float("nan")},
            "sockperf_busy": lambda: sockperf_latency(3 * q + 1, busy=True) or {
                "one_way_us": float("nan"), "avg_us": float("nan")},
            "asyncio": lambda: asyncio_udp_latency(n),
        }, "one_way_us")
        last = dict(_LAST)
        cpu = {name: [float(r["client_cpu_us"]) for r in rs] for name, rs in last.items()
               if "client_cpu_us" in rs[0]}
        avg = {name: [float(r["avg_us"]) for r in rs] for name, rs in last.items()
               if "avg_us" in rs[0]}
        print("\n64 B SEND latency, half round trip [us], median (average); client CPU per "
              "round trip [us]")
        print(f"  netio bench send_lat   {_med(lat['bench']):6.2f} ({_med(avg['bench']):6.2f})  "
              f"CPU {_med(cpu['bench']):6.1f}   one call into C per side "
              f"(receive mode {args.rx_mode})")
        print(f"     /sockperf           median {_ratio(lat['bench'], lat['sockperf'])}, "
              f"average {_ratio(avg['bench'], avg['sockperf'])}")
        print(f"     /sockperf busy-poll median {_ratio(lat['bench'], lat['sockperf_busy'])}, "
              f"average {_ratio(avg['bench'], avg['sockperf_busy'])}")
        print(f"  same, UDP receive      {_med(lat['bench_udp']):6.2f} "
              f"({_med(avg['bench_udp']):6.2f})  CPU {_med(cpu['bench_udp']):6.1f}   "
              f"/sockperf busy-poll median {_ratio(lat['bench_udp'], lat['sockperf_busy'])}, "
              f"average {_ratio(avg['bench_udp'], avg['sockperf_busy'])}")
        print(f"  sockperf ping-pong UDP {_med(lat['sockperf']):6.2f} "
              f"({_med(avg['sockperf']):6.2f})   default: epoll, sleeps between messages")
        print(f"  sockperf --nonblocked  {_med(lat['sockperf_busy']):6.2f} "
              f"({_med(avg['sockperf_busy']):6.2f})   busy-polls, as the one-call ping-pong")
        print("  through the IO API (one op.wait per message):")
        print(f"  netio poll (sync wait) {_med(lat['poll']):6.1f}           CPU "
              f"{_med(cpu['poll']):6.1f}   poll/sockperf {_ratio(lat['poll'], lat['sockperf'])}")
        print(f"  netio loop thread sync {_med(lat['thread']):6.1f}           CPU "
              f"{_med(cpu['thread']):6.1f}   poll/thread {_ratio(lat['poll'], lat['thread'])}")
        print(f"  netio asyncio native   {_med(lat['native']):6.1f}           CPU "
              f"{_med(cpu['native']):6.1f}   poll/asyncio {_ratio(lat['poll'], lat['native'])}")
        print(f"  netio asyncio pure     {_med(lat['pure']):6.1f}           CPU "
              f"{_med(cpu['pure']):6.1f}   native/pure {_ratio(lat['native'], lat['pure'])}")
        print(f"  asyncio UDP ping-pong  {_med(lat['asyncio']):6.1f}           CPU "
              f"{_med(cpu['asyncio']):6.1f}   netio poll/asyncio UDP "
              f"{_ratio(lat['poll'], lat['asyncio'])}  (the floor of a Python event loop)")

    if args.only in (None, "rate"):
        n = int(40000 * q)
        rate = {**base, "size": 64, "count": n, "batch": 256, "batches_in_flight": 4}
        mr = _rounds(runs, {
            "write_poll": lambda: netio_run({**rate, "kind": "write_rate", "pure": False,
                                             "progress": "poll"}),
            "send_poll": lambda: netio_run({**rate, "kind": "send_rate", "pure": False,
                                            "progress": "poll"}),
            "write": lambda: netio_run({**rate, "kind": "write_rate", "pure": False}),
            "send": lambda: netio_run({**rate, "kind": "send_rate", "pure": False}),
            "write_pure": lambda: netio_run({**rate, "kind": "write_rate", "pure": True,
                                             "count": n // 4}),
            "pair": lambda: udp_pair(64, n * 20),
        }, "msg_s")
        cpu = {name: [float(r["client_cpu_us"]) for r in rs] for name, rs in _LAST.items()
               if name != "pair"}
        print("\n64 B message rate, ep.post() batches of 256 [messages/s]; client CPU per "
              "message [us]")
        print(f"  netio WRITE poll (sync){_med(mr['write_poll']):11.0f}   CPU "
              f"{_med(cpu['write_poll']):6.1f}   netio/pair "
              f"{_ratio(mr['write_poll'], mr['pair'])}")
        print(f"  netio SEND poll (sync) {_med(mr['send_poll']):11.0f}   CPU "
              f"{_med(cpu['send_poll']):6.1f}   netio/pair "
              f"{_ratio(mr['send_poll'], mr['pair'])}")
        print(f"  netio WRITE asyncio    {_med(mr['write']):11.0f}   CPU "
              f"{_med(cpu['write']):6.1f}   netio/pair {_ratio(mr['write'], mr['pair'])}")
        print(f"  netio SEND asyncio     {_med(mr['send']):11.0f}   CPU "
              f"{_med(cpu['send']):6.1f}   netio/pair {_ratio(mr['send'], mr['pair'])}")
        print(f"  netio WRITE pure async {_med(mr['write_pure']):11.0f}   native/pure "
              f"{_ratio(mr['write'], mr['write_pure'])}")
        print(f"  sendmmsg/recvmmsg pair {_med(mr['pair']):11.0f}   (64 B datagrams)")

    if args.only in (None, "zero"):
        r = netio_run({**base, "kind": "zero_copy", "size": 4 * MIB, "count": 1, "pure": False,
                       "expect": 4 * MIB})
        c, s = r["client"], r["server"]
        tx = 1 + c["engine_tx_user_copy_bytes"] / max(1, c["engine_tx_payload_bytes"])
        rx = 1 + s["engine_rx_user_copy_bytes"] / max(1, s["engine_rx_payload_bytes"])
        print("\nzero copy: one 4 MiB WRITE into a registered numpy array")
        print(f"  bytes landed in the array: {r['landed']}; array at the same address: "
              f"{r['address_same']}")
        print(f"  copies per payload byte: send {tx:.3f} (kernel 1 + user "
              f"{tx - 1:.3f}), receive {rx:.3f} (kernel 1 + user {rx - 1:.3f}); native "
              f"packets: sent {c['engine_tx_native_packets']}, placed "
              f"{s['engine_rx_native_packets']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
