"""The soft driver with UDP GRO on its UDP receive socket, over loopback.

Issue 9's lossy-link failure with GRO on (RETRY_EXC_ERR, the receiver "stopped being
called with data waiting"): the drain loop took a receive of fewer than ``nslots``
(64) datagrams to mean that the socket was empty. A GRO receive offered one message per
64 KiB region, nine of the ring's 64 x 9216 bytes, so without coalescing (loopback
without GSO, and every retransmission through the lossy link) it yielded nine
datagrams: the driver took nine per readable event where it takes up to 256 without
GRO, fell behind a peer retransmitting its window every ACK timeout, and the peer ran
out of retries. The driver now asks the ring whether recvmmsg filled every message (and
a GRO ring now has a 64 KiB region per slot).
"""

from __future__ import annotations

import asyncio
import random
import select
import socket
import time

import pytest
from test_soft_driver import _collect, _loopback_pair, connected

from netio import native
from netio.backends.soft import RxMode, SoftRoceDriver
from netio.backends.soft.sockets import OffloadMode
from netio.roce import SendWr, WcStatus, WrOpcode

pytestmark = pytest.mark.skipif(native.lib is None, reason="needs the native module")

#: datagrams one readable event takes at most (the driver's batch limit, 256), less some
_BURST = 200


@pytest.mark.parametrize("gro", [OffloadMode.OFF, OffloadMode.ON])
def test_one_readable_event_drains_a_burst_as_without_gro(gro: OffloadMode) -> None:
    """200 datagrams wait on the driver's UDP socket: one readable event takes them all,
    GRO or not (before the fix: 9 with GRO)."""
    async def main() -> None:
        ip, _ = _loopback_pair()
        driver = await SoftRoceDriver.open(ip, rx_mode=RxMode.UDP, gro=gro)
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            assert driver.gro is (gro is OffloadMode.ON), driver.gro_reason
            sender.bind(("127.0.0.1", 0))
            for k in range(_BURST):  # not RoCE: each is counted, then dropped
                sender.sendto(bytes([k & 0xFF]) * 64, (str(ip), 4791))
            udp = driver._udp_sock
            assert udp is not None and select.select([udp], [], [], 2.0)[0]
            time.sleep(0.01)  # loopback delivers in sendto; margin for a busy host
            # No await since the sends: the loop has not read any of them. One readable
            # event, as the loop would deliver it:
            driver._on_readable()
            assert driver.stats.datagrams_received == _BURST
        finally:
            sender.close()
            await driver.close()

    asyncio.run(main())


@pytest.mark.parametrize("gso", [OffloadMode.OFF, OffloadMode.ON])
def test_copies_per_byte_are_the_same_with_gro(gso: OffloadMode) -> None:
    """A 1 MiB WRITE at MTU 4096 is 256 packets: the FIRST (RETH, 4096 bytes) and the LAST
    (4096) go to the reference path, which counts three user copies of each payload byte
    (bytes() of the datagram, decode's slice, the placement: netio/roce/engine.py), and
    the 254 MIDDLEs are placed in C from the ring (one copy). So the receiver's user
    copies are 3 * 8192 + 254 * 4096 bytes for 1 MiB, GRO or not: the split is in place.
    With GSO the sender's MIDDLEs arrive as coalesced buffers on the GRO socket."""
    mib = 1 << 20
    expect_user = 3 * 2 * 4096 + 254 * 4096
    seen: dict[OffloadMode, tuple[int, int, int]] = {}

    async def main(gro: OffloadMode) -> None:
        # timeout 18 (about 1 s): no retransmission on a busy host, so no duplicate counted
        async with connected(rx_mode=RxMode.UDP, gso=gso, gro=gro, buf_bytes=2 * mib,
                             path_mtu_bytes=4096, timeout=18) as (a, b):
            a.buf[0:mib] = random.Random(7).randbytes(mib)
            a.driver.post_send(a.qp, SendWr(1, WrOpcode.RDMA_WRITE, (a.mr.sge(0, mib),),
                                            remote_addr=b.mr.addr, rkey=b.mr.rkey))
            (c,) = await _collect(a, 1)
            assert c.status is WcStatus.SUCCESS
            assert b.buf[0:mib] == a.buf[0:mib]
            ring = b.driver._ring
            assert ring is not None and b.driver.gro is (gro is OffloadMode.ON)
            s = b.driver.engine.stats
            seen[gro] = (s.rx_payload_bytes, s.rx_user_copy_bytes, ring.coalesced)

    for gro in (OffloadMode.OFF, OffloadMode.ON):
        asyncio.run(main(gro))
    assert seen[OffloadMode.OFF][:2] == seen[OffloadMode.ON][:2] == (mib, expect_user)
    coalesced = seen[OffloadMode.ON][2]
    # loopback runs no GRO engine: only a GSO send arrives coalesced
    assert (coalesced > 0) is (gso is OffloadMode.ON)
    assert seen[OffloadMode.OFF][2] == 0


def test_gro_is_auto_by_default_on_with_udp_receive_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, GRO is ``auto``: on where the driver receives on a UDP socket (the ring
    splits what coalesces), off with a raw socket (GRO is for UDP sockets); ``off`` and
    $NETIO_SOFT_GRO=off mean off."""
    monkeypatch.delenv("NETIO_SOFT_GRO", raising=False)

    async def main() -> None:
        ip, _ = _loopback_pair()
        cases: list[tuple[RxMode, OffloadMode | None, bool | None]] = [
            (RxMode.UDP, None, True), (RxMode.UDP, OffloadMode.OFF, False),
            (RxMode.AUTO, None, None)]
        for rx_mode, gro, want in cases:
            driver = await SoftRoceDriver.open(ip, rx_mode=rx_mode, gro=gro)
            try:
                expect = want if want is not None else driver.rx_mode is RxMode.UDP
                assert driver.gro is expect, driver.gro_reason
            finally:
                await driver.close()
        monkeypatch.setenv("NETIO_SOFT_GRO", "off")
        driver = await SoftRoceDriver.open(ip, rx_mode=RxMode.UDP)
        try:
            assert (driver.gro, driver.gro_reason) == (False, "off")
        finally:
            await driver.close()

    asyncio.run(main())
