"""Fuzzing: random, structured and mutated packets at an engine's QPs.

Only protocol-level outcomes are allowed: drops, NAKs, responses. Never an exception,
never a write outside a registered memory region.
"""

from __future__ import annotations

import ipaddress

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netio.roce import (
    Access,
    FaultyLink,
    OutgoingDatagram,
    QpAttributes,
    QpState,
    QpType,
    RecvWr,
    SendWr,
    WrOpcode,
)
from netio.roce.sim import connected_pair
from netio.wire.bth import OPCODE_TABLE, Bth, ExtHeader, Opcode
from netio.wire.ext import Aeth, AtomicAckEth, AtomicEth, Deth, ImmDt, Reth
from netio.wire.packet import decode_roce, roce_transport_bytes

MTU = 256
GUARD = 4096
REGION = 4096
SENTINEL = 0x5A
A_IP = ipaddress.IPv4Address("10.0.0.1")


class Target:
    """A responder (b) with RC, UC and UD QPs; memory guarded on both sides of its MR."""

    def __init__(self) -> None:
        self.pair, self.a, self.b = connected_pair(path_mtu_bytes=MTU, timeout=6, retry_cnt=2,
                                                   rnr_retry=1, min_rnr_timer=1)
        b = self.b
        self.arena = bytearray([SENTINEL]) * (GUARD + REGION + GUARD)
        self.view = memoryview(self.arena)[GUARD : GUARD + REGION]
        self.mr = b.pd.register(self.view, Access.LOCAL_WRITE | Access.REMOTE_WRITE
                                | Access.REMOTE_READ | Access.REMOTE_ATOMIC)
        self.outside = bytearray([SENTINEL]) * 256  # never registered
        self.qpns = [b.qp.qp_num]
        for qp_type in (QpType.UC, QpType.UD):
            qp = b.engine.create_qp(b.pd, qp_type, b.cq)
            qp.modify(QpState.INIT, QpAttributes(dest_qp_num=self.a.qp.qp_num, remote_ip=A_IP,
                                                 path_mtu_bytes=MTU, qkey=0x11111111))
            qp.modify(QpState.RTR)
            qp.modify(QpState.RTS)
            self.qpns.append(qp.qp_num)
            for i in range(4):
                qp.post_recv(RecvWr(i, (self.mr.sge(1024 + 256 * i, 256),)))
        for i in range(4):
            b.qp.post_recv(RecvWr(i, (self.mr.sge(256 * i, 256),)))

    def feed(self, payload: bytes, now_ns: int, *, icrc: bool) -> None:
        eng = self.b.engine
        src_port = self.a.qp.udp_src_port if icrc else None
        eng.receive_datagram(payload, A_IP, now_ns, src_port)
        eng.handle_timer(now_ns)
        for d in eng.datagrams_to_send(now_ns):
            _check_outgoing(d)
        self.a.engine.receive_datagram(payload, self.b.engine.local_ip, now_ns, None)
        self.a.engine.handle_timer(now_ns)
        for d in self.a.engine.datagrams_to_send(now_ns):
            _check_outgoing(d)

    def check_memory(self) -> None:
        assert self.arena[:GUARD] == bytearray([SENTINEL]) * GUARD
        assert self.arena[GUARD + REGION :] == bytearray([SENTINEL]) * GUARD
        assert self.outside == bytearray([SENTINEL]) * 256


def _check_outgoing(d: OutgoingDatagram) -> None:
    hdrs, _payload, _icrc = decode_roce(d.payload)  # whatever we send must decode
    assert hdrs.bth.opcode in OPCODE_TABLE_OPS


OPCODE_TABLE_OPS = frozenset(info.opcode for info in OPCODE_TABLE if info is not None)


def _corpus() -> list[bytes]:
    """Valid request and response packets of a real exchange (the mutation seeds)."""
    pair, a, b = connected_pair(path_mtu_bytes=MTU)
    seen: list[bytes] = []

    def spy(d: OutgoingDatagram) -> bool:
        seen.append(d.payload)
        return False

    pair.ab = FaultyLink(1, drop_if=spy)
    pair.ba = FaultyLink(2, drop_if=spy)
    mine = a.pd.register(bytearray(range(256)) * 4, Access.LOCAL_WRITE)
    theirs = b.pd.register(bytearray(2048), Access.LOCAL_WRITE | Access.REMOTE_WRITE
                           | Access.REMOTE_READ | Access.REMOTE_ATOMIC)
    b.qp.post_recv(RecvWr(1, (theirs.sge(0, 1024),)))
    ops = [SendWr(1, WrOpcode.SEND_WITH_IMM, (mine.sge(0, 700),), imm_data=5),
           SendWr(2, WrOpcode.RDMA_WRITE, (mine.sge(0, 600),), remote_addr=theirs.addr,
                  rkey=theirs.rkey),
           SendWr(3, WrOpcode.RDMA_READ, (mine.sge(0, 600),), remote_addr=theirs.addr,
                  rkey=theirs.rkey),
           SendWr(4, WrOpcode.ATOMIC_CMP_AND_SWP, (mine.sge(0, 8),), remote_addr=theirs.addr,
                  rkey=theirs.rkey, compare_add=1, swap=2)]
    for wr in ops:
        a.qp.post_send(wr)
    pair.run(lambda: len(a.cq) == 4, max_time_ns=10**9)
    return seen


CORPUS = _corpus()


@st.composite
def structured_packet(draw: st.DrawFn, target_qpns: list[int], mr_addr: int,
                      rkey: int) -> bytes:
    opcode = draw(st.sampled_from(sorted(OPCODE_TABLE_OPS - {Opcode.CNP})))
    info = OPCODE_TABLE[opcode]
    assert info is not None
    near = draw(st.sampled_from([mr_addr, mr_addr + REGION - 8, mr_addr - 8, 0]))
    va = draw(st.one_of(st.integers(0, 2**64 - 1), st.integers(near, near + 4096)))
    key = draw(st.one_of(st.just(rkey), st.integers(0, 2**32 - 1)))
    length = draw(st.one_of(st.integers(0, 3 * MTU), st.integers(0, 2**32 - 1)))
    kw: dict[str, object] = {}
    for h in info.headers:
        if h is ExtHeader.RETH:
            kw["reth"] = Reth(va, key, length)
        elif h is ExtHeader.AETH:
            kw["aeth"] = Aeth(draw(st.integers(0, 0x7F)), draw(st.integers(0, 0xFFFFFF)))
        elif h is ExtHeader.ATOMIC_ETH:
            kw["atomic_eth"] = AtomicEth(va, key, draw(st.integers(0, 2**64 - 1)),
                                         draw(st.integers(0, 2**64 - 1)))
        elif h is ExtHeader.ATOMIC_ACK_ETH:
            kw["atomic_ack_eth"] = AtomicAckEth(draw(st.integers(0, 2**64 - 1)))
        elif h is ExtHeader.IMM_DT:
            kw["imm_dt"] = ImmDt(draw(st.integers(0, 2**32 - 1)))
        elif h is ExtHeader.DETH:
            kw["deth"] = Deth(draw(st.sampled_from([0x11111111, 0, 0x80000000])),
                              draw(st.integers(0, 0xFFFFFF)))
        else:
            return draw(st.binary(min_size=16, max_size=64))
    payload = draw(st.binary(max_size=2 * MTU)) if info.has_payload else b""
    bth = Bth(opcode, dest_qp=draw(st.sampled_from([*target_qpns, 0x11, 1, 0xFFFFFF])),
              ack_req=draw(st.booleans()), psn=draw(st.sampled_from([0, 1, 2, 3, 0xFFFFFF])))
    return roce_transport_bytes(bth, payload=payload, **kw) + bytes(4)  # type: ignore[arg-type]


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int) -> bytes:
    raw = bytearray(data)
    for pos, value in edits:
        raw[pos % len(raw)] = value
    return bytes(raw[: max(0, len(raw) - cut)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_structured_packets(data: st.DataObject) -> None:
    t = Target()
    strategy = structured_packet(t.qpns, t.mr.addr, t.mr.rkey)
    for i, packet in enumerate(data.draw(st.lists(strategy, min_size=1, max_size=12))):
        t.feed(packet, 1000 * (i + 1), icrc=False)
    t.pair.run(max_time_ns=10**8, max_steps=5000)
    t.check_memory()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(picks=st.lists(st.tuples(st.integers(0, len(CORPUS) - 1),
                                st.lists(st.tuples(st.integers(0, 127), st.integers(0, 255)),
                                         max_size=4),
                                st.integers(0, 6), st.booleans()),
                      min_size=1, max_size=16))
def test_mutated_packets(picks: list[tuple[int, list[tuple[int, int]], int, bool]]) -> None:
    t = Target()
    for i, (index, edits, cut, icrc) in enumerate(picks):
        t.feed(_mutate(CORPUS[index], edits, cut), 1000 * (i + 1), icrc=icrc)
    t.pair.run(max_time_ns=10**8, max_steps=5000)
    t.check_memory()


@settings(max_examples=100, deadline=None)
@given(packets=st.lists(st.binary(max_size=200), min_size=1, max_size=10),
       icrc=st.booleans())
def test_random_bytes(packets: list[bytes], icrc: bool) -> None:
    t = Target()
    for i, packet in enumerate(packets):
        t.feed(packet, 1000 * (i + 1), icrc=icrc)
    t.check_memory()


def test_corpus_covers_requests_and_responses() -> None:
    ops = {decode_roce(p)[0].bth.opcode for p in CORPUS}
    assert {Opcode.RC_SEND_FIRST, Opcode.RC_RDMA_WRITE_FIRST, Opcode.RC_RDMA_READ_REQUEST,
            Opcode.RC_COMPARE_SWAP, Opcode.RC_ACKNOWLEDGE, Opcode.RC_ATOMIC_ACKNOWLEDGE,
            Opcode.RC_RDMA_READ_RESPONSE_FIRST} <= ops
