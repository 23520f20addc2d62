"""UDP GSO on the native send path: the datagrams a UDP receiver gets are the same bytes.

The same native runs (messages built by the C path, iovecs into registered memory) are
sent over loopback once with ``sendmmsg`` (one datagram per packet) and once with UDP GSO
(``UDP_SEGMENT``: each run of equal-size packets as one send the kernel cuts back into
datagrams). A UDP socket must receive exactly the packets the run holds, in order, both
times. Where a raw socket can be opened, it shows that GSO really went out as
super-packets: over loopback a raw IPv4 socket sees the unsegmented GSO packet, so a
message of FIRST (with RETH) + equal MIDDLEs + a shorter LAST is two IP packets with GSO
(the FIRST alone; MIDDLEs and the LAST together, the kernel allowing only the last
segment to be shorter, udp_send_skb) and one per datagram without. On receive, a ring
on a ``UDP_GRO`` socket splits the coalesced buffers back into the same datagrams.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import struct
import zlib

import pytest

from netio import native
from netio.roce import Access, SendWr, WrOpcode
from netio.roce.engine import OutgoingRun
from netio.roce.native_path import UDP_GRO, RxRing
from netio.roce.sim import connected_pair

pytestmark = pytest.mark.skipif(native.lib is None, reason="needs the native module")

_DST = "127.77.9.1"  # a loopback address no other test binds, port 4791 free there


def _runs(opcode: WrOpcode, length: int, mtu: int, psn: int) -> list[OutgoingRun]:
    _pair, a, _b = connected_pair(native=True, path_mtu_bytes=mtu, psn_a=psn)
    data = bytes((7 * i + 3) & 0xFF for i in range(length))
    mr = a.pd.register(bytearray(data), Access.NONE)
    imm = 0xABCD0123 if opcode in (WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_WRITE_WITH_IMM) else None
    a.qp.post_send(SendWr(1, opcode, (mr.sge(),), 0x1000, 0x55, imm))
    out = a.engine.output_to_send(0)
    runs = [d for d in out if isinstance(d, OutgoingRun)]
    assert runs and len(runs) == len(out)
    runs[0].run._keep.append((a, mr))  # the memory the iovecs point into
    return runs


def _receiver() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((_DST, 4791))
    return sock


def _raw() -> socket.socket | None:
    try:
        return socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    except PermissionError:
        return None


def _drain(sock: socket.socket, want: int | None) -> list[bytes]:
    got: list[bytes] = []
    while want is None or len(got) < want:
        ready, _, _ = select.select([sock], [], [], 0.5 if want is not None else 0.05)
        if not ready:
            break
        got.append(sock.recv(70000))
    return got


def _send(runs: list[OutgoingRun], gso: bool, sender: socket.socket) -> None:
    dst = int(ipaddress.IPv4Address(_DST))
    for r in runs:
        start = 0
        while start < r.run.count:
            n = r.run.send(sender.fileno(), dst, start, gso=gso)
            assert n > 0, f"send failed: errno {-n}"
            start += n


@pytest.mark.parametrize(("opcode", "length", "mtu"), [
    (WrOpcode.RDMA_WRITE, 5 * 1024 + 300, 1024),  # FIRST+RETH, 4 MIDDLE, shorter LAST
    (WrOpcode.RDMA_WRITE_WITH_IMM, 8 * 4096, 4096),  # LAST+ImmDt longer than a MIDDLE
    (WrOpcode.SEND, 100 * 256 + 1, 256),  # 101 packets: GSO groups cut at 64 segments
    (WrOpcode.SEND_WITH_IMM, 40, 1024),  # ONLY: nothing to group
])
def test_gso_sends_the_same_datagrams_as_sendmmsg(opcode: WrOpcode, length: int,
                                                   mtu: int) -> None:
    runs = _runs(opcode, length, mtu, psn=0xFFFFF0)
    expect = [p for r in runs for p in r.run.packets()]
    sport = runs[0].src_udp_port
    rx = _receiver()
    raw = _raw()
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sender.bind(("127.0.0.1", 0))
        ip_packets: dict[bool, int] = {}
        for gso in (False, True):
            if raw is not None:
                _drain(raw, None)
            _send(runs, gso, sender)
            got = _drain(rx, len(expect))
            assert len(got) == len(expect), f"gso={gso}"
            # The kernel numbers the segments of a GSO send with IPv4 IDs 0, 1, ...; the
            # ICRC covers the ID, so packet k of a group carries the ICRC for ID k.
            ids = _gso_ids(expect) if gso else [0] * len(expect)
            for g, e, ip_id in zip(got, expect, ids, strict=True):
                assert g[:-4] == e[:-4]
                assert int.from_bytes(g[-4:], "little") == _icrc("10.0.0.1", "10.0.0.2",
                                                                 sport, g, ip_id)
            if raw is not None:
                seen = [p for p in _drain(raw, None)
                        if p[16:20] == ipaddress.IPv4Address(_DST).packed]
                ip_packets[gso] = len(seen)
        if raw is not None:
            assert ip_packets[False] == len(expect)
            assert ip_packets[True] == _gso_sends(expect)
        assert [p for r in runs for p in r.run.packets()] == expect  # the run is unchanged
    finally:
        sender.close()
        rx.close()
        if raw is not None:
            raw.close()


def _icrc(src: str, dst: str, sport: int, udp_payload: bytes, ip_id: int) -> int:
    """IBTA A17.3.3 written out: CRC-32 over 8 bytes of ones, the IPv4 header (ID ``ip_id``,
    DF) with TOS, TTL and checksum set to ones, the UDP header with checksum ones, the BTH
    with byte 4 set to ones, the rest without the ICRC."""
    udp_len = 8 + len(udp_payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0xFF, 20 + udp_len, ip_id, 0x4000, 0xFF, 17,
                     0xFFFF, ipaddress.IPv4Address(src).packed,
                     ipaddress.IPv4Address(dst).packed)
    udp = struct.pack("!HHHH", sport, 4791, udp_len, 0xFFFF)
    bth = bytearray(udp_payload[:12])
    bth[4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + ip + udp + bytes(bth) + udp_payload[12:-4])


def _gso_ids(packets: list[bytes]) -> list[int]:
    """Each packet's place in its GSO send (the rule of _gso_sends): its IPv4 ID."""
    ids: list[int] = []
    i = 0
    while i < len(packets):
        n = _group(packets, i)
        ids += list(range(n))
        i += n
    return ids


def _group(packets: list[bytes], i: int) -> int:
    """How many packets from ``i`` go in one GSO send: equal sizes then at most one
    shorter, at most 64 segments and 65507 bytes (udp_send_skb's limits)."""
    size = len(packets[i])
    n, total = 1, size
    while i + n < len(packets) and n < 64:
        nxt = len(packets[i + n])
        if nxt > size or total + nxt > 65507:
            break
        n += 1
        total += nxt
        if nxt < size:
            break
    return n


def _gso_sends(packets: list[bytes]) -> int:
    sends = 0
    i = 0
    while i < len(packets):
        i += _group(packets, i)
        sends += 1
    return sends


def test_grouping_rule_example() -> None:
    """The rule on sizes written by hand: FIRST 1056, MIDDLE 1040 x4, LAST 316 -> 2 sends;
    LAST longer than the MIDDLEs starts its own send."""
    assert _gso_sends([b"x" * 1056] + [b"m" * 1040] * 4 + [b"l" * 316]) == 2
    assert _gso_sends([b"x" * 1056] + [b"m" * 1040] * 2 + [b"l" * 1044]) == 3
    assert _gso_sends([b"m" * 272] * 130) == 3  # 64 + 64 + 2


def _ring_receive(ring: RxRing, sock: socket.socket, want: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < want:
        if not select.select([sock], [], [], 0.5)[0]:
            break
        n = ring.recv(sock.fileno())
        assert n > 0
        for i in range(n):
            got.append(bytes(ring.slot(i)))
    return got


@pytest.mark.parametrize("gso", [False, True])
def test_gro_ring_splits_back_into_the_sent_datagrams(gso: bool) -> None:
    """A UDP_GRO socket gets coalesced buffers (over loopback a GSO send arrives whole); the
    ring's split must give exactly the datagrams a plain socket gets, with their source."""
    runs = _runs(WrOpcode.RDMA_WRITE, 200 * 1024 + 17, 1024, psn=5)  # 201 packets
    expect = [p for r in runs for p in r.run.packets()]
    rx = _receiver()
    rx.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sender.bind(("127.0.0.1", 0))
        ring = RxRing(64, 9216, gro=True)
        if gso:  # what a plain socket gets: packet k of a GSO send has IPv4 ID k
            sport = runs[0].src_udp_port
            expect = [e[:-4] + _icrc("10.0.0.1", "10.0.0.2", sport, e, k).to_bytes(4, "little")
                      for e, k in zip(expect, _gso_ids(expect), strict=True)]
        _send(runs, gso, sender)
        got = _ring_receive(ring, rx, len(expect))
        assert got == expect
        assert ring.source(0) == (ipaddress.IPv4Address("127.0.0.1"),
                                  sender.getsockname()[1])
    finally:
        sender.close()
        rx.close()
