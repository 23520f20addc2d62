"""Soft RoCE engine alone: two in-memory RoceEngines, no sockets, one core.

Run: ``python bench/bench_engine.py [--quick] [--mtu 4096] [--json]``.

For RC RDMA WRITE and RC SEND at 64 B, 4 KiB and 1 MiB messages it prints the packets
per second both engines process together (requests + acknowledgements, all in this one
process), messages per second and payload Gb/s. The peer measured in the same run is
the bare wire codec on the same packets: ``decode_roce`` + ICRC check on receive and
``build_roce_udp_payload`` on send, which is the least any engine built on netio.wire
must do per packet. The ratio engine/codec says what the protocol machinery costs on top.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import time
from dataclasses import dataclass

from netio.roce import Access, OutgoingDatagram, RecvWr, SendWr, WcStatus, WrOpcode
from netio.roce.engine import udp_payload_icrc_ok
from netio.roce.sim import connected_pair
from netio.wire.ext import Aeth, Reth
from netio.wire.packet import build_roce_udp_payload, decode_roce

SIZES = {"64B": 64, "4KiB": 4096, "1MiB": 1 << 20}
DEPTH = 64  # outstanding work requests


@dataclass(frozen=True, slots=True)
class Result:
    op: str
    size: str
    messages: int
    packets: int
    seconds: float
    codec_packets_per_s: float

    @property
    def packets_per_s(self) -> float:
        return self.packets / self.seconds

    @property
    def payload_gbps(self) -> float:
        return self.messages * SIZES[self.size] * 8 / self.seconds / 1e9


def run_engine(op: WrOpcode, size: int, mtu: int, budget_s: float) -> tuple[int, int, float,
                                                                            list[bytes]]:
    """(messages, packets, seconds, a sample of the datagrams) for one workload."""
    _pair, a, b = connected_pair(path_mtu_bytes=mtu)
    src = bytearray(b"\x5a" * size)
    dst = bytearray(size * (DEPTH if op is WrOpcode.SEND else 1))
    mr = a.pd.register(src, Access.LOCAL_WRITE)
    rmr = b.pd.register(dst, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    ip_a, ip_b = a.engine.local_ip, b.engine.local_ip
    send = a.qp.post_send
    recv_sges = [rmr.sge(i * size, size) for i in range(DEPTH)] if op is WrOpcode.SEND else []
    if op is WrOpcode.SEND:
        for i in range(DEPTH):
            b.qp.post_recv(RecvWr(i, (recv_sges[i],)))
    sample: list[bytes] = []
    posted = done = packets = 0
    start = time.perf_counter()
    deadline = start + budget_s
    now = 0
    while True:
        while posted - done < DEPTH:
            send(SendWr(posted, op, (mr.sge(),), remote_addr=rmr.addr, rkey=rmr.rkey))
            posted += 1
        now += 1000
        out: list[OutgoingDatagram] = a.engine.datagrams_to_send(now)
        for d in out:
            b.engine.receive_datagram(d.payload, ip_a, now, d.src_udp_port)
        back = b.engine.datagrams_to_send(now)
        for d in back:
            a.engine.receive_datagram(d.payload, ip_b, now, d.src_udp_port)
        packets += len(out) + len(back)
        if len(sample) < 512:
            sample.extend(d.payload for d in out[:64])
            sample.extend(d.payload for d in back[:8])
        for wc in a.cq.poll(DEPTH):
            if wc.status is not WcStatus.SUCCESS:
                raise RuntimeError(f"work request failed: {wc}")
            done += 1
        if op is WrOpcode.SEND:
            for wc in b.cq.poll(DEPTH):
                b.qp.post_recv(RecvWr(wc.wr_id, (recv_sges[wc.wr_id],)))
        if time.perf_counter() > deadline and done:
            break
    return done, packets, time.perf_counter() - start, sample


def run_codec(sample: list[bytes], budget_s: float) -> float:
    """Packets per second of decode + ICRC check + re-encode of the same datagrams."""
    src, dst = "10.0.0.1", "10.0.0.2"
    n = 0
    start = time.perf_counter()
    deadline = start + budget_s
    src_ip, dst_ip = ipaddress.IPv4Address(src), ipaddress.IPv4Address(dst)
    while time.perf_counter() < deadline:
        for payload in sample:
            hdrs, body, _icrc = decode_roce(payload)
            udp_payload_icrc_ok(payload, src_ip, dst_ip, 0xC000)
            reth: Reth | None = hdrs.reth
            aeth: Aeth | None = hdrs.aeth
            build_roce_udp_payload(src_ip=src, dst_ip=dst, src_port=0xC000, bth=hdrs.bth,
                                   reth=reth, aeth=aeth, imm_dt=hdrs.imm_dt, payload=body)
        n += len(sample)
    return n / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    parser.add_argument("--mtu", type=int, default=4096, choices=(256, 512, 1024, 2048, 4096))
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    budget = 0.3 if args.quick else 2.0
    results = []
    for op_name, op in (("WRITE", WrOpcode.RDMA_WRITE), ("SEND", WrOpcode.SEND)):
        for size_name, size in SIZES.items():
            messages, packets, seconds, sample = run_engine(op, size, args.mtu, budget)
            codec = run_codec(sample, budget / 2)
            results.append(Result(op_name, size_name, messages, packets, seconds, codec))
    if args.json:
        json.dump({"mtu_bytes": args.mtu, "results": [
            {"op": r.op, "size": r.size, "messages": r.messages, "packets": r.packets,
             "seconds": r.seconds, "packets_per_s": r.packets_per_s,
             "payload_gbps": r.payload_gbps, "codec_packets_per_s": r.codec_packets_per_s,
             "engine_to_codec_ratio": r.packets_per_s / r.codec_packets_per_s}
            for r in results]}, sys.stdout, indent=2)
        print()
        return 0
    print(f"two in-memory engines, one core, path MTU {args.mtu} B, {DEPTH} WRs outstanding")
    print(f"{'op':6} {'size':>5} {'msgs/s':>10} {'pkts/s':>10} {'payload Gb/s':>13} "
          f"{'codec pkts/s':>13} {'engine/codec':>13}")
    for r in results:
        print(f"{r.op:6} {r.size:>5} {r.messages / r.seconds:>10.0f} {r.packets_per_s:>10.0f} "
              f"{r.payload_gbps:>13.3f} {r.codec_packets_per_s:>13.0f} "
              f"{r.packets_per_s / r.codec_packets_per_s:>13.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
