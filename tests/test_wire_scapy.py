"""Cross-check netio.wire against scapy (an independent implementation).

scapy's RoCE layer (scapy.contrib.roce) has BTH, AETH and CNPPadding and
computes the ICRC; the other extension headers are packed by hand here with
``struct``, independently of netio. Packets netio builds must equal the
scapy-built bytes, ICRC included, and netio must decode what scapy builds.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

from hypothesis import given, settings
from hypothesis import strategies as st

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.contrib.mac_control import (  # noqa: E402
    MACControlClassBasedFlowControl,
    MACControlPause,
)
from scapy.contrib.roce import AETH, BTH, cnp  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Dot1Q, Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402

from netio.wire.bth import Bth, ExtHeader, Opcode, opcode_info  # noqa: E402
from netio.wire.cnp import cnp_bth  # noqa: E402
from netio.wire.ethernet import Vlan, format_mac  # noqa: E402
from netio.wire.ext import Aeth, AtomicAckEth, AtomicEth, Deth, Feth, Ieth, ImmDt, Reth  # noqa: E402
from netio.wire.ip import Ecn  # noqa: E402
from netio.wire.packet import build_roce_frame, decode_frame  # noqa: E402
from netio.wire.pfc import build_pause_frame, build_pfc_frame  # noqa: E402

SRC_MAC = bytes.fromhex("525400770001")
DST_MAC = bytes.fromhex("525400770002")
u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u24 = st.integers(0, 0xFFFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 2**64 - 1)


@st.composite
def ext_values(draw: st.DrawFn, kind: ExtHeader) -> tuple[int, ...]:
    if kind is ExtHeader.RETH:
        return (draw(u64), draw(u32), draw(u32))
    if kind is ExtHeader.AETH:
        return (draw(st.integers(0, 0x7F)), draw(u24))
    if kind is ExtHeader.ATOMIC_ETH:
        return (draw(u64), draw(u32), draw(u64), draw(u64))
    if kind is ExtHeader.DETH:
        return (draw(u32), draw(u24))
    if kind is ExtHeader.FETH:
        return (draw(st.integers(0, 3)), draw(st.integers(0, 15)))
    if kind is ExtHeader.ATOMIC_ACK_ETH:
        return (draw(u64),)
    return (draw(u32),)  # IMM_DT, IETH


def hand_packed(kind: ExtHeader, values: tuple[int, ...]) -> bytes:
    """The extension header's wire bytes, from the IBTA layouts (not from netio)."""
    if kind is ExtHeader.RETH:
        return struct.pack(">QII", *values)
    if kind is ExtHeader.AETH:
        return struct.pack(">BBH", values[0], values[1] >> 16, values[1] & 0xFFFF)
    if kind is ExtHeader.ATOMIC_ETH:
        return struct.pack(">QIQQ", *values)
    if kind is ExtHeader.DETH:
        return struct.pack(">IB", values[0], 0) + values[1].to_bytes(3, "big")
    if kind is ExtHeader.FETH:
        return struct.pack(">I", (values[0] << 4) | values[1])
    if kind is ExtHeader.ATOMIC_ACK_ETH:
        return struct.pack(">Q", values[0])
    return struct.pack(">I", values[0])


NETIO_EXT = {
    ExtHeader.RETH: ("reth", Reth), ExtHeader.AETH: ("aeth", Aeth),
    ExtHeader.ATOMIC_ETH: ("atomic_eth", AtomicEth),
    ExtHeader.ATOMIC_ACK_ETH: ("atomic_ack_eth", AtomicAckEth),
    ExtHeader.IMM_DT: ("imm_dt", ImmDt), ExtHeader.IETH: ("ieth", Ieth),
    ExtHeader.DETH: ("deth", Deth), ExtHeader.FETH: ("feth", Feth),
}

ROCE_OPCODES = [op for op in Opcode if op is not Opcode.CNP]


@dataclass(frozen=True)
class Case:
    """One RoCEv2 packet, described once, built by both netio and scapy."""

    opcode: Opcode
    exts: dict[ExtHeader, tuple[int, ...]]
    payload: bytes
    solicited: bool
    mig_req: bool
    tver: int
    pkey: int
    fecn: bool
    becn: bool
    dest_qp: int
    ack_req: bool
    psn: int
    src_port: int
    dscp: int
    ecn: Ecn
    ttl: int
    ip_id: int
    flow_label: int
    vlan: tuple[int, int] | None
    src_ip: IPv4Address | IPv6Address
    dst_ip: IPv4Address | IPv6Address

    @property
    def ipv6(self) -> bool:
        return isinstance(self.src_ip, IPv6Address)


@st.composite
def roce_case(draw: st.DrawFn) -> Case:
    opcode = draw(st.sampled_from(ROCE_OPCODES))
    info = opcode_info(opcode)
    exts = {kind: draw(ext_values(kind)) for kind in info.headers}
    payload = draw(st.binary(max_size=300)) if info.has_payload else b""
    if opcode is Opcode.RC_ATOMIC_WRITE:
        payload = draw(st.binary(min_size=8, max_size=8))
    ipv6 = draw(st.booleans())
    src_ip: IPv4Address | IPv6Address
    dst_ip: IPv4Address | IPv6Address
    if ipv6:
        src_ip = IPv6Address(draw(st.integers(1, 2**128 - 1)))
        dst_ip = IPv6Address(draw(st.integers(1, 2**128 - 1)))
    else:
        src_ip = IPv4Address(draw(st.integers(1, 2**32 - 2)))
        dst_ip = IPv4Address(draw(st.integers(1, 2**32 - 2)))
    return Case(
        opcode=opcode, exts=exts, payload=payload, solicited=draw(st.booleans()),
        mig_req=draw(st.booleans()), tver=draw(st.integers(0, 15)), pkey=draw(u16),
        fecn=draw(st.booleans()), becn=draw(st.booleans()), dest_qp=draw(u24),
        ack_req=draw(st.booleans()), psn=draw(u24), src_port=draw(st.integers(1, 0xFFFF)),
        dscp=draw(st.integers(0, 63)), ecn=draw(st.sampled_from(list(Ecn))), ttl=draw(u8),
        ip_id=draw(u16), flow_label=draw(st.integers(0, 0xFFFFF)),
        vlan=draw(st.none() | st.tuples(st.integers(0, 7), st.integers(0, 4095))),
        src_ip=src_ip, dst_ip=dst_ip)


def scapy_frame(c: Case) -> bytes:
    pad = -len(c.payload) % 4
    l2 = Ether(src=format_mac(SRC_MAC), dst=format_mac(DST_MAC))
    if c.vlan is not None:
        l2 = l2 / Dot1Q(prio=c.vlan[0], vlan=c.vlan[1])
    tos = (c.dscp << 2) | c.ecn
    if c.ipv6:
        l3 = IPv6(src=str(c.src_ip), dst=str(c.dst_ip), tc=tos, fl=c.flow_label, hlim=c.ttl)
    else:
        l3 = IP(src=str(c.src_ip), dst=str(c.dst_ip), tos=tos, ttl=c.ttl, id=c.ip_id,
                flags="DF")
    bth = BTH(opcode=int(c.opcode), solicited=int(c.solicited), migreq=int(c.mig_req),
              padcount=pad, version=c.tver, pkey=c.pkey, fecn=int(c.fecn), becn=int(c.becn),
              dqpn=c.dest_qp, ackreq=int(c.ack_req), psn=c.psn)
    pkt = l2 / l3 / UDP(sport=c.src_port, dport=4791, chksum=0) / bth
    rest = b""
    for kind in opcode_info(c.opcode).headers:
        values = c.exts[kind]
        if kind is ExtHeader.AETH:  # scapy's own AETH layer
            pkt = pkt / AETH(syndrome=values[0], msn=values[1])
        else:
            rest += hand_packed(kind, values)
    rest += c.payload + bytes(pad)
    if rest:
        pkt = pkt / Raw(rest)
    return bytes(pkt)


def netio_frame(c: Case) -> bytes:
    kwargs = {NETIO_EXT[kind][0]: NETIO_EXT[kind][1](*values) for kind, values in c.exts.items()}
    bth = Bth(c.opcode, solicited=c.solicited, mig_req=c.mig_req, tver=c.tver, pkey=c.pkey,
              fecn=c.fecn, becn=c.becn, dest_qp=c.dest_qp, ack_req=c.ack_req, psn=c.psn)
    vlan = Vlan(pcp=c.vlan[0], vid=c.vlan[1]) if c.vlan is not None else None
    return build_roce_frame(
        src_mac=SRC_MAC, dst_mac=DST_MAC, src_ip=c.src_ip, dst_ip=c.dst_ip,
        src_port=c.src_port, bth=bth, payload=c.payload, dscp=c.dscp, ecn=c.ecn, vlan=vlan,
        ip_id=c.ip_id, ttl=c.ttl, ipv6=c.ipv6, flow_label=c.flow_label, **kwargs)


@settings(max_examples=120, deadline=None)
@given(roce_case())
def test_netio_builds_the_bytes_scapy_builds(c: Case) -> None:
    assert netio_frame(c) == scapy_frame(c)


@settings(max_examples=120, deadline=None)
@given(roce_case())
def test_netio_decodes_scapy_packets(c: Case) -> None:
    frame = decode_frame(scapy_frame(c))
    assert frame.roce is not None and frame.udp is not None
    assert frame.icrc_ok() is True
    bth = frame.roce.bth
    assert bth.opcode is c.opcode
    assert (bth.solicited, bth.mig_req, bth.tver, bth.pkey, bth.fecn, bth.becn, bth.dest_qp,
            bth.ack_req, bth.psn) == (c.solicited, c.mig_req, c.tver, c.pkey, c.fecn, c.becn,
                                      c.dest_qp, c.ack_req, c.psn)
    assert bth.pad_count == -len(c.payload) % 4
    assert frame.payload == c.payload
    assert frame.udp.src_port == c.src_port
    ip = frame.ip
    assert ip is not None
    assert (ip.src_ip, ip.dst_ip, ip.dscp, ip.ecn) == (c.src_ip, c.dst_ip, c.dscp, c.ecn)
    assert frame.priority == (c.vlan[0] if c.vlan is not None else None)
    for kind, values in c.exts.items():
        name, cls = NETIO_EXT[kind]
        assert getattr(frame.roce, name) == cls(*values)


@settings(max_examples=30, deadline=None)
@given(dest_qp=u24, ipv6=st.booleans())
def test_cnp_matches_scapy(dest_qp: int, ipv6: bool) -> None:
    src: IPv4Address | IPv6Address = IPv6Address("fd00::1") if ipv6 else IPv4Address("10.0.0.1")
    dst: IPv4Address | IPv6Address = IPv6Address("fd00::2") if ipv6 else IPv4Address("10.0.0.2")
    l3 = (IPv6(src=str(src), dst=str(dst), tc=48 << 2, hlim=64) if ipv6
          else IP(src=str(src), dst=str(dst), tos=48 << 2, id=0, flags="DF"))
    theirs = bytes(Ether(src=format_mac(SRC_MAC), dst=format_mac(DST_MAC)) / l3
                   / UDP(sport=49152, dport=4791, chksum=0) / cnp(dest_qp))
    ours = build_roce_frame(src_mac=SRC_MAC, dst_mac=DST_MAC, src_ip=src, dst_ip=dst,
                            src_port=49152, bth=cnp_bth(dest_qp), dscp=48)
    assert ours == theirs
    frame = decode_frame(theirs)
    assert frame.roce is not None and frame.roce.cnp is not None
    assert frame.roce.bth.opcode is Opcode.CNP and frame.roce.bth.becn
    assert frame.roce.bth.dest_qp == dest_qp and frame.payload == b""
    assert frame.icrc_ok() is True


@settings(max_examples=60, deadline=None)
@given(vector=u8, quanta=st.tuples(*[u16] * 8),
       vlan=st.none() | st.tuples(st.integers(0, 7), st.integers(0, 4095)))
def test_pfc_matches_scapy(vector: int, quanta: tuple[int, ...],
                           vlan: tuple[int, int] | None) -> None:
    fields = {f"c{i}_enabled": (vector >> i) & 1 for i in range(8)}
    fields.update({f"c{i}_pause_time": quanta[i] for i in range(8)})
    l2 = Ether(src=format_mac(SRC_MAC), dst="01:80:c2:00:00:01")
    if vlan is not None:
        l2 = l2 / Dot1Q(prio=vlan[0], vlan=vlan[1])
    theirs = bytes(l2 / MACControlClassBasedFlowControl(**fields))
    ours = build_pfc_frame(SRC_MAC, vector, quanta,
                           vlan=Vlan(vlan[0], vid=vlan[1]) if vlan is not None else None)
    assert ours == theirs
    frame = decode_frame(theirs)
    assert frame.pfc is not None and frame.pause is None
    assert frame.pfc.class_enable_vector == vector and frame.pfc.quanta == quanta


@settings(max_examples=30, deadline=None)
@given(quanta=u16)
def test_pause_matches_scapy(quanta: int) -> None:
    theirs = bytes(Ether(src=format_mac(SRC_MAC), dst="01:80:c2:00:00:01")
                   / MACControlPause(pause_time=quanta))
    assert build_pause_frame(SRC_MAC, quanta) == theirs
    frame = decode_frame(theirs)
    assert frame.pause is not None and frame.pause.quanta == quanta and frame.pfc is None
