"""netio.wire: the one wire codec (Ethernet .. RoCEv2, PFC/PAUSE, ICRC).

One module per header family; every header is a frozen, slotted dataclass
with ``encode()`` and ``decode(buf, offset)``. Whole frames go through
:mod:`netio.wire.packet`.
"""

from netio.wire.bth import (
    Bth,
    ExtHeader,
    Opcode,
    OpcodeInfo,
    Operation,
    Position,
    Transport,
    opcode_info,
)
from netio.wire.cnp import Cnp, cnp_bth
from netio.wire.ethernet import Ethernet, EtherType, Vlan, format_mac, parse_mac
from netio.wire.ext import (
    AckType,
    Aeth,
    AtomicAckEth,
    AtomicEth,
    Deth,
    Feth,
    Ieth,
    ImmDt,
    NakCode,
    Reth,
    rnr_timer_ns,
    rnr_timer_s,
)
from netio.wire.icrc import compute_icrc, crc32, crc32_reference, verify_icrc
from netio.wire.ip import Ecn, IpProto, Ipv4, Ipv6
from netio.wire.link import LinkType, Sll, Sll2
from netio.wire.mad import CmMessage, Mad, MgmtClass
from netio.wire.packet import (
    Frame,
    RoceHeaders,
    build_roce_frame,
    build_roce_ip_packet,
    build_roce_udp_payload,
    decode_frame,
    decode_roce,
)
from netio.wire.pfc import (
    PAUSE_DST_MAC,
    MacControlOpcode,
    PauseFrame,
    PfcFrame,
    build_pause_frame,
    build_pfc_frame,
    decode_mac_control,
    quanta_to_ns,
    quanta_to_s,
    s_to_quanta,
)
from netio.wire.udp import ROCEV2_UDP_PORT, Udp

__all__ = [
    "PAUSE_DST_MAC",
    "ROCEV2_UDP_PORT",
    "AckType",
    "Aeth",
    "AtomicAckEth",
    "AtomicEth",
    "Bth",
    "CmMessage",
    "Cnp",
    "Deth",
    "Ecn",
    "EtherType",
    "Ethernet",
    "ExtHeader",
    "Feth",
    "Frame",
    "Ieth",
    "ImmDt",
    "IpProto",
    "Ipv4",
    "Ipv6",
    "LinkType",
    "MacControlOpcode",
    "Mad",
    "MgmtClass",
    "NakCode",
    "Opcode",
    "OpcodeInfo",
    "Operation",
    "PauseFrame",
    "PfcFrame",
    "Position",
    "Reth",
    "RoceHeaders",
    "Sll",
    "Sll2",
    "Transport",
    "Udp",
    "Vlan",
    "build_pause_frame",
    "build_pfc_frame",
    "build_roce_frame",
    "build_roce_ip_packet",
    "build_roce_udp_payload",
    "cnp_bth",
    "compute_icrc",
    "crc32",
    "crc32_reference",
    "decode_frame",
    "decode_mac_control",
    "decode_roce",
    "format_mac",
    "opcode_info",
    "parse_mac",
    "quanta_to_ns",
    "quanta_to_s",
    "rnr_timer_ns",
    "rnr_timer_s",
    "s_to_quanta",
    "verify_icrc",
]
