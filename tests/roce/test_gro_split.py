"""The native receive ring with UDP GRO: coalesced buffers split back into datagrams.

Over loopback a UDP GSO send (``UDP_SEGMENT``) reaches a ``UDP_GRO`` socket whole, with
the segment size in a ``UDP_GRO`` cmsg, and reaches a plain socket as the kernel's
segments. So the kernel gives both the crafted coalesced buffers and the reference: the
ring on the GRO socket must yield exactly the datagrams the plain socket gets, which are
the payload cut every ``gso_size`` bytes with a shorter (or equal) last piece
(udp(7), ``UDP_SEGMENT``). Plain sends (no cmsg) sit between the coalesced ones, two
senders take turns (each datagram keeps its own source), and more sends wait than one
receive takes (``full`` says so: a receive offers one message per 64 KiB region).
"""

from __future__ import annotations

import ipaddress
import select
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netio import native
from netio.roce.native_path import UDP_GRO, RxRing

pytestmark = pytest.mark.skipif(native.lib is None, reason="needs the native module")

_DST = "127.77.9.2"  # a loopback address no other test binds
_GRO_PORT, _PLAIN_PORT = 4791, 4792
#: linux/udp.h
_UDP_SEGMENT = 103
#: udp(7): at most 64 segments a GSO send on every kernel that has it (later kernels
#: allow 128); IPv4 carries at most 65507 bytes of UDP payload
_MAX_SEGS, _MAX_PAYLOAD = 64, 65507
#: a GRO ring's slots are 64 KiB regions, one recvmmsg message each (a small ring, so
#: that a few sends outnumber what one receive takes)
_SLOTS, _SLOT_BYTES, _REGIONS = 4, 9216, 4
#: what may wait on each socket at once: well inside the default 208 KiB rmem_max that
#: caps SO_RCVBUF (doubled by the kernel) on a host that was not tuned
_MAX_QUEUED = 160_000


def _socket(port: int, gro: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    if gro:
        sock.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
    sock.bind((_DST, port))
    sock.setblocking(False)
    return sock


@pytest.fixture(scope="module")
def sockets() -> Iterator[list[socket.socket]]:
    made = [_socket(_GRO_PORT, True), _socket(_PLAIN_PORT, False)]
    for _ in range(2):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        made.append(s)
    yield made
    for s in made:
        s.close()


def _pieces(payload: bytes, gso_size: int) -> list[bytes]:
    """udp(7): the kernel cuts a GSO send every gso_size bytes; only the last piece may
    be shorter. A payload no longer than gso_size goes as one plain datagram."""
    return [payload[i:i + gso_size] for i in range(0, len(payload), gso_size)]


# A send: (sender 0 or 1, gso_size, whole segments, bytes of a shorter last segment or 0)
_SEND = st.integers(1, 9000).flatmap(lambda size: st.tuples(
    st.integers(0, 1), st.just(size),
    st.integers(1, max(1, min(_MAX_SEGS, _MAX_PAYLOAD // size))),
    st.integers(0, size - 1)))


def _length(size: int, segs: int, short: int) -> int:
    """A send's payload: whole segments and a shorter last one, within the kernel's
    limits (without the short one where it would exceed them)."""
    length = size * segs + short
    if length > _MAX_PAYLOAD or segs + (short > 0) > _MAX_SEGS:
        return size * segs
    return length


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sends=st.lists(_SEND, min_size=1, max_size=2 * _REGIONS + 3).filter(
    lambda sends: sum(_length(*s[1:]) for s in sends) <= _MAX_QUEUED))
def test_split_gives_the_datagrams_a_plain_socket_gets(
        sockets: list[socket.socket], sends: list[tuple[int, int, int, int]]) -> None:
    gro_sock, plain_sock, *senders = sockets
    ring = RxRing(_SLOTS, _SLOT_BYTES, gro=True)
    expect: list[tuple[bytes, int]] = []  # (datagram, sender's port)
    per_message: list[int] = []  # datagrams in each message the GRO socket gets
    for serial, (who, size, segs, short) in enumerate(sends):
        length = _length(size, segs, short)
        payload = bytes((serial + 7 * k) & 0xFF for k in range(length))
        sender = senders[who]
        pieces = _pieces(payload, size)
        for port in (_GRO_PORT, _PLAIN_PORT):
            if len(pieces) > 1:
                sender.sendmsg([payload], [(socket.SOL_UDP, _UDP_SEGMENT,
                                            struct.pack("=H", size))], 0, (_DST, port))
            else:  # a plain datagram: no cmsg on receive
                sender.sendto(payload, (_DST, port))
        src_port = sender.getsockname()[1]
        expect += [(p, src_port) for p in pieces]
        per_message.append(len(pieces))
    time.sleep(0.01)  # loopback delivers in the sender's call; margin for a busy host

    plain: list[bytes] = []
    while len(plain) < len(expect) and select.select([plain_sock], [], [], 0.5)[0]:
        plain.append(plain_sock.recv(70000))
    assert plain == [p for p, _ in expect]  # the kernel's own segmentation: the reference

    got: list[tuple[bytes, int]] = []
    counts: list[tuple[int, bool]] = []
    coalesced0 = ring.coalesced
    while True:
        n = ring.recv(gro_sock.fileno())
        if n < 0:
            assert n == -11  # EAGAIN: all taken
            assert not ring.full
            break
        counts.append((n, ring.full))
        for i in range(n):
            src, port = ring.source(i)
            assert src == ipaddress.IPv4Address("127.0.0.1")
            got.append((bytes(ring.slot(i)), port))
        if not ring.full:
            break
    assert got == expect
    # one message per region, so a receive is full exactly when _REGIONS messages waited
    want = [(sum(per_message[k:k + _REGIONS]), len(per_message[k:k + _REGIONS]) == _REGIONS)
            for k in range(0, len(per_message), _REGIONS)]
    assert counts == want
    assert ring.coalesced - coalesced0 == sum(1 for m in per_message if m > 1)
    assert ring.recv(gro_sock.fileno()) == -11


def test_pieces_rule_by_hand() -> None:
    """udp(7)'s rule on sizes written out: 10 bytes at gso_size 4 are 4 + 4 + 2."""
    assert _pieces(b"0123456789", 4) == [b"0123", b"4567", b"89"]
    assert _pieces(b"01234567", 4) == [b"0123", b"4567"]
    assert _pieces(b"012", 4) == [b"012"]
