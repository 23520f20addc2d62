"""Whole-frame codec: link layer .. RoCEv2 payload, and RoCEv2 packet builders.

:func:`decode_frame` turns a captured frame (any :class:`LinkType`) into a
:class:`Frame`; :func:`decode_roce` decodes a UDP payload on port 4791.
The builders produce RoCEv2 packets with correct lengths, IPv4 checksum,
pad count and ICRC, as a whole Ethernet frame, an IP packet, or the UDP
payload a socket-based driver sends.

Decoding is the soft-RoCE engine's per-packet cost, so it reads each header
with one precompiled ``struct`` unpack and checks bounds once per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from ipaddress import IPv4Address, IPv6Address, ip_address

from netio.errors import DecodeError, EncodeError
from netio.wire._fields import check_mac
from netio.wire.bth import OPCODE_TABLE, Bth, ExtHeader, Opcode, Transport
from netio.wire.cnp import Cnp
from netio.wire.ethernet import VLAN_ETHERTYPES, Ethernet, EtherType, Vlan
from netio.wire.ext import Aeth, AtomicAckEth, AtomicEth, Deth, Feth, Ieth, ImmDt, Reth
from netio.wire.icrc import Buffer, icrc_bytes, verify_icrc
from netio.wire.ip import Ecn, IpProto, Ipv4, Ipv6
from netio.wire.link import LinkType, Sll, Sll2
from netio.wire.mad import GSI_QP, Mad
from netio.wire.pfc import PauseFrame, PfcFrame, decode_mac_control
from netio.wire.udp import ROCEV2_UDP_PORT, Udp

_ICRC_BYTES = 4
#: Most VLAN tags decode_frame follows before giving up (QinQ uses two).
MAX_VLAN_TAGS = 4


@dataclass(frozen=True, slots=True)
class RoceHeaders:
    """The transport headers of one RoCEv2 packet; absent ones are None."""

    bth: Bth
    reth: Reth | None = None
    aeth: Aeth | None = None
    atomic_eth: AtomicEth | None = None
    atomic_ack_eth: AtomicAckEth | None = None
    imm_dt: ImmDt | None = None
    ieth: Ieth | None = None
    deth: Deth | None = None
    mad: Mad | None = None  # UD packets to QP1 (the MAD is also the start of the payload)
    feth: Feth | None = None
    cnp: Cnp | None = None


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame.

    ``payload`` is the RoCE payload (without pad and ICRC) for RoCEv2
    packets, otherwise the bytes after the last decoded header (UDP payload,
    IP payload, or the L3 bytes of an unknown EtherType). ``raw`` is the frame
    as given and ``l3_offset:l3_end`` the IP packet inside it (ICRC checks
    use them). ``truncated`` is set when ``allow_truncated`` let a frame cut
    short by the capture's snap length decode (then ``icrc`` is None).
    """

    linktype: int
    ethernet: Ethernet | None = None
    vlans: tuple[Vlan, ...] = ()
    ipv4: Ipv4 | None = None
    ipv6: Ipv6 | None = None
    udp: Udp | None = None
    roce: RoceHeaders | None = None
    payload: bytes = b""
    icrc: int | None = None
    pfc: PfcFrame | None = None
    pause: PauseFrame | None = None
    cooked: Sll | Sll2 | None = None
    truncated: bool = False
    raw: bytes | bytearray | memoryview = field(default=b"", repr=False, compare=False)
    l3_offset: int = 0
    l3_end: int = 0

    @property
    def ip(self) -> Ipv4 | Ipv6 | None:
        return self.ipv4 if self.ipv4 is not None else self.ipv6

    @property
    def priority(self) -> int | None:
        """PCP of the outermost VLAN tag, None if untagged."""
        return self.vlans[0].pcp if self.vlans else None

    @property
    def bth(self) -> Bth | None:
        return self.roce.bth if self.roce is not None else None

    @property
    def ecn(self) -> Ecn | None:
        ip = self.ip
        return ip.ecn if ip is not None else None

    @property
    def dscp(self) -> int | None:
        ip = self.ip
        return ip.dscp if ip is not None else None

    @property
    def ip_packet(self) -> bytes:
        """The IP packet (header .. ICRC) as bytes; empty for non-IP frames."""
        return bytes(self.raw[self.l3_offset:self.l3_end])

    def icrc_ok(self) -> bool | None:
        """Whether the ICRC verifies; None for non-RoCE or truncated frames."""
        if self.roce is None or self.icrc is None:
            return None
        return verify_icrc(memoryview(self.raw)[self.l3_offset:self.l3_end])


def _decode_roce(buf: Buffer, start: int, end: int,
                 captured: int) -> tuple[RoceHeaders | None, bytes, int | None]:
    """Decode the RoCEv2 headers in ``buf[start:end]``; only ``buf[:captured]`` exists.

    Returns (headers, payload, icrc); headers is None only when the packet is
    truncated (``captured < end``) before the end of its headers.
    """
    truncated = captured < end
    if end - start < 12 + _ICRC_BYTES:
        raise DecodeError("BTH", start, f"{end - start} bytes cannot hold a BTH and an ICRC")
    if captured - start < 12:
        return None, bytes(buf[start:captured]), None
    bth = Bth.decode(buf, start)
    info = OPCODE_TABLE[bth.opcode]
    if info is None:  # Bth.decode rejects unknown opcodes; keeps mypy sure of it
        raise DecodeError("BTH", start, f"opcode 0x{bth.opcode:02x} is unknown")
    pos = start + 12
    hdr_end = pos + info.header_bytes
    payload_end = end - _ICRC_BYTES - bth.pad_count
    if hdr_end > end - _ICRC_BYTES:
        raise DecodeError("BTH", start, f"{info.opcode.name} needs {info.header_bytes} bytes "
                                        f"of extension headers, {end - _ICRC_BYTES - pos} "
                                        "bytes precede the ICRC")
    if payload_end < hdr_end:
        raise DecodeError("BTH", start, f"pad count {bth.pad_count} exceeds the "
                                        f"{end - _ICRC_BYTES - hdr_end}-byte payload")
    if not info.has_payload and payload_end != hdr_end:
        raise DecodeError("BTH", start, f"{info.opcode.name} carries no payload, but "
                                        f"{payload_end - hdr_end} bytes follow its headers")
    if hdr_end > captured:
        return None, bytes(buf[start:captured]), None
    reth = aeth = atomic_eth = atomic_ack_eth = imm_dt = ieth = deth = feth = cnp = None
    for kind in info.headers:
        if kind is ExtHeader.RETH:
            reth = Reth.decode(buf, pos)
            pos += 16
        elif kind is ExtHeader.AETH:
            aeth = Aeth.decode(buf, pos)
            pos += 4
        elif kind is ExtHeader.DETH:
            deth = Deth.decode(buf, pos)
            pos += 8
        elif kind is ExtHeader.IMM_DT:
            imm_dt = ImmDt.decode(buf, pos)
            pos += 4
        elif kind is ExtHeader.ATOMIC_ETH:
            atomic_eth = AtomicEth.decode(buf, pos)
            pos += 28
        elif kind is ExtHeader.ATOMIC_ACK_ETH:
            atomic_ack_eth = AtomicAckEth.decode(buf, pos)
            pos += 8
        elif kind is ExtHeader.IETH:
            ieth = Ieth.decode(buf, pos)
            pos += 4
        elif kind is ExtHeader.FETH:
            feth = Feth.decode(buf, pos)
            pos += 4
        else:  # ExtHeader.CNP_PADDING
            cnp = Cnp.decode(buf, pos)
            pos += 16
    mad = None
    if info.transport is Transport.UD and bth.dest_qp == GSI_QP:
        if payload_end - pos < Mad.SIZE_BYTES:
            raise DecodeError("MAD", pos, f"a UD packet to QP1 carries a MAD, but its payload "
                                          f"is {payload_end - pos} bytes")
        if captured - pos >= Mad.SIZE_BYTES:
            mad = Mad.decode(buf, pos)
    headers = RoceHeaders(bth, reth, aeth, atomic_eth, atomic_ack_eth, imm_dt, ieth, deth, mad,
                          feth, cnp)
    if truncated:
        return headers, bytes(buf[pos:min(payload_end, captured)]), None
    icrc = int.from_bytes(buf[end - 4:end], "little")
    return headers, bytes(buf[pos:payload_end]), icrc


def decode_roce(udp_payload: Buffer) -> tuple[RoceHeaders, bytes, int]:
    """Decode a RoCEv2 UDP payload: (headers, payload without pad, ICRC as stored)."""
    end = len(udp_payload)
    headers, payload, icrc = _decode_roce(udp_payload, 0, end, end)
    if headers is None or icrc is None:  # cannot happen when nothing is truncated
        raise DecodeError("BTH", 0, "RoCEv2 headers incomplete")
    return headers, payload, icrc


def decode_frame(frame: Buffer, linktype: int = LinkType.ETHERNET, *,
                 allow_truncated: bool = False) -> Frame:
    """Decode one captured frame of link type ``linktype``.

    Raises DecodeError (naming the header, its offset and the reason) for a
    short or inconsistent header. With ``allow_truncated``, a frame whose IP
    packet extends past the captured bytes decodes as far as it goes and
    comes back with ``truncated=True``.
    """
    n = len(frame)
    ethernet: Ethernet | None = None
    cooked: Sll | Sll2 | None = None
    if linktype == LinkType.ETHERNET:
        ethernet = Ethernet.decode(frame, 0)
        ethertype = ethernet.ethertype
        off = 14
    elif linktype == LinkType.LINUX_SLL:
        cooked = Sll.decode(frame, 0)
        ethertype = cooked.protocol
        off = 16
    elif linktype == LinkType.LINUX_SLL2:
        cooked = Sll2.decode(frame, 0)
        ethertype = cooked.protocol
        off = 20
    elif linktype == LinkType.RAW:
        if n < 1:
            raise DecodeError("IP", 0, "empty raw-IP frame")
        version = frame[0] >> 4
        if version == 4:
            ethertype = EtherType.IPV4
        elif version == 6:
            ethertype = EtherType.IPV6
        else:
            raise DecodeError("IP", 0, f"raw-IP frame with IP version {version}")
        off = 0
    elif linktype == LinkType.IPV4:
        ethertype, off = EtherType.IPV4, 0
    elif linktype == LinkType.IPV6:
        ethertype, off = EtherType.IPV6, 0
    else:
        raise DecodeError("link", 0, f"unsupported link type {linktype}")

    vlans: tuple[Vlan, ...] = ()
    while ethertype in VLAN_ETHERTYPES:
        if len(vlans) == MAX_VLAN_TAGS:
            raise DecodeError("VLAN", off, f"more than {MAX_VLAN_TAGS} VLAN tags")
        vlan = Vlan.decode(frame, off)
        vlans += (vlan,)
        ethertype = vlan.ethertype
        off += 4

    if ethertype == EtherType.IPV4:
        ipv4 = Ipv4.decode(frame, off)
        return _decode_l4(frame, linktype, ethernet, cooked, vlans, ipv4, None, off,
                          off + ipv4.total_length, off + ipv4.header_bytes,
                          ipv4.protocol if not ipv4.is_fragment else -1, allow_truncated)
    if ethertype == EtherType.IPV6:
        ipv6 = Ipv6.decode(frame, off)
        return _decode_l4(frame, linktype, ethernet, cooked, vlans, None, ipv6, off,
                          off + 40 + ipv6.payload_length, off + 40, ipv6.next_header,
                          allow_truncated)
    pfc = pause = None
    if ethertype == EtherType.MAC_CONTROL:
        control = decode_mac_control(frame, off)
        if isinstance(control, PfcFrame):
            pfc = control
        elif isinstance(control, PauseFrame):
            pause = control
    return Frame(linktype, ethernet, vlans, None, None, None, None, bytes(frame[off:]), None,
                 pfc, pause, cooked, False, frame, off, off)


def _decode_l4(frame: Buffer, linktype: int, ethernet: Ethernet | None,
               cooked: Sll | Sll2 | None, vlans: tuple[Vlan, ...], ipv4: Ipv4 | None,
               ipv6: Ipv6 | None, l3_off: int, l3_end: int, l4_off: int, protocol: int,
               allow_truncated: bool) -> Frame:
    n = len(frame)
    truncated = l3_end > n
    if truncated and not allow_truncated:
        name = "IPv4" if ipv4 is not None else "IPv6"
        raise DecodeError(name, l3_off, f"packet length {l3_end - l3_off} exceeds the "
                                        f"{n - l3_off} bytes captured")
    captured = min(l3_end, n)
    if protocol != IpProto.UDP:
        return Frame(linktype, ethernet, vlans, ipv4, ipv6, None, None,
                     bytes(frame[l4_off:captured]), None, None, None, cooked, truncated, frame,
                     l3_off, l3_end)
    if truncated and captured - l4_off < 8:
        return Frame(linktype, ethernet, vlans, ipv4, ipv6, None, None,
                     bytes(frame[l4_off:captured]), None, None, None, cooked, truncated, frame,
                     l3_off, l3_end)
    if l3_end - l4_off < 8:
        raise DecodeError("UDP", l4_off, f"need 8 bytes, the IP payload has {l3_end - l4_off}")
    udp = Udp.decode(frame, l4_off)
    udp_end = l4_off + udp.length
    if udp_end > l3_end:
        raise DecodeError("UDP", l4_off, f"length {udp.length} exceeds the {l3_end - l4_off}"
                                         "-byte IP payload")
    if udp.dst_port != ROCEV2_UDP_PORT:
        return Frame(linktype, ethernet, vlans, ipv4, ipv6, udp, None,
                     bytes(frame[l4_off + 8:min(udp_end, captured)]), None, None, None, cooked,
                     truncated, frame, l3_off, l3_end)
    roce, payload, icrc = _decode_roce(frame, l4_off + 8, udp_end, captured)
    # The ICRC covers the IP packet up to the end of the UDP datagram.
    return Frame(linktype, ethernet, vlans, ipv4, ipv6, udp, roce, payload, icrc, None, None,
                 cooked, truncated, frame, l3_off, udp_end)


# --------------------------------------------------------------------------- builders

IpAddress = IPv4Address | IPv6Address


def _addr(value: IpAddress | str) -> IpAddress:
    if isinstance(value, IPv4Address | IPv6Address):
        return value
    try:
        return ip_address(value)
    except ValueError:
        raise EncodeError("IP", f"{value!r} is not an IP address") from None


def roce_transport_bytes(bth: Bth, *, reth: Reth | None = None, aeth: Aeth | None = None,
                         atomic_eth: AtomicEth | None = None,
                         atomic_ack_eth: AtomicAckEth | None = None, imm_dt: ImmDt | None = None,
                         ieth: Ieth | None = None, deth: Deth | None = None,
                         feth: Feth | None = None, cnp: Cnp | None = None,
                         payload: bytes = b"") -> bytes:
    """BTH + extension headers + payload + pad (no ICRC) for ``bth.opcode``.

    The extension headers given must be exactly those the opcode carries
    (IBTA Table 39); the BTH pad count is set from the payload length.
    """
    info = bth.info
    given = {ExtHeader.RETH: reth, ExtHeader.AETH: aeth, ExtHeader.ATOMIC_ETH: atomic_eth,
             ExtHeader.ATOMIC_ACK_ETH: atomic_ack_eth, ExtHeader.IMM_DT: imm_dt,
             ExtHeader.IETH: ieth, ExtHeader.DETH: deth, ExtHeader.FETH: feth,
             ExtHeader.CNP_PADDING: cnp}
    if cnp is None and info.opcode is Opcode.CNP:
        given[ExtHeader.CNP_PADDING] = Cnp()
    for kind, value in given.items():
        if value is not None and kind not in info.headers:
            raise EncodeError("BTH", f"{info.opcode.name} carries no {kind.name}")
    parts = []
    for kind in info.headers:
        value = given[kind]
        if value is None:
            raise EncodeError("BTH", f"{info.opcode.name} needs a {kind.name}")
        parts.append(value.encode())
    if payload and not info.has_payload:
        raise EncodeError("BTH", f"{info.opcode.name} carries no payload, got "
                                 f"{len(payload)} bytes")
    pad = -len(payload) % 4
    if bth.pad_count != pad:
        bth = replace(bth, pad_count=pad)
    return b"".join((bth.encode(), *parts, bytes(payload), bytes(pad)))


def _ip_packet(transport: bytes, *, src_ip: IpAddress | str, dst_ip: IpAddress | str,
               src_port: int, dst_port: int, dscp: int, ecn: Ecn, ip_id: int, ttl: int,
               ipv6: bool, flow_label: int, dont_fragment: bool) -> tuple[bytes, int]:
    """(IP packet with ICRC, IP header length)."""
    src, dst = _addr(src_ip), _addr(dst_ip)
    udp_length = 8 + len(transport) + _ICRC_BYTES
    udp = Udp(src_port, dst_port, udp_length, 0).encode()
    if isinstance(src, IPv6Address) and isinstance(dst, IPv6Address):
        ip_header = Ipv6(src, dst, IpProto.UDP, dscp, ecn, flow_label, udp_length, ttl).encode()
    elif isinstance(src, IPv4Address) and isinstance(dst, IPv4Address):
        if ipv6:
            raise EncodeError("IP", "ipv6=True needs IPv6 source and destination addresses")
        ip_header = Ipv4(src, dst, IpProto.UDP, dscp, ecn, 20 + udp_length, ip_id,
                         dont_fragment, ttl).encode()
    else:
        raise EncodeError("IP", f"source {src} and destination {dst} differ in IP version")
    packet = ip_header + udp + transport
    return packet + icrc_bytes(packet), len(ip_header)


def build_roce_ip_packet(*, src_ip: IpAddress | str, dst_ip: IpAddress | str, src_port: int,
                         bth: Bth, reth: Reth | None = None, aeth: Aeth | None = None,
                         atomic_eth: AtomicEth | None = None,
                         atomic_ack_eth: AtomicAckEth | None = None,
                         imm_dt: ImmDt | None = None, ieth: Ieth | None = None,
                         deth: Deth | None = None, feth: Feth | None = None,
                         cnp: Cnp | None = None, payload: bytes = b"", dscp: int = 0,
                         ecn: Ecn = Ecn.NOT_ECT, ip_id: int = 0, ttl: int = 64,
                         ipv6: bool = False, flow_label: int = 0,
                         dst_port: int = ROCEV2_UDP_PORT, dont_fragment: bool = True) -> bytes:
    """A RoCEv2 IP packet (IPv4 or IPv6 by the addresses) with valid checksum and ICRC."""
    transport = roce_transport_bytes(bth, reth=reth, aeth=aeth, atomic_eth=atomic_eth,
                                     atomic_ack_eth=atomic_ack_eth, imm_dt=imm_dt, ieth=ieth,
                                     deth=deth, feth=feth, cnp=cnp, payload=payload)
    packet, _ = _ip_packet(transport, src_ip=src_ip, dst_ip=dst_ip, src_port=src_port,
                           dst_port=dst_port, dscp=dscp, ecn=ecn, ip_id=ip_id, ttl=ttl,
                           ipv6=ipv6, flow_label=flow_label, dont_fragment=dont_fragment)
    return packet


def build_roce_udp_payload(*, src_ip: IpAddress | str, dst_ip: IpAddress | str, src_port: int,
                           bth: Bth, reth: Reth | None = None, aeth: Aeth | None = None,
                           atomic_eth: AtomicEth | None = None,
                           atomic_ack_eth: AtomicAckEth | None = None,
                           imm_dt: ImmDt | None = None, ieth: Ieth | None = None,
                           deth: Deth | None = None, feth: Feth | None = None,
                           cnp: Cnp | None = None, payload: bytes = b"", ip_id: int = 0,
                           dont_fragment: bool = True, dst_port: int = ROCEV2_UDP_PORT) -> bytes:
    """What a UDP-socket driver sends: BTH .. payload, pad and ICRC.

    The ICRC covers the IP and UDP headers the kernel will write, so pass
    the addresses, ports, IPv4 ID and DF flag it will use (Linux sends IP ID 0
    with DF through an unconnected socket with IP_PMTUDISC_DO). TOS, TTL and
    checksums are masked out of the ICRC, so they do not matter here.
    """
    packet = build_roce_ip_packet(src_ip=src_ip, dst_ip=dst_ip, src_port=src_port, bth=bth,
                                  reth=reth, aeth=aeth, atomic_eth=atomic_eth,
                                  atomic_ack_eth=atomic_ack_eth, imm_dt=imm_dt, ieth=ieth,
                                  deth=deth, feth=feth, cnp=cnp, payload=payload, ip_id=ip_id,
                                  dst_port=dst_port, dont_fragment=dont_fragment)
    ip_header_bytes = 40 if packet[0] >> 4 == 6 else (packet[0] & 0xF) * 4
    return packet[ip_header_bytes + 8:]


def build_roce_frame(*, src_mac: bytes, dst_mac: bytes, src_ip: IpAddress | str,
                     dst_ip: IpAddress | str, src_port: int, bth: Bth, reth: Reth | None = None,
                     aeth: Aeth | None = None, atomic_eth: AtomicEth | None = None,
                     atomic_ack_eth: AtomicAckEth | None = None, imm_dt: ImmDt | None = None,
                     ieth: Ieth | None = None, deth: Deth | None = None,
                     feth: Feth | None = None, cnp: Cnp | None = None, payload: bytes = b"",
                     dscp: int = 0, ecn: Ecn = Ecn.NOT_ECT, vlan: Vlan | None = None,
                     ip_id: int = 0, ttl: int = 64, ipv6: bool = False, flow_label: int = 0,
                     dst_port: int = ROCEV2_UDP_PORT, dont_fragment: bool = True) -> bytes:
    """A whole RoCEv2 Ethernet frame (no FCS), optionally 802.1Q-tagged with ``vlan``'s PCP/VID."""
    check_mac("Ethernet", "src_mac", src_mac)
    check_mac("Ethernet", "dst_mac", dst_mac)
    packet = build_roce_ip_packet(src_ip=src_ip, dst_ip=dst_ip, src_port=src_port, bth=bth,
                                  reth=reth, aeth=aeth, atomic_eth=atomic_eth,
                                  atomic_ack_eth=atomic_ack_eth, imm_dt=imm_dt, ieth=ieth,
                                  deth=deth, feth=feth, cnp=cnp, payload=payload, dscp=dscp,
                                  ecn=ecn, ip_id=ip_id, ttl=ttl, ipv6=ipv6,
                                  flow_label=flow_label, dst_port=dst_port,
                                  dont_fragment=dont_fragment)
    l3_type = EtherType.IPV6 if packet[0] >> 4 == 6 else EtherType.IPV4
    if vlan is None:
        return Ethernet(dst_mac, src_mac, l3_type).encode() + packet
    tag = Vlan(vlan.pcp, vlan.dei, vlan.vid, l3_type)
    return Ethernet(dst_mac, src_mac, EtherType.VLAN).encode() + tag.encode() + packet
