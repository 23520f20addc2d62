"""Whole-frame decoding (all link types, VLANs, truncation, damage) and the RoCE builders."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netio.errors import DecodeError, EncodeError
from netio.wire.bth import Bth, ExtHeader, Opcode, opcode_info
from netio.wire.ethernet import Ethernet, EtherType, Vlan
from netio.wire.ext import Aeth, AtomicAckEth, AtomicEth, Deth, Feth, Ieth, ImmDt, Reth
from netio.wire.icrc import verify_icrc
from netio.wire.ip import Ecn, IpProto, Ipv4
from netio.wire.link import LinkType, Sll, Sll2
from netio.wire.mad import CmMessage, Mad
from netio.wire.packet import (
    build_roce_frame,
    build_roce_ip_packet,
    build_roce_udp_payload,
    decode_frame,
    decode_roce,
)
from netio.wire.udp import Udp

MAC_A = bytes.fromhex("52540077000a")
MAC_B = bytes.fromhex("52540077000b")
IP_A = IPv4Address("10.77.0.10")
IP_B = IPv4Address("10.77.0.11")


def send_frame(payload: bytes = b"hello RoCE", **kwargs: object) -> bytes:
    return build_roce_frame(src_mac=MAC_A, dst_mac=MAC_B, src_ip=IP_A, dst_ip=IP_B,
                            src_port=49152, bth=Bth(Opcode.RC_SEND_ONLY, dest_qp=0x11, psn=5,
                                                    ack_req=True),
                            payload=payload, **kwargs)  # type: ignore[arg-type]


@settings(max_examples=80, deadline=None)
@given(payload=st.binary(max_size=200), psn=st.integers(0, 0xFFFFFF),
       qp=st.integers(0, 0xFFFFFF), ipv6=st.booleans(), ecn=st.sampled_from(list(Ecn)),
       pcp=st.none() | st.integers(0, 7), ip_id=st.integers(0, 0xFFFF))
def test_built_frames_decode_and_the_three_builders_agree(
        payload: bytes, psn: int, qp: int, ipv6: bool, ecn: Ecn, pcp: int | None,
        ip_id: int) -> None:
    src = IPv6Address("fd00::1") if ipv6 else IP_A
    dst = IPv6Address("fd00::2") if ipv6 else IP_B
    bth = Bth(Opcode.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, dest_qp=qp, psn=psn)
    common = dict(src_ip=src, dst_ip=dst, src_port=4000, bth=bth,
                  reth=Reth(0x1000, 0x42, len(payload)), imm_dt=ImmDt(0xDEADBEEF),
                  payload=payload, ip_id=ip_id)
    vlan = Vlan(pcp=pcp, vid=10) if pcp is not None else None
    frame_bytes = build_roce_frame(src_mac=MAC_A, dst_mac=MAC_B, ecn=ecn, vlan=vlan,
                                   **common)  # type: ignore[arg-type]
    frame = decode_frame(frame_bytes)
    assert frame.roce is not None and frame.icrc_ok() is True
    assert frame.roce.bth == Bth(bth.opcode, dest_qp=qp, psn=psn, pad_count=-len(payload) % 4)
    assert frame.roce.reth == Reth(0x1000, 0x42, len(payload))
    assert frame.roce.imm_dt == ImmDt(0xDEADBEEF)
    assert frame.payload == payload and frame.ecn is ecn and frame.priority == pcp
    l2_bytes = 14 + (4 if vlan else 0)
    ip_packet = build_roce_ip_packet(ecn=ecn, **common)  # type: ignore[arg-type]
    assert frame_bytes[l2_bytes:] == ip_packet == frame.ip_packet
    udp_payload = build_roce_udp_payload(**common)  # type: ignore[arg-type]
    ip_header_bytes = 40 if ipv6 else 20
    assert ip_packet[ip_header_bytes + 8:] == udp_payload
    headers, body, icrc = decode_roce(udp_payload)
    assert headers == frame.roce and body == payload and icrc == frame.icrc


def test_every_opcode_builds_and_decodes() -> None:
    ext = {"reth": Reth(1, 2, 3), "aeth": Aeth.ack(1), "atomic_eth": AtomicEth(8, 9, 10, 11),
           "deth": Deth(0x11111111, 3), "imm_dt": ImmDt(5)}
    extra = {ExtHeader.ATOMIC_ACK_ETH: ("atomic_ack_eth", AtomicAckEth(77)),
             ExtHeader.IETH: ("ieth", Ieth(0x99)), ExtHeader.FETH: ("feth", Feth(1, 2))}
    names = {ExtHeader.RETH: "reth", ExtHeader.AETH: "aeth", ExtHeader.ATOMIC_ETH: "atomic_eth",
             ExtHeader.DETH: "deth", ExtHeader.IMM_DT: "imm_dt"}
    for op in Opcode:
        info = opcode_info(op)
        kwargs: dict[str, object] = {}
        for kind in info.headers:
            if kind in names:
                kwargs[names[kind]] = ext[names[kind]]
            elif kind in extra:
                kwargs[extra[kind][0]] = extra[kind][1]
        payload = b"12345678" if info.has_payload else b""
        raw = build_roce_frame(src_mac=MAC_A, dst_mac=MAC_B, src_ip=IP_A, dst_ip=IP_B,
                               src_port=1, bth=Bth(op, dest_qp=7), payload=payload,
                               **kwargs)  # type: ignore[arg-type]
        frame = decode_frame(raw)
        assert frame.roce is not None and frame.roce.bth.opcode is op, op
        assert frame.payload == payload and frame.icrc_ok() is True, op
        for name, value in kwargs.items():
            assert getattr(frame.roce, name) == value, (op, name)


def test_cooked_and_raw_link_types() -> None:
    raw = send_frame()
    ip_packet = raw[14:]
    expected = decode_frame(raw).roce
    sll = Sll(0, 1, 6, MAC_A + b"\x00\x00", EtherType.IPV4).encode()
    sll2 = Sll2(EtherType.IPV4, 3, 1, 4, 6, MAC_A + b"\x00\x00").encode()
    cases = [(LinkType.LINUX_SLL, sll + ip_packet), (LinkType.LINUX_SLL2, sll2 + ip_packet),
             (LinkType.RAW, ip_packet), (LinkType.IPV4, ip_packet)]
    for linktype, data in cases:
        frame = decode_frame(data, linktype)
        assert frame.roce == expected and frame.icrc_ok() is True, linktype
        assert frame.linktype == linktype and frame.ethernet is None
    assert isinstance(decode_frame(cases[0][1], LinkType.LINUX_SLL).cooked, Sll)
    v6 = build_roce_ip_packet(src_ip=IPv6Address("fd00::1"), dst_ip=IPv6Address("fd00::2"),
                              src_port=1, bth=Bth(Opcode.UC_SEND_ONLY), payload=b"x")
    for linktype in (LinkType.RAW, LinkType.IPV6):
        frame = decode_frame(v6, linktype)
        assert frame.ipv6 is not None and frame.icrc_ok() is True
    # a VLAN-tagged cooked capture: SLL protocol 0x8100, then the tag
    tagged = Sll(0, 1, 6, bytes(8), EtherType.VLAN).encode() + Vlan(5, False, 7).encode()
    frame = decode_frame(tagged + ip_packet, LinkType.LINUX_SLL)
    assert frame.priority == 5 and frame.icrc_ok() is True
    with pytest.raises(DecodeError) as err:
        decode_frame(raw, 9999)
    assert err.value.header == "link"
    with pytest.raises(DecodeError):
        decode_frame(b"\x75" + ip_packet[1:], LinkType.RAW)


def test_qinq_and_ethernet_padding() -> None:
    ip_packet = send_frame()[14:]
    qinq = (Ethernet(MAC_B, MAC_A, EtherType.QINQ).encode() + Vlan(6, False, 100, 0x8100).encode()
            + Vlan(3, True, 200, 0x0800).encode())
    frame = decode_frame(qinq + ip_packet + bytes(20))  # trailing Ethernet padding is ignored
    assert [v.vid for v in frame.vlans] == [100, 200] and frame.priority == 6
    assert frame.icrc_ok() is True and frame.payload == b"hello RoCE"
    many = Ethernet(MAC_B, MAC_A, 0x8100).encode() + Vlan(0, False, 1, 0x8100).encode() * 5
    with pytest.raises(DecodeError) as err:
        decode_frame(many + ip_packet)
    assert err.value.header == "VLAN"


def test_truncated_frames() -> None:
    raw = send_frame(payload=bytes(range(200)))
    with pytest.raises(DecodeError) as err:
        decode_frame(raw[:100])
    assert (err.value.header, err.value.offset) == ("IPv4", 14)
    assert "captured" in err.value.reason
    frame = decode_frame(raw[:100], allow_truncated=True)
    assert frame.truncated and frame.roce is not None and frame.icrc is None
    assert frame.icrc_ok() is None and frame.payload == bytes(range(100 - 54))
    # cut inside the BTH: IP and UDP decode, the RoCE headers do not
    frame = decode_frame(raw[:50], allow_truncated=True)
    assert frame.udp is not None and frame.roce is None and frame.truncated
    frame = decode_frame(raw[:38], allow_truncated=True)
    assert frame.ipv4 is not None and frame.udp is None


def _patch(frame: bytes, offset: int, data: bytes) -> bytes:
    return frame[:offset] + data + frame[offset + len(data):]


def test_damage_names_header_offset_and_reason() -> None:
    raw = send_frame()
    cases = [
        (raw[:13], "Ethernet", 0),
        (_patch(raw, 14, b"\x65"), "IPv4", 14),  # version 6 in an IPv4 EtherType
        (_patch(raw, 14, b"\x44"), "IPv4", 14),  # IHL 4
        (_patch(raw, 16, b"\x00\x10"), "IPv4", 14),  # total length below the header
        (_patch(raw, 38, b"\xff\xff"), "UDP", 34),  # UDP length beyond the IP payload
        (_patch(raw, 38, b"\x00\x04"), "UDP", 34),  # UDP length below 8
        (_patch(raw, 42, b"\x40"), "BTH", 42),  # RD opcode
        (_patch(raw, 42, b"\x11"), "BTH", 42),  # ACK: needs an AETH... and has payload
    ]
    for data, header, offset in cases:
        with pytest.raises(DecodeError) as err:
            decode_frame(data)
        assert (err.value.header, err.value.offset) == (header, offset), err.value


def test_bth_pad_and_payload_consistency() -> None:
    ack = build_roce_frame(src_mac=MAC_A, dst_mac=MAC_B, src_ip=IP_A, dst_ip=IP_B, src_port=1,
                           bth=Bth(Opcode.RC_ACKNOWLEDGE), aeth=Aeth.ack(3))
    assert decode_frame(ack).roce is not None
    with pytest.raises(DecodeError) as err:
        decode_frame(_patch(ack, 43, b"\x30"))  # pad count 3 on a packet without payload
    assert err.value.header == "BTH" and "pad" in err.value.reason
    # an empty SEND claiming pad count 3
    send = send_frame(payload=b"")
    with pytest.raises(DecodeError) as err:
        decode_frame(_patch(send, 43, b"\x70"))
    assert "pad count 3" in err.value.reason


def test_mad_decoding_and_short_mad() -> None:
    mad = Mad(attribute_id=CmMessage.RTU, transaction_id=99).encode() + bytes(232)
    raw = build_roce_frame(src_mac=MAC_A, dst_mac=MAC_B, src_ip=IP_A, dst_ip=IP_B, src_port=1,
                           bth=Bth(Opcode.UD_SEND_ONLY, dest_qp=1), deth=Deth(0x80010000, 1),
                           payload=mad)
    frame = decode_frame(raw)
    assert frame.roce is not None and frame.roce.mad is not None
    assert frame.roce.mad.cm_message is CmMessage.RTU and frame.payload == mad
    short = build_roce_frame(src_mac=MAC_A, dst_mac=MAC_B, src_ip=IP_A, dst_ip=IP_B, src_port=1,
                             bth=Bth(Opcode.UD_SEND_ONLY, dest_qp=1), deth=Deth(0x80010000, 1),
                             payload=bytes(20))
    with pytest.raises(DecodeError) as err:
        decode_frame(short)
    assert err.value.header == "MAD" and err.value.offset == 62
    # UD to another QP carries no MAD
    other = build_roce_frame(src_mac=MAC_A, dst_mac=MAC_B, src_ip=IP_A, dst_ip=IP_B, src_port=1,
                             bth=Bth(Opcode.UD_SEND_ONLY, dest_qp=2), deth=Deth(1, 1),
                             payload=bytes(20))
    other_frame = decode_frame(other)
    assert other_frame.roce is not None and other_frame.roce.mad is None


def test_non_roce_traffic() -> None:
    ip = Ipv4(IP_A, IP_B, IpProto.UDP, total_length=20 + 8 + 4)
    dns = (Ethernet(MAC_B, MAC_A, EtherType.IPV4).encode() + ip.encode()
           + Udp(5353, 53, 12).encode() + b"abcd")
    frame = decode_frame(dns)
    assert frame.udp is not None and frame.roce is None and frame.payload == b"abcd"
    assert frame.icrc_ok() is None
    tcp_ip = Ipv4(IP_A, IP_B, IpProto.TCP, total_length=24)
    frame = decode_frame(Ethernet(MAC_B, MAC_A, 0x0800).encode() + tcp_ip.encode() + b"tcp!")
    assert frame.udp is None and frame.payload == b"tcp!"
    frag = Ipv4(IP_A, IP_B, IpProto.UDP, total_length=24, more_fragments=True)
    frame = decode_frame(Ethernet(MAC_B, MAC_A, 0x0800).encode() + frag.encode() + b"frag")
    assert frame.udp is None and frame.ipv4 is not None and frame.ipv4.is_fragment
    arp = Ethernet(MAC_B, MAC_A, EtherType.ARP).encode() + bytes(28)
    frame = decode_frame(arp)
    assert frame.ip is None and frame.payload == bytes(28)
    control = Ethernet(MAC_B, MAC_A, EtherType.MAC_CONTROL).encode() + b"\x00\x02" + bytes(44)
    frame = decode_frame(control)  # a MAC Control opcode that is neither PAUSE nor PFC
    assert frame.pfc is None and frame.pause is None


def test_builder_rejects_inconsistent_requests() -> None:
    common = dict(src_mac=MAC_A, dst_mac=MAC_B, src_ip=IP_A, dst_ip=IP_B, src_port=1)
    with pytest.raises(EncodeError, match="needs a RETH"):
        build_roce_frame(bth=Bth(Opcode.RC_RDMA_WRITE_FIRST), payload=b"x",
                         **common)  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="carries no AETH"):
        build_roce_frame(bth=Bth(Opcode.RC_SEND_ONLY), aeth=Aeth.ack(1),
                         **common)  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="carries no payload"):
        build_roce_frame(bth=Bth(Opcode.RC_ACKNOWLEDGE), aeth=Aeth.ack(1), payload=b"x",
                         **common)  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="differ in IP version"):
        build_roce_frame(src_mac=MAC_A, dst_mac=MAC_B, src_ip=IP_A, dst_ip=IPv6Address("::1"),
                         src_port=1, bth=Bth(Opcode.RC_SEND_ONLY))
    with pytest.raises(EncodeError, match="ipv6=True"):
        build_roce_frame(bth=Bth(Opcode.RC_SEND_ONLY), ipv6=True,
                         **common)  # type: ignore[arg-type]
    with pytest.raises(EncodeError):
        build_roce_frame(src_mac=b"\x00", dst_mac=MAC_B, src_ip=IP_A, dst_ip=IP_B, src_port=1,
                         bth=Bth(Opcode.RC_SEND_ONLY))
    with pytest.raises(EncodeError, match="not an IP address"):
        build_roce_frame(src_mac=MAC_A, dst_mac=MAC_B, src_ip="10.0.0.300", dst_ip=IP_B,
                         src_port=1, bth=Bth(Opcode.RC_SEND_ONLY))
    # string addresses are accepted
    raw = build_roce_frame(src_mac=MAC_A, dst_mac=MAC_B, src_ip="10.0.0.1", dst_ip="10.0.0.2",
                           src_port=1, bth=Bth(Opcode.RC_SEND_ONLY))
    assert verify_icrc(raw[14:])
