"""Endpoints whose addresses the caller exchanges itself (as NIXL and Mooncake users
swap metadata): RC and UC connected with ``connect_to``, UD datagrams with a
destination per send. The expected GRH layout is the verbs rule for RoCEv2 over IPv4
(IBTA A17.4.5.2 as rxe implements it): 20 zero bytes, then the IPv4 header, then data.
"""

from __future__ import annotations

import asyncio
import ipaddress

import numpy as np
import pytest

import netio
from netio.backends.base import UdDest
from tests.api.conftest import soft_addresses

IBV_WC_SUCCESS = 0
IBV_WC_RECV = 128
GRH_BYTES = 40


def _pair() -> tuple[netio.Context, netio.Context, str, str]:
    a_ip, b_ip = soft_addresses()
    return (netio.open("soft", local_addr=a_ip, qkey=0x11111111),
            netio.open("soft", local_addr=b_ip, qkey=0x11111111), a_ip, b_ip)


@pytest.mark.parametrize("kind", ["rc", "uc"])
def test_connected_endpoints_from_exchanged_addresses(kind: str) -> None:
    async def main() -> None:
        a, b, a_ip, b_ip = _pair()
        async with a, b:
            ea = await a.endpoint(kind, peer=b_ip, psn=0xFFFFF0)  # wraps the 24-bit PSN
            eb = await b.endpoint(kind, peer=a_ip)
            assert ea.address.psn == 0xFFFFF0 and ea.address.gid == f"::ffff:{a_ip}"
            await ea.connect_to(eb.address, mtu_bytes=1024)
            await eb.connect_to(ea.address, mtu_bytes=1024)
            assert ea.path.mtu_bytes == eb.path.mtu_bytes == 1024
            target = np.zeros(20000, dtype=np.uint8)
            remote = netio.RemoteRegion.from_descriptor(b.register(target).descriptor())
            src = np.random.default_rng(1).integers(0, 256, 20000, dtype=np.uint8)
            local = a.register(src)
            await ea.write(local, remote.whole())
            inbox = bytearray(100)
            got = eb.recv(b.register(inbox))
            await ea.send(local[0:100], imm=5)
            c = await got
            assert (c.status, c.opcode, c.imm_data) == (IBV_WC_SUCCESS, IBV_WC_RECV, 5)
            assert np.array_equal(target, src) and inbox == src[:100].tobytes()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_path_mtu_mismatch_is_named_on_both_sides() -> None:
    """IBTA §9.7.4.1.6: first and middle packets carry exactly the path MTU, so a
    responder at 1024 refuses a sender at 4096 and can tell the sender's MTU."""
    async def main() -> None:
        a, b, a_ip, b_ip = _pair()
        async with a, b:
            ea = await a.endpoint("rc", peer=b_ip)
            eb = await b.endpoint("rc", peer=a_ip)
            await ea.connect_to(eb.address)  # 4096
            await eb.connect_to(ea.address, mtu_bytes=1024)
            waiting = eb.recv(b.register(bytearray(64)))
            remote = netio.RemoteRegion.from_descriptor(
                b.register(bytearray(10000)).descriptor())
            with pytest.raises(netio.RemoteInvalidRequest) as sender:
                await ea.write(a.register(bytearray(10000)), remote.whole())
            assert "path MTU" in sender.value.hint
            with pytest.raises(netio.FlushedError) as receiver:
                await waiting
            assert ("payload of 4096 bytes in a first packet, path MTU is 1024: the peers' "
                    "MTUs differ (local 1024, remote 4096)") in receiver.value.hint

    asyncio.run(asyncio.wait_for(main(), 30))


def test_single_packet_larger_than_the_path_mtu_is_named() -> None:
    async def main() -> None:
        a, b, a_ip, b_ip = _pair()
        async with a, b:
            ea = await a.endpoint("rc", peer=b_ip)
            eb = await b.endpoint("rc", peer=a_ip)
            await ea.connect_to(eb.address)  # 4096: 2000 bytes travel as one "only" packet
            await eb.connect_to(ea.address, mtu_bytes=1024)
            waiting = eb.recv(b.register(bytearray(4096)))
            with pytest.raises(netio.RemoteInvalidRequest):
                await ea.send(a.register(bytearray(2000)))
            with pytest.raises(netio.FlushedError) as receiver:  # refused before it was used
                await waiting
            assert ("payload of 2000 bytes in an only packet, path MTU is 1024: the peers' "
                    "MTUs differ (local 1024, remote at least 2000)") in receiver.value.hint

    asyncio.run(asyncio.wait_for(main(), 30))


def test_datagrams_carry_the_grh_first() -> None:
    async def main() -> None:
        a, b, a_ip, b_ip = _pair()
        async with a, b:
            ea = await a.endpoint("ud", peer=b_ip)
            eb = await b.endpoint("ud", peer=a_ip)
            inbox = bytearray(GRH_BYTES + 256)
            got = eb.recv(b.register(inbox))
            payload = bytes(range(200))
            dest = UdDest(eb.address.gid, eb.address.qpn, 0x11111111)
            await ea.send(a.register(bytearray(payload)), dest=dest)
            c = await got
            assert c.byte_len == GRH_BYTES + 200 and c.src_qp == ea.address.qpn
            assert inbox[:20] == bytes(20)
            ip = inbox[20:40]
            assert ip[0] == 0x45 and ip[9] == 17  # IPv4, 20-byte header, UDP
            assert ipaddress.IPv4Address(bytes(ip[12:16])) == ipaddress.IPv4Address(a_ip)
            assert ipaddress.IPv4Address(bytes(ip[16:20])) == ipaddress.IPv4Address(b_ip)
            assert inbox[40:240] == payload
            # a wrong Q_Key is dropped silently (IBTA §10.2.4): nothing arrives
            late = eb.recv(b.register(bytearray(GRH_BYTES + 16)))
            await ea.send(a.register(bytearray(8)),
                          dest=UdDest(eb.address.gid, eb.address.qpn, 0x22222222))
            await asyncio.sleep(0.2)
            assert not late.done()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_tcp_backend_says_it_is_rc_only() -> None:
    with netio.open("tcp") as ctx, pytest.raises(netio.NetioError, match="RC"):
        ctx.endpoint("ud").wait(5)


def test_unknown_endpoint_type_and_backend_option() -> None:
    with netio.open("tcp") as ctx, pytest.raises(netio.IoError, match="rc, uc, ud"):
        ctx.endpoint("rd")
    with pytest.raises(netio.IoError, match=r"faults.*tcp backend"):
        netio.open("tcp", faults=None)


def test_bad_gid_ends_in_retry_exceeded_naming_both_gids() -> None:
    """A peer address whose GID nobody answers for (a loopback address no context
    serves): every retry times out and the error names both GIDs and the settings."""
    async def main() -> None:
        a_ip, _ = soft_addresses()
        async with netio.open("soft", local_addr=a_ip, ack_timeout=8, retry_count=2) as a:
            ea = await a.endpoint("rc")
            nowhere = netio.backends.base.QpAddress("rocev2", "::ffff:127.0.254.254", 0x99,
                                                    0, 4096)
            await ea.connect_to(nowhere)
            remote = netio.RemoteRegion(0x1000, 0x1234, 64, "rocev2")
            with pytest.raises(netio.RetryExceeded) as info:
                await ea.write(a.register(bytearray(64)), remote.whole())
            assert info.value.status == 12  # IBV_WC_RETRY_EXC_ERR
            assert f"::ffff:{a_ip}" in info.value.hint
            assert "::ffff:127.0.254.254" in info.value.hint and "retry_count 2" in info.value.hint

    asyncio.run(asyncio.wait_for(main(), 30))


def test_gid_type_and_family_mismatches_are_named() -> None:
    from netio.api.context import gid_mismatch
    from netio.backends.base import QpAddress

    v2 = QpAddress("rocev2", "::ffff:10.0.0.1", 1, 0, 4096, 3, "RoCEv2")
    v1 = QpAddress("rocev2", "fe80::1", 2, 0, 4096, 0, "RoCEv1")
    v6 = QpAddress("rocev2", "fd00::2", 3, 0, 4096, 5, "RoCEv2")
    assert gid_mismatch(v2, v2) == ""
    assert gid_mismatch(v2, v1).startswith("GID type mismatch: the client's GID fe80::1 "
                                           "(index 0) is RoCEv1")
    assert gid_mismatch(v2, v6).startswith("address family mismatch: the client's GID "
                                           "fd00::2 is IPv6")
    tcp = QpAddress("tcp", "::", 1, 0, 4096, 0, "tcp")
    assert gid_mismatch(tcp, tcp) == ""
