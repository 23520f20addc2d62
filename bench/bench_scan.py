"""Capture reading speed: netio's native scanner and streaming reader against tcpdump and dpkt.

Writes a capture of RoCEv2-sized frames with ``PcapWriter`` (default one
million packets: 1024-byte-MTU RDMA WRITE segments, 4096-byte-MTU segments and
ACKs), then times, in this run and on this machine, each reader going through
every packet of the same file (the page cache is warm after the first pass;
the best of ``--repeat`` passes counts):

* netio native scan: ``scan_capture`` (mmap + C scanner into numpy columns);
* netio window scan: ``WindowScanner`` (the same C scanner over a reused 2 MiB
  read() window, 8192-record batches: what ``netio-analyze`` reads with);
* netio streaming reader: ``open_capture``, one ``Record`` per packet;
* ``tcpdump -r FILE -w /dev/null`` ("tcpdump copy": reads every record and
  writes it back out without decoding: like for like with a scan);
* ``tcpdump -r FILE -nn > /dev/null`` ("tcpdump decode+print": decodes and
  prints every packet, far more work than a scan: labelled, not a like-for-like
  peer);
* dpkt's ``pcap.Reader`` (timestamp and bytes per packet).

Prints packets/s and the ratios between them. Usage:
``bench/bench_scan.py [--packets N] [--repeat R] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import dpkt

from netio.pcap import PcapWriter, ScanColumns, WindowScanner, open_capture, scan_capture

# (frame bytes, share): RoCEv2 over IPv4 = 14 Ethernet + 20 IPv4 + 8 UDP + 12 BTH,
# + 16 RETH on first segments, payload, 4 ICRC.
FRAME_MIX = (
    (14 + 20 + 8 + 12 + 1024 + 4, 0.55),  # RDMA WRITE middle, path MTU 1024
    (14 + 20 + 8 + 12 + 16 + 1024 + 4, 0.05),  # RDMA WRITE first (RETH)
    (14 + 20 + 8 + 12 + 4096 + 4, 0.15),  # path MTU 4096
    (14 + 20 + 8 + 12 + 4 + 4, 0.25),  # ACK (AETH)
)


def _frame(size: int, seq: int) -> bytes:
    eth = bytes.fromhex("525400770002525400770001") + b"\x08\x00"
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0x02, size - 14, seq & 0xFFFF, 0x4000, 64, 17, 0,
                     bytes([10, 77, 0, 11]), bytes([10, 77, 0, 10]))
    udp = struct.pack(">HHHH", 49152 + seq % 64, 4791, size - 34, 0)
    bth = struct.pack(">BBHI I", 0x07, 0x40, 0xFFFF, 0x11, seq & 0xFFFFFF)
    head = eth + ip + udp + bth
    return head + bytes((seq + i) & 0xFF for i in range(size - len(head)))


def write_capture(path: Path, packets: int, seed: int = 1) -> int:
    rng = random.Random(seed)
    sizes = [size for size, _ in FRAME_MIX]
    weights = [share for _, share in FRAME_MIX]
    templates = {size: [_frame(size, s) for s in range(8)] for size in sizes}
    ts_ns = 1_796_052_305_000_000_000
    with PcapWriter(path) as writer:
        for seq in range(packets):
            size = rng.choices(sizes, weights)[0]
            ts_ns += 80 + (size * 8 * 10 // 1000)  # ~100 Gb/s line rate plus a gap
            writer.write(ts_ns, templates[size][seq % 8])
    return path.stat().st_size


def _native(path: Path) -> int:
    with scan_capture(path) as result:
        return len(result)


def _window(path: Path) -> int:
    out = ScanColumns.empty(8192)
    count = 0
    with WindowScanner(path) as scanner:
        while n := scanner.next_batch(out):
            count += n
    return count


def _streaming(path: Path) -> int:
    with open_capture(path, strict=True) as reader:
        return sum(1 for _ in reader)


def _dpkt(path: Path) -> int:
    with path.open("rb") as file:
        return sum(1 for _ in dpkt.pcap.Reader(file))


def _tcpdump(path: Path) -> int:
    tool = shutil.which("tcpdump")
    if tool is None:
        raise SystemExit("tcpdump is required (Debian package tcpdump)")
    with subprocess.Popen([tool, "-r", str(path), "-nn"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        lines = sum(1 for _ in proc.stdout)
    if proc.returncode != 0:
        raise SystemExit(f"tcpdump exited with {proc.returncode}")
    return lines


def _tcpdump_devnull(path: Path) -> int | None:
    tool = shutil.which("tcpdump")
    if tool is None:
        raise SystemExit("tcpdump is required (Debian package tcpdump)")
    subprocess.run([tool, "-r", str(path), "-nn"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    return None  # counted once by _tcpdump


def _tcpdump_copy(path: Path) -> int | None:
    tool = shutil.which("tcpdump")
    if tool is None:
        raise SystemExit("tcpdump is required (Debian package tcpdump)")
    subprocess.run([tool, "-r", str(path), "-w", "/dev/null"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    return None  # counted once by _tcpdump


def best_rate(fn: Callable[[Path], int | None], path: Path, packets: int, repeat: int) -> float:
    best_s = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        count = fn(path)
        elapsed_s = time.perf_counter() - start
        if count is not None and count != packets:
            raise SystemExit(f"{fn.__name__} saw {count} packets, expected {packets}")
        best_s = min(best_s, elapsed_s)
    return packets / best_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packets", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="netio-bench-") as tmp:
        path = Path(tmp) / "bench.pcap"
        start = time.perf_counter()
        size_bytes = write_capture(path, args.packets)
        write_s = time.perf_counter() - start
        # tcpdump once through a pipe to check it sees every packet (one line each)
        if _tcpdump(path) != args.packets:
            raise SystemExit("tcpdump printed an unexpected number of lines")
        rates = {
            "netio_native_scan": best_rate(_native, path, args.packets, args.repeat),
            "netio_window_scan": best_rate(_window, path, args.packets, args.repeat),
            "netio_streaming": best_rate(_streaming, path, args.packets, args.repeat),
            "tcpdump_copy": best_rate(_tcpdump_copy, path, args.packets, args.repeat),
            "tcpdump_decode_print": best_rate(_tcpdump_devnull, path, args.packets,
                                              args.repeat),
            "dpkt": best_rate(_dpkt, path, args.packets, args.repeat),
        }
    result = {
        "packets": args.packets,
        "file_bytes": size_bytes,
        "write_packets_per_s": args.packets / write_s,
        "packets_per_s": rates,
        "ratios": {
            "native_vs_tcpdump_copy": rates["netio_native_scan"] / rates["tcpdump_copy"],
            "native_vs_tcpdump_decode_print": (rates["netio_native_scan"]
                                               / rates["tcpdump_decode_print"]),
            "native_vs_dpkt": rates["netio_native_scan"] / rates["dpkt"],
            "window_vs_native": rates["netio_window_scan"] / rates["netio_native_scan"],
            "streaming_vs_tcpdump_copy": rates["netio_streaming"] / rates["tcpdump_copy"],
            "streaming_vs_dpkt": rates["netio_streaming"] / rates["dpkt"],
        },
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print(f"capture: {args.packets} packets, {size_bytes / 2**20:.0f} MiB "
          f"(written by PcapWriter at {result['write_packets_per_s'] / 1e6:.2f} M packets/s)")
    print("(tcpdump copy reads and rewrites records, like a scan; tcpdump decode+print also "
          "decodes and prints every packet: more work, shown for reference)")
    print(f"{'reader':<22}{'packets/s':>14}{'vs tcpdump copy':>17}{'vs dpkt':>10}")
    for name, rate in rates.items():
        print(f"{name:<22}{rate:>14,.0f}{rate / rates['tcpdump_copy']:>16.1f}x"
              f"{rate / rates['dpkt']:>9.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
