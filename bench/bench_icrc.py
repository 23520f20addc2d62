"""ICRC / CRC-32 throughput: native (PCLMULQDQ, slicing-by-8) vs pure Python vs zlib.

Run: ``python bench/bench_icrc.py [--quick]``. Prints GB/s per implementation
and, as the comparable figure, the ratio to zlib.crc32 measured in the same
run on the same machine. Two tables:

* CRC-32 over one buffer (the raw kernels; the Python reference is given
  fewer iterations because it is slow);
* the whole RoCEv2 ICRC of one packet (masking + CRC + the Python call), as
  ``netio.wire.icrc.compute_icrc`` does it, against masking in Python + zlib.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import zlib
from collections.abc import Callable
from ipaddress import IPv4Address

from netio import native
from netio.wire import icrc
from netio.wire.bth import Bth, Opcode
from netio.wire.packet import build_roce_ip_packet


def _rate_gbps(fn: Callable[[], object], nbytes: int, budget_s: float) -> float:
    """Bytes per second (in GB/s) of ``fn`` over ``nbytes``, best of 3 timed batches."""
    fn()
    calls = 1
    start = time.perf_counter()
    fn()
    one = max(time.perf_counter() - start, 1e-9)
    calls = max(1, int(budget_s / 3 / one))
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return nbytes / best / 1e9


def _zlib_icrc(packet: bytes) -> int:
    masked = bytearray(packet[:40])
    masked[1] = masked[8] = 0xFF
    masked[10] = masked[11] = masked[26] = masked[27] = masked[32] = 0xFF
    return zlib.crc32(memoryview(packet)[40:], zlib.crc32(b"\xff" * 8 + masked))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing budget")
    args = parser.parse_args()
    budget = 0.05 if args.quick else 0.3
    rng = random.Random(4791)
    lib = native.lib if native.AVAILABLE else None
    print(f"netio native: {'yes, ' + icrc.implementation() if lib else 'not built'}")

    sizes = [("64 B", 64), ("1 KiB", 1024), ("4 KiB", 4096), ("1 MiB", 1 << 20)]
    kernels: list[tuple[str, Callable[[bytes], object]]] = []
    if lib is not None:
        if lib.netio_crc32_pclmul_supported():
            kernels.append(("pclmul", lambda d: lib.netio_crc32_pclmul(0, d, len(d))))
        kernels.append(("slice8", lambda d: lib.netio_crc32_slice8(0, d, len(d))))
    kernels.append(("zlib", zlib.crc32))
    kernels.append(("python", icrc.crc32_reference))

    print("\nCRC-32 of one buffer: GB/s (ratio to zlib)")
    print(f"{'size':>8} " + " ".join(f"{name:>18}" for name, _ in kernels))
    for label, size in sizes:
        data = rng.randbytes(size)
        rates = {}
        for name, fn in kernels:
            b = budget / 10 if name == "python" else budget
            rates[name] = _rate_gbps(lambda fn=fn, data=data: fn(data), size, b)  # type: ignore[misc]
        cells = [f"{rates[n]:8.3f} ({rates[n] / rates['zlib']:6.2f}x)" for n, _ in kernels]
        print(f"{label:>8} " + " ".join(f"{c:>18}" for c in cells))

    print("\nRoCEv2 ICRC of one IPv4 packet (masking + CRC + call): GB/s (ratio to zlib)")
    impls: list[tuple[str, Callable[[bytes], object]]] = []
    if lib is not None:
        impls.append(("netio native", icrc.compute_icrc))
    impls.append(("python mask+zlib", _zlib_icrc))
    impls.append(("python reference", icrc.compute_icrc_reference))
    print(f"{'packet':>8} " + " ".join(f"{name:>18}" for name, _ in impls))
    for label, size in sizes[:3]:
        payload = rng.randbytes(size - 20 - 8 - 12 - 4)
        packet = build_roce_ip_packet(src_ip=IPv4Address("10.0.0.1"),
                                      dst_ip=IPv4Address("10.0.0.2"), src_port=49152,
                                      bth=Bth(Opcode.RC_SEND_ONLY, dest_qp=17), payload=payload)
        body = packet[:-4]
        rates = {}
        for name, fn in impls:
            if fn(body) != icrc.stored_icrc(packet):
                raise SystemExit(f"{name} computed a wrong ICRC")
            b = budget / 10 if name == "python reference" else budget
            rates[name] = _rate_gbps(lambda fn=fn, body=body: fn(body), len(body), b)  # type: ignore[misc]
        peer = rates["python mask+zlib"]
        cells = [f"{rates[n]:8.3f} ({rates[n] / peer:6.2f}x)" for n, _ in impls]
        print(f"{label:>8} " + " ".join(f"{c:>18}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
