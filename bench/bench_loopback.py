"""Soft RoCE over loopback, two processes: RC WRITE bandwidth and SEND message
rate at 64 B, 4 KiB and 1 MiB, against plain UDP between two processes with
the same datagram sizes, measured in the same run, as the ceiling.

Run: ``python bench/bench_loopback.py [--quick]`` (needs two free 127/8
addresses and UDP 4791 on them; root or CAP_NET_RAW gives the raw-socket
receive path, otherwise the UDP one is used).

Each netio figure comes from ``netio perftest`` (the library, one process per
side, path MTU 4096): the client's own measurement from its first post to its
last completion. The ceiling sends the datagrams the soft engine sends for
that message size (the payload of one packet plus BTH, RETH for WRITE, and
ICRC; 1 MiB messages travel as 4 KiB packets) from one process to another
through a plain UDP socket, and measures at the receiver. Printed: MiB/s of
message data and messages (or datagrams) per second, and the netio/UDP ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import multiprocessing as mp
import random
import socket
import sys
import time
from typing import Any

from netio.interop.perftest import PerftestConfig, PerftestListener, PerftestVerb, run_perftest

MTU_BYTES = 4096
BTH_BYTES, RETH_BYTES, ICRC_BYTES = 12, 16, 4
MIB = 1 << 20
SIZES = (64, 4096, 1 << 20)


def _addresses() -> tuple[str, str]:
    base = random.SystemRandom().randrange(1 << 16) << 8
    return (str(ipaddress.IPv4Address((127 << 24) | base | 1)),
            str(ipaddress.IPv4Address((127 << 24) | base | 2)))


# -- netio perftest, one process per side ----------------------------------------------------


def _perftest_server(verb: str, size: int, iters: int, ip: str, port_q: Any, out_q: Any) -> None:
    async def main() -> None:
        listener = PerftestListener()
        await listener.listen(ip, 0)
        port_q.put(listener.port)
        cfg = PerftestConfig(verb=PerftestVerb(verb), size_bytes=size, iters=iters,
                             mtu_bytes=MTU_BYTES, local_ip=ipaddress.IPv4Address(ip),
                             rx_depth=512, timeout_s=60.0)
        result = await run_perftest(cfg, listener=listener)
        await listener.close()
        out_q.put(("server", result.report.bw_avg, result.report.msg_rate_mpps))

    asyncio.run(main())


def _perftest_client(verb: str, size: int, iters: int, ip: str, server_ip: str, port: int,
                     out_q: Any) -> None:
    cfg = PerftestConfig(verb=PerftestVerb(verb), server=server_ip, port=port, size_bytes=size,
                         iters=iters, mtu_bytes=MTU_BYTES, local_ip=ipaddress.IPv4Address(ip),
                         tx_depth=128, timeout_s=60.0)
    result = asyncio.run(run_perftest(cfg))
    out_q.put(("client", result.report.bw_avg, result.report.msg_rate_mpps))


def netio_run(verb: str, size: int, iters: int) -> tuple[float, float]:
    """(MiB/s, messages/s) of a two-process netio perftest run, as the client measured."""
    ctx = mp.get_context("spawn")
    server_ip, client_ip = _addresses()
    port_q, out_q = ctx.Queue(), ctx.Queue()
    server = ctx.Process(target=_perftest_server,
                         args=(verb, size, iters, server_ip, port_q, out_q))
    server.start()
    port = port_q.get(timeout=60)
    client = ctx.Process(target=_perftest_client,
                         args=(verb, size, iters, client_ip, server_ip, port, out_q))
    client.start()
    results = {}
    for _ in range(2):
        side, mib_s, mpps = out_q.get(timeout=600)
        results[side] = (mib_s, mpps * 1e6)
    client.join(60)
    server.join(60)
    return results["client"]


# -- the UDP ceiling -------------------------------------------------------------------------


def _udp_receiver(ip: str, port_q: Any, out_q: Any, count: int, datagram_bytes: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((ip, 0))
    port_q.put(sock.getsockname()[1])
    buf = bytearray(65536)
    sock.settimeout(5.0)
    got = 0
    first = last = 0.0
    try:
        while got < count:
            n = sock.recv_into(buf)
            last = time.perf_counter()
            if got == 0:
                first = last
            if n == datagram_bytes:
                got += 1
    except TimeoutError:
        pass  # the sender is done and some datagrams were lost; measure what came
    out_q.put((got, last - first))


def udp_run(datagram_bytes: int, count: int) -> tuple[float, float]:
    """(datagrams/s, payload MiB/s) received from a blasting sender process."""
    ctx = mp.get_context("spawn")
    rx_ip, tx_ip = _addresses()
    port_q, out_q = ctx.Queue(), ctx.Queue()
    receiver = ctx.Process(target=_udp_receiver, args=(rx_ip, port_q, out_q, count,
                                                       datagram_bytes))
    receiver.start()
    port = port_q.get(timeout=60)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind((tx_ip, 0))
    payload = bytes(datagram_bytes)
    dest = (rx_ip, port)
    for _ in range(count):
        while True:
            try:
                sender.sendto(payload, dest)
                break
            except BlockingIOError:
                time.sleep(0)
    got, duration_s = out_q.get(timeout=120)
    receiver.join(30)
    sender.close()
    if got < 2 or duration_s <= 0:
        return 0.0, 0.0
    rate = (got - 1) / duration_s
    return rate, rate * datagram_bytes / MIB


def _datagram_bytes(verb: str, size: int) -> int:
    """The UDP payload of the soft engine's packets for one message of ``size``
    bytes (its steady-state packet: WRITE_ONLY/FIRST carry a RETH; 1 MiB is
    mostly MIDDLE packets of one MTU)."""
    data = min(size, MTU_BYTES)
    reth = RETH_BYTES if verb == "write" and size <= MTU_BYTES else 0
    return BTH_BYTES + reth + -(-data // 4) * 4 + ICRC_BYTES


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    netio_iters = {64: 4000, 4096: 3000, 1 << 20: 16}
    udp_count = {64: 100_000, 4096: 40_000, 1 << 20: 40_000}
    print(f"soft RoCE over loopback, two processes, path MTU {MTU_BYTES}; ceiling: plain UDP "
          "between two processes, same datagram sizes, same run")
    header = (f"{'test':<6} {'size':>8} {'netio MiB/s':>12} {'netio msg/s':>12} "
              f"{'UDP MiB/s':>10} {'UDP msg/s':>11} {'ratio':>7}")
    print(header)
    print("-" * len(header))
    for verb in ("write", "send"):
        for size in SIZES:
            iters = max(4, int(netio_iters[size] * scale))
            mib_s, msg_s = netio_run(verb, size, iters)
            dgram = _datagram_bytes(verb, size)
            dgram_s, _ = udp_run(dgram, max(1000, int(udp_count[size] * scale)))
            packets_per_msg = -(-size // MTU_BYTES)
            udp_msg_s = dgram_s / packets_per_msg
            udp_mib_s = dgram_s * min(size, MTU_BYTES) / MIB
            # WRITE is a bandwidth test, SEND a message-rate test: the ratio says which
            ratio = mib_s / udp_mib_s if verb == "write" else msg_s / udp_msg_s
            print(f"{verb:<6} {size:>8} {mib_s:>12.2f} {msg_s:>12.0f} {udp_mib_s:>10.2f} "
                  f"{udp_msg_s:>11.0f} {ratio:>7.3f}", flush=True)
    print("ratio: netio / UDP, of MiB/s for write and of messages/s for send")
    return 0


if __name__ == "__main__":
    sys.exit(main())
