"""RC, UC and UD endpoints by exchanged address (``Context.endpoint`` + ``connect_to``) over
the verbs backend, both contexts in one guest process on its rxe0. Mirrors
tests/api/test_endpoints_by_address.py (which runs on soft) with the expectations
written out here: the GRH of a UD receive is the verbs rule for RoCEv2 over IPv4 (20
zero bytes, then the IPv4 header), a wrong Q_Key is dropped silently (IBTA 10.2.4),
UC has no READ (IBTA 9.4). Prints CHECK lines; exit 0 when all passed.

    python3 verbs_endpoints_guest.py GUEST_IP
"""

from __future__ import annotations

import asyncio
import ipaddress
import sys
from typing import Any

import numpy as np

import netio
from netio.backends.base import UdDest

FAILED: list[str] = []
GRH_BYTES = 40


def check(name: str, ok: bool, detail: Any = "") -> None:
    print(f"CHECK {'ok' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        FAILED.append(name)


async def connected(ip: str, kind: str) -> None:
    async with netio.open("verbs") as a, netio.open("verbs") as b:
        ea = await a.endpoint(kind, peer=ip, psn=0xFFFFF0)  # the 24-bit PSN wraps
        eb = await b.endpoint(kind, peer=ip)
        check(f"{kind}: the endpoint's address is the guest's RoCEv2 GID and the given PSN",
              ea.address.psn == 0xFFFFF0 and ea.address.gid == f"::ffff:{ip}", ea.address)
        await ea.connect_to(eb.address, mtu_bytes=1024)
        await eb.connect_to(ea.address, mtu_bytes=1024)
        target = np.zeros(20000, dtype=np.uint8)
        remote = netio.RemoteRegion.from_descriptor(b.register(target).descriptor())
        src = np.random.default_rng(1).integers(0, 256, 20000, dtype=np.uint8)
        local = a.register(src)
        await ea.write(local, remote.whole())
        inbox = bytearray(100)
        got = eb.recv(b.register(inbox))
        await ea.send(local[0:100], imm=5)
        c = await got
        check(f"{kind}: WRITE lands in place, SEND with imm arrives",
              (int(c.status), int(c.opcode), c.imm_data) == (0, 128, 5)
              and bool(np.array_equal(target, src)) and inbox == src[:100].tobytes(), c)
        if kind == "uc":
            try:
                await ea.read(a.register(bytearray(8)), remote[0:8])
                check("uc: READ is refused (IBTA 9.4: UC has no READ)", False, "completed")
            except netio.NetioError as exc:
                check("uc: READ is refused (IBTA 9.4: UC has no READ)", "UC" in str(exc), exc)


async def datagrams(ip: str) -> None:
    async with netio.open("verbs") as a, netio.open("verbs") as b:
        ea = await a.endpoint("ud", peer=ip)
        eb = await b.endpoint("ud", peer=ip)
        inbox = bytearray(GRH_BYTES + 256)
        got = eb.recv(b.register(inbox))
        payload = bytes(range(200))
        await ea.send(a.register(bytearray(payload)), dest=UdDest(eb.address.gid,
                                                                  eb.address.qpn, 0))
        c = await got
        ip_hdr = inbox[20:40]
        check("ud: the receive holds the 40-byte GRH, then the payload",
              c.byte_len == GRH_BYTES + 200 and c.src_qp == ea.address.qpn
              and inbox[:20] == bytes(20) and ip_hdr[0] == 0x45 and ip_hdr[9] == 17
              and ipaddress.IPv4Address(bytes(ip_hdr[12:16])) == ipaddress.IPv4Address(ip)
              and ipaddress.IPv4Address(bytes(ip_hdr[16:20])) == ipaddress.IPv4Address(ip)
              and inbox[40:240] == payload, c)
        late = eb.recv(b.register(bytearray(GRH_BYTES + 16)))
        await ea.send(a.register(bytearray(8)), dest=UdDest(eb.address.gid, eb.address.qpn,
                                                             0x22222222))
        await asyncio.sleep(0.5)
        check("ud: a datagram with a wrong Q_Key is dropped silently", not late.done())
        await eb.aclose()
        try:
            await late
            check("ud: the receive left posted is flushed at close", False, "completed")
        except netio.FlushedError:
            check("ud: the receive left posted is flushed at close", True)


def main() -> int:
    ip = sys.argv[1]
    for name, coro in (("rc", connected(ip, "rc")), ("uc", connected(ip, "uc")),
                       ("ud", datagrams(ip))):
        try:
            asyncio.run(asyncio.wait_for(coro, 120))
        except Exception as exc:
            import traceback

            traceback.print_exc()
            check(f"{name} ran to the end", False, f"{type(exc).__name__}: {exc}")
    print(f"SUMMARY failed={len(FAILED)} {FAILED}", flush=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
