"""The native data path against the pure-Python engine, its reference.

The same scenario (messages, MTU, first PSNs, a seeded lossy link that drops, duplicates,
reorders and corrupts) runs twice in virtual time: once with both engines pure, once with
both native (packets built in C, arrivals handed over as receive rings). Every datagram
either side sends, every completion and every byte of the target memory must be the same.
Independently of the engine, the packets the C path builds are checked against the IBTA
header layout written out here, and a WRITE's payload is shown to land in the registered
numpy array in place.
"""

from __future__ import annotations

import ipaddress
import itertools
import struct
import zlib
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netio import native
from netio.roce import Access, RecvWr, SendWr, WcStatus, WrOpcode, native_path
from netio.roce.engine import OutgoingDatagram, OutgoingRun
from netio.roce.link import LinkFaults
from netio.roce.memory import ProtectionDomain
from netio.roce.native_path import RxRing, recycle
from netio.roce.sim import connected_pair

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="netio._native not built "
                                "(or NETIO_PURE=1): nothing native to compare")

MTUS = (256, 1024, 4096)
OPS = (WrOpcode.SEND, WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM)
TARGET_BYTES = 128 << 10


def _run(native_on: bool, messages: list[tuple[WrOpcode, int, int]], mtu: int, psn_a: int,
         faults: LinkFaults | None, seed: int, nsge: int,
         coalesce: bool = False) -> dict[str, Any]:
    # Keys derive from the PD's number (a process-wide counter): number both runs alike.
    ProtectionDomain._pd_ids = itertools.count(1)
    pair, a, b = connected_pair(native=native_on, ring_rx=native_on, seed=seed,
                                coalesce_acks=coalesce,
                                faults_ab=faults, faults_ba=faults, psn_a=psn_a,
                                psn_b=0x123, path_mtu_bytes=mtu, timeout=10, retry_cnt=7,
                                rnr_retry=7, access=Access.REMOTE_WRITE)
    assert a.engine.native is native_on and b.engine.native is native_on
    sent: dict[str, list[bytes]] = {"a": [], "b": []}
    for name, link in (("a", pair.ab), ("b", pair.ba)):
        original = link.send

        def spy(d: OutgoingDatagram, now_ns: int, *, name: str = name,
                original: Any = original) -> None:
            sent[name].append(d.payload)
            original(d, now_ns)

        link.send = spy  # type: ignore[method-assign]
    source = np.random.default_rng(seed).integers(0, 256, TARGET_BYTES, dtype=np.uint8)
    target = np.zeros(TARGET_BYTES, dtype=np.uint8)
    inbox = bytearray(TARGET_BYTES)
    mr_src = a.pd.register(source, Access.NONE)
    mr_dst = b.pd.register(target, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    mr_inbox = b.pd.register(inbox, Access.LOCAL_WRITE)
    offset = 0
    for i, (op, _size, _imm) in enumerate(messages):
        if op in (WrOpcode.SEND, WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_WRITE_WITH_IMM):
            # receives split into nsge pieces: middles may cross an SGE boundary
            cut = [TARGET_BYTES * k // nsge for k in range(nsge + 1)]
            b.qp.post_recv(RecvWr(100 + i, tuple(mr_inbox.sge(cut[k], cut[k + 1] - cut[k])
                                                 for k in range(nsge))))
    for i, (op, size, imm) in enumerate(messages):
        half = size // 2
        sges = (mr_src.sge(offset, half), mr_src.sge(offset + half, size - half))
        with_imm = op in (WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_WRITE_WITH_IMM)
        a.qp.post_send(SendWr(i, op, sges, mr_dst.addr + offset, mr_dst.rkey,
                              imm if with_imm else None))
        offset += size
    done = pair.run(lambda: len(a.cq) >= len(messages) and len(b.cq) >= sum(
        op is not WrOpcode.RDMA_WRITE for op, _s, _i in messages), max_time_ns=600_000_000_000)
    return {
        "done": done,
        "sent": sent,
        "completions_a": a.cq.poll(1000),
        "completions_b": b.cq.poll(1000),
        "target": bytes(target),
        "inbox": bytes(inbox),
        "responder": (b.qp.responder.expected_psn, b.qp.responder.msn,
                      b.qp.responder.duplicates, b.qp.responder.out_of_sequence),
        "native_packets": (a.engine.stats.tx_native_packets, b.engine.stats.rx_native_packets),
        "received": (a.engine.stats.datagrams_received, b.engine.stats.datagrams_received),
        "dropped_icrc": b.engine.stats.dropped_icrc,
        "coalesced": b.qp.responder.acks_coalesced,
    }


def _compare(messages: list[tuple[WrOpcode, int, int]], mtu: int, psn_a: int,
             faults: LinkFaults | None, seed: int, nsge: int = 1) -> dict[str, Any]:
    pure = _run(False, messages, mtu, psn_a, faults, seed, nsge)
    fast = _run(True, messages, mtu, psn_a, faults, seed, nsge)
    assert pure["done"] and fast["done"]
    for key in ("sent", "completions_a", "completions_b", "target", "inbox", "responder",
                "received", "dropped_icrc"):
        assert fast[key] == pure[key], key
    assert pure["native_packets"] == (0, 0)
    return fast


message = st.tuples(st.sampled_from(OPS), st.one_of(st.integers(0, 12 << 10), st.integers(
    30 << 10, 40 << 10)), st.integers(0, 2**32 - 1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(message, min_size=1, max_size=3), mtu=st.sampled_from(MTUS),
       psn_a=st.one_of(st.integers(0, 0xFFFFFF), st.integers(0xFFFFF0, 0xFFFFFF)),
       drop=st.sampled_from((0.0, 0.02, 0.1)), duplicate=st.sampled_from((0.0, 0.05)),
       reorder=st.sampled_from((0.0, 0.1)), corrupt=st.sampled_from((0.0, 0.02)),
       seed=st.integers(0, 2**16), nsge=st.integers(1, 3))
def test_native_path_sends_and_completes_what_the_pure_engine_does(
        messages: list[tuple[WrOpcode, int, int]], mtu: int, psn_a: int, drop: float,
        duplicate: float, reorder: float, corrupt: float, seed: int, nsge: int) -> None:
    faults = LinkFaults(drop=drop, duplicate=duplicate, reorder=reorder, corrupt=corrupt)
    _compare(messages, mtu, psn_a, faults, seed, nsge)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(message, min_size=1, max_size=3), mtu=st.sampled_from(MTUS),
       psn_a=st.integers(0, 0xFFFFFF), drop=st.sampled_from((0.0, 0.05)),
       duplicate=st.sampled_from((0.0, 0.05)), reorder=st.sampled_from((0.0, 0.1)),
       seed=st.integers(0, 2**16))
def test_coalesced_acks_complete_the_same_work(
        messages: list[tuple[WrOpcode, int, int]], mtu: int, psn_a: int, drop: float,
        duplicate: float, reorder: float, seed: int) -> None:
    """With ACK coalescing the wire differs (fewer ACKs) but not the outcome: the same
    completions in the same order and the same bytes in memory as the pure engine."""
    faults = LinkFaults(drop=drop, duplicate=duplicate, reorder=reorder)
    pure = _run(False, messages, mtu, psn_a, faults, seed, 1)
    fast = _run(True, messages, mtu, psn_a, faults, seed, 1, coalesce=True)
    assert pure["done"] and fast["done"]

    def outcome(c: Any) -> tuple[int, WcStatus, int, int | None]:
        return c.wr_id, c.status, c.byte_len, c.imm_data

    for key in ("completions_a", "completions_b"):
        assert [outcome(c) for c in fast[key]] == [outcome(c) for c in pure[key]], key
    assert fast["target"] == pure["target"] and fast["inbox"] == pure["inbox"]


def test_coalescing_sends_one_ack_per_batch() -> None:
    """Twenty 64-byte WRITEs arriving in one batch: each asked for an ACK (ONLY packets);
    one ACK, for the last PSN with the MSN of twenty messages, answers them all."""
    _pair, a, b = connected_pair(native=True, coalesce_acks=True, access=Access.REMOTE_WRITE)
    target = b.pd.register(bytearray(64 * 20), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    src = a.pd.register(bytearray(range(64)), Access.NONE)
    for i in range(20):
        a.qp.post_send(SendWr(i, WrOpcode.RDMA_WRITE, (src.sge(),), target.addr + 64 * i,
                              target.rkey))
    out = a.engine.datagrams_to_send(0)
    assert len(out) == 20 and all(d.payload[8] & 0x80 for d in out)  # AckReq on each
    ring = RxRing(64, 9216)
    ring.fill([(d.payload, ipaddress.IPv4Address("10.0.0.1"), d.src_udp_port) for d in out])
    b.engine.receive_ring(ring, 1, lambda i: b.engine.receive_datagram(
        bytes(ring.slot(i)), *ring.source(i)[:1], 1, ring.source(i)[1]))
    (ack,) = b.engine.datagrams_to_send(1)
    p = ack.payload
    assert p[0] == 0x11  # RC Acknowledge
    assert int.from_bytes(p[9:12], "big") == 19  # PSN of the last WRITE
    assert p[12] >> 5 == 0 and int.from_bytes(p[13:16], "big") == 20  # ACK syndrome, MSN 20
    for d in (ack,):
        a.engine.receive_datagram(d.payload, "10.0.0.2", 2, d.src_udp_port)
    assert [c.wr_id for c in a.cq.poll(100)] == list(range(20))


def test_clean_link_uses_the_native_path_for_every_middle_packet() -> None:
    size = 40 << 10
    fast = _compare([(WrOpcode.RDMA_WRITE, size, 0), (WrOpcode.SEND, size, 0)], 1024, 7,
                    None, 1)
    tx, rx = fast["native_packets"]
    assert tx == 2 * (size // 1024)  # every SEND/WRITE packet built in C
    assert rx == 2 * (size // 1024 - 2)  # every MIDDLE placed in C (FIRST/LAST: Python)


def test_lossy_link_still_places_natively() -> None:
    fast = _compare([(WrOpcode.RDMA_WRITE, 60 << 10, 0)] * 1, 1024, 0xFFFFF8,
                    LinkFaults(drop=0.05, reorder=0.05, duplicate=0.05), 3)
    assert fast["native_packets"][1] > 0


# -- the packets against IBTA's layout, independently of the engine --------------------------

def _icrc(src: str, dst: str, sport: int, udp_payload: bytes) -> int:
    """IBTA A17.3.3 written out: CRC-32 over 8 bytes of ones, the IPv4 header (ID 0, DF) with
    TOS, TTL and checksum set to ones, the UDP header with checksum ones, the BTH with byte 4
    set to ones, the rest without the ICRC."""
    udp_len = 8 + len(udp_payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0xFF, 20 + udp_len, 0, 0x4000, 0xFF, 17, 0xFFFF,
                     ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    udp = struct.pack("!HHHH", sport, 4791, udp_len, 0xFFFF)
    bth = bytearray(udp_payload[:12])
    bth[4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + ip + udp + bytes(bth) + udp_payload[12:-4])


def test_write_packets_follow_the_ibta_layout() -> None:
    _pair, a, b = connected_pair(native=True, path_mtu_bytes=1024, psn_a=0xFFFFFE)
    _check_write_layout(a, b, 0xFFFFFE)


def test_reused_runs_and_cached_fields_build_the_same_packets() -> None:
    """A sent run recycled (its packets left), and per-connection fields cached from a
    SEND of the same QP: the WRITE after them still has the IBTA layout byte for byte."""
    _pair, a, b = connected_pair(native=True, path_mtu_bytes=1024, psn_a=0xFFFFF0)
    b.qp.post_recv(RecvWr(1, (b.pd.register(bytearray(4096), Access.LOCAL_WRITE).sge(),)))
    mr = a.pd.register(bytearray(b"s" * 3000), Access.NONE)
    a.qp.post_send(SendWr(1, WrOpcode.SEND, (mr.sge(),)))
    runs = [item.run for item in a.engine.output_to_send(0) if isinstance(item, OutgoingRun)]
    assert runs and sum(r.count for r in runs) == 3
    for r in runs:
        recycle(r)
    assert runs[-1] in native_path._free_runs
    _check_write_layout(a, b, 0xFFFFF3)  # PSNs 0xFFFFF0..2 went to the SEND
    assert a.engine.stats.tx_native_packets == 6


def _check_write_layout(a: Any, b: Any, psn0: int) -> None:
    data = bytes(range(256)) * 10 + b"xyz"  # 2563 bytes: 3 packets, the last padded
    mr = a.pd.register(bytearray(data), Access.NONE)
    a.qp.post_send(SendWr(9, WrOpcode.RDMA_WRITE_WITH_IMM, (mr.sge(),), 0x1122334455667788,
                          0xABCD, 0xCAFEF00D))
    before = a.engine.stats.tx_native_packets
    out = a.engine.datagrams_to_send(0)
    assert a.engine.stats.tx_native_packets == before + 3
    # (opcode, PSN, AckReq, extension headers, payload) per IBTA Table 38 / §9.2-9.4
    reth = struct.pack("!QII", 0x1122334455667788, 0xABCD, len(data))
    expect = [(0x06, psn0, False, reth, data[:1024]),  # RC RDMA WRITE First
              (0x07, (psn0 + 1) & 0xFFFFFF, False, b"", data[1024:2048]),  # Middle
              (0x09, (psn0 + 2) & 0xFFFFFF, True, struct.pack("!I", 0xCAFEF00D),
               data[2048:])]  # Last+Imm
    assert len(out) == 3
    for d, (opcode, psn, ack, ext, payload) in zip(out, expect, strict=True):
        p = d.payload
        pad = -len(payload) % 4
        assert p[0] == opcode
        assert (p[1] >> 4) & 3 == pad
        assert struct.unpack("!H", p[2:4])[0] == 0xFFFF  # default P_Key
        assert struct.unpack("!I", p[4:8])[0] == b.qp.qp_num
        word = struct.unpack("!I", p[8:12])[0]
        assert (word >> 31 == 1) is ack and word & 0xFFFFFF == psn
        assert p[12:12 + len(ext)] == ext
        body = p[12 + len(ext):-4]
        assert body == payload + bytes(pad)
        assert int.from_bytes(p[-4:], "little") == _icrc("10.0.0.1", "10.0.0.2",
                                                         d.src_udp_port, p)


def test_ack_requested_after_64_unacknowledged_packets() -> None:
    """rxe's RXE_MAX_PKT_PER_ACK: AckReq on every 65th packet of a long message and the last,
    also when the window cuts the message into several runs."""
    for window in (1024, 100, 7):
        _pair, a, _b = connected_pair(native=True, path_mtu_bytes=256, max_unacked_psns=window)
        mr = a.pd.register(bytearray(200 * 256), Access.NONE)
        a.qp.post_send(SendWr(1, WrOpcode.RDMA_WRITE, (mr.sge(),), 0, 1))
        out = a.engine.datagrams_to_send(0)
        requester = a.qp.requester
        while len(out) < 200:  # open the window as ACKs would
            requester.comp_psn = requester.psn
            a.engine.qp_changed(a.qp)
            out += a.engine.datagrams_to_send(0)
        acks = [k for k, d in enumerate(out) if d.payload[8] & 0x80]
        assert acks == [64, 129, 194, 199]


def test_write_lands_in_the_registered_array_in_place() -> None:
    pair, a, b = connected_pair(native=True, ring_rx=True, path_mtu_bytes=4096,
                                access=Access.REMOTE_WRITE)
    target = np.zeros(1 << 20, dtype=np.uint8)
    address = target.ctypes.data
    mr_dst = b.pd.register(target, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    source = np.arange(1 << 20, dtype=np.uint32).astype(np.uint8)
    a.qp.post_send(SendWr(1, WrOpcode.RDMA_WRITE, (a.pd.register(source, Access.NONE).sge(),),
                          mr_dst.addr, mr_dst.rkey))
    assert pair.run(lambda: len(a.cq) == 1)
    assert a.cq.poll(1)[0].status is WcStatus.SUCCESS
    assert target.ctypes.data == address and np.array_equal(target, source)
    s_a, s_b = a.engine.stats, b.engine.stats
    assert s_a.tx_payload_bytes == 1 << 20 and s_a.tx_user_copy_bytes == 0
    # 254 of 256 packets placed by C with one copy (ring -> array); first and last by Python
    assert s_b.rx_native_packets == 254
    assert s_b.rx_payload_bytes == 1 << 20


def test_ring_slots_hold_what_was_filled() -> None:
    ring = RxRing(4, 128)
    ring.fill([(b"abc", ipaddress.IPv4Address("10.1.2.3"), 0xC001)])
    assert ring.count == 1 and bytes(ring.slot(0)) == b"abc"
    assert ring.source(0) == (ipaddress.IPv4Address("10.1.2.3"), 0xC001)


def _ip_packet(payload: bytes, src: str, dst: str, sport: int, ip_id: int) -> bytes:
    udp_len = 8 + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, ip_id, 0x4000, 64, 17, 0,
                     ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    return ip + struct.pack("!HHHH", sport, 4791, udp_len, 0) + payload


@pytest.mark.parametrize("bad_ip_id_at", [None, 5, 20])
def test_raw_ring_places_what_receive_ip_packet_accepts(bad_ip_id_at: int | None) -> None:
    """Whole IP packets (a raw socket's ring): the ICRC covers the IP ID, so a packet with
    another ID is dropped by both paths; the rest is placed identically."""
    results = []
    for native_on in (False, True):
        ProtectionDomain._pd_ids = itertools.count(1)
        _pair, a, b = connected_pair(native=False, path_mtu_bytes=1024,
                                     access=Access.REMOTE_WRITE)
        if native_on:  # only the receiving engine differs
            _pair2, _a2, b = connected_pair(native=True, path_mtu_bytes=1024,
                                            access=Access.REMOTE_WRITE)
        target = np.zeros(40 << 10, dtype=np.uint8)
        mr = b.pd.register(target, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
        src = a.pd.register(bytes(range(256)) * 160, Access.NONE)
        a.qp.post_send(SendWr(1, WrOpcode.RDMA_WRITE, (src.sge(),), mr.addr, mr.rkey))
        packets = [_ip_packet(d.payload, "10.0.0.1", "10.0.0.2", d.src_udp_port,
                              7 if k == bad_ip_id_at else 0)
                   for k, d in enumerate(a.engine.datagrams_to_send(0))]
        if native_on:
            ring = RxRing(64, 9216, raw=True)
            ring.fill([(p, ipaddress.IPv4Address("10.0.0.1"), 0) for p in packets])
            b.engine.receive_ring(ring, 1, lambda i, r=ring, e=b.engine: e.receive_ip_packet(
                r.slot(i), 1))
        else:
            for p in packets:
                b.engine.receive_ip_packet(p, 1)
        results.append(([d.payload for d in b.engine.datagrams_to_send(1)], bytes(target),
                         b.engine.stats.dropped_icrc, b.qp.responder.expected_psn,
                         b.engine.stats.rx_native_packets))
    pure, fast = results
    assert fast[:4] == pure[:4]
    assert pure[2] == (0 if bad_ip_id_at is None else 1)
    assert fast[4] > 0


def test_only_packets_are_placed_and_completed_natively() -> None:
    """Small SENDs (with and without immediate) into posted receives and WRITEs (with
    and without immediate) into one region: after the first WRITE has passed the access
    checks in Python, every ONLY packet is placed and completed in C, and the outcome is
    the pure engine's (datagrams, completions, memory)."""
    ops = [WrOpcode.RDMA_WRITE, WrOpcode.SEND, WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_WRITE,
           WrOpcode.RDMA_WRITE_WITH_IMM, WrOpcode.SEND]
    messages = [(op, 64 + 8 * i, 0x1000 + i) for i, op in enumerate(ops * 4)]
    fast = _compare(messages, 1024, 0x42, None, 5)
    tx, rx = fast["native_packets"]
    assert tx == len(messages)
    assert rx == len(messages) - 1  # all but the first WRITE (no region cached yet)
    for coalesce in (False, True):
        run = _run(True, messages, 1024, 0x42, None, 5, 1, coalesce=coalesce)
        assert run["native_packets"][1] == len(messages) - 1
