"""The sockets of the soft RoCE driver: what goes out, what comes in.

Sending (one socket per UDP source port and TOS byte): an *unconnected* UDP
socket bound to ``(local_ip, source_port)`` with ``IP_MTU_DISCOVER =
IP_PMTUDISC_DO`` and ``IP_TOS`` set. Linux then emits every datagram with DF
set and IPv4 identification 0 (``ip_select_ident_segs``: DF and no connected
destination), so the IPv4 header the peer sees is predictable and the ICRC the
engine computed matches. These sockets never receive: a drop-all socket filter
discards anything sent to their port.

Receiving, two modes:

* ``RxMode.RAW``: a raw IPv4 socket (``SOCK_RAW, IPPROTO_UDP``, needs
  CAP_NET_RAW) shows the whole IP packet, so the ICRC is checked exactly. A
  classic BPF filter keeps only unfragmented UDP to ``(local_ip, port)``. The
  UDP socket on that port still exists (so the kernel does not answer
  "port unreachable") but drops everything through its own filter.
* ``RxMode.UDP``: the UDP socket itself; the ICRC is checked without the IPv4
  identification (:class:`netio.backends.soft.rx_icrc.HeaderlessVerifier`).
"""

from __future__ import annotations

import ctypes
import enum
import errno
import ipaddress
import socket
import struct
from dataclasses import dataclass

from netio.errors import DriverSocketError

ROCEV2_UDP_PORT = 4791

# <linux/in.h>
IP_MTU_DISCOVER = getattr(socket, "IP_MTU_DISCOVER", 10)
IP_PMTUDISC_DO = getattr(socket, "IP_PMTUDISC_DO", 2)
SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)

# Classic BPF opcodes (<linux/filter.h>).
_BPF_LD_B_ABS = 0x30
_BPF_LD_H_ABS = 0x28
_BPF_LD_W_ABS = 0x20
_BPF_LDX_B_MSH = 0xB1
_BPF_LD_H_IND = 0x48
_BPF_JEQ_K = 0x15
_BPF_JSET_K = 0x45
_BPF_RET_K = 0x06
_ACCEPT_BYTES = 0x40000


class RxMode(enum.Enum):
    """How the driver receives (and so how it checks the ICRC)."""

    AUTO = "auto"  # RAW when permitted, else UDP
    RAW = "raw"
    UDP = "udp"


class OffloadMode(enum.Enum):
    """Whether native runs go out with UDP GSO (``UDP_SEGMENT``) and whether the native
    receive ring takes UDP GRO buffers (``UDP_GRO``); see ``netio/roce/native_path.py``."""

    OFF = "off"
    ON = "on"  # GSO: whenever the kernel takes it (probed; falls back on the first
    # refusal); GRO: with UDP receive (a raw socket gets no GRO)
    AUTO = "auto"  # ON when this driver receives on a UDP socket (GSO: peers on one host
    # tend to share the mode, and a raw receiver on loopback/veth would see unsegmented
    # packets)


#: linux/udp.h
UDP_SEGMENT = 103


def probe_udp_gso(sock: socket.socket) -> str:
    """Why ``sock`` cannot send with UDP GSO ("" when it can: the option is known)."""
    try:
        sock.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, 0)
    except OSError as exc:
        return f"setsockopt(UDP_SEGMENT) failed: {exc.strerror or exc}"
    return ""


BpfInstruction = tuple[int, int, int, int]  # (code, jt, jf, k)


def _attach_filter(sock: socket.socket, program: list[BpfInstruction]) -> None:
    raw = b"".join(struct.pack("HBBI", *ins) for ins in program)
    buf = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("HL", len(program), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def drop_all_program() -> list[BpfInstruction]:
    return [(_BPF_RET_K, 0, 0, 0)]


def roce_raw_program(local_ip: ipaddress.IPv4Address | None, port: int) -> list[BpfInstruction]:
    """BPF for a raw IPv4 socket (data starts at the IP header): accept
    unfragmented UDP to ``port`` (and to ``local_ip`` unless None)."""
    prog: list[BpfInstruction] = []
    # Jump offsets are relative to the next instruction; "drop" is the last one.
    body: list[tuple[int, int, int, int | str]] = [
        (_BPF_LD_B_ABS, 0, 0, 9),  # protocol
        (_BPF_JEQ_K, 0, -1, 17),
        (_BPF_LD_H_ABS, 0, 0, 6),  # flags + fragment offset
        (_BPF_JSET_K, -1, 0, 0x3FFF),  # MF or an offset: a fragment
    ]
    if local_ip is not None:
        body += [
            (_BPF_LD_W_ABS, 0, 0, 16),  # destination address
            (_BPF_JEQ_K, 0, -1, int(local_ip)),
        ]
    body += [
        (_BPF_LDX_B_MSH, 0, 0, 0),  # X = IP header length
        (_BPF_LD_H_IND, 0, 0, 2),  # UDP destination port
        (_BPF_JEQ_K, 0, -1, port),
        (_BPF_RET_K, 0, 0, _ACCEPT_BYTES),
    ]
    drop_index = len(body)
    for i, (code, jt, jf, k) in enumerate(body):
        jt_abs = drop_index - i - 1 if jt == -1 else jt
        jf_abs = drop_index - i - 1 if jf == -1 else jf
        prog.append((code, jt_abs, jf_abs, int(k)))
    prog.append((_BPF_RET_K, 0, 0, 0))
    return prog


def open_send_socket(local_ip: ipaddress.IPv4Address, src_port: int, tos: int) -> socket.socket:
    """An unconnected UDP socket bound to ``(local_ip, src_port)``: DF, IP ID 0, ``tos``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        _attach_filter(sock, drop_all_program())
        sock.bind((str(local_ip), src_port))
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise DriverSocketError(f"UDP send socket {local_ip}:{src_port}", exc) from exc
    return sock


def open_udp_receive_socket(
    local_ip: ipaddress.IPv4Address, port: int, *, drop_all: bool
) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        if drop_all:
            _attach_filter(sock, drop_all_program())
        sock.bind((str(local_ip), port))
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise DriverSocketError(f"UDP socket {local_ip}:{port}", exc) from exc
    return sock


def open_raw_receive_socket(local_ip: ipaddress.IPv4Address, port: int) -> socket.socket:
    """Raise DriverSocketError (EPERM) without CAP_NET_RAW."""
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    except OSError as exc:
        raise DriverSocketError("raw IPv4 socket", exc) from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        wildcard = int(local_ip) == 0
        _attach_filter(sock, roce_raw_program(None if wildcard else local_ip, port))
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise DriverSocketError("raw IPv4 socket filter", exc) from exc
    return sock


def raw_socket_permitted() -> bool:
    """Whether this process may open raw sockets (CAP_NET_RAW)."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP).close()
    except PermissionError:
        return False
    except OSError as exc:
        return exc.errno not in (errno.EPERM, errno.EACCES)
    return True


@dataclass(frozen=True, slots=True)
class ReceivedDatagram:
    """One RoCEv2 datagram as received: the UDP payload (BTH .. ICRC) and its
    addresses; ``ip_packet`` is the whole IP packet when it was visible."""

    udp_payload: memoryview
    src_ip: ipaddress.IPv4Address
    src_port: int
    dst_ip: ipaddress.IPv4Address
    dst_port: int
    ip_packet: memoryview | None


def parse_raw_ipv4(packet: memoryview) -> ReceivedDatagram | None:
    """Split what a raw IPv4 socket returned; None when it is not a whole UDP datagram."""
    n = len(packet)
    if n < 28 or packet[0] >> 4 != 4:
        return None
    ihl = (packet[0] & 0x0F) * 4
    total_length = (packet[2] << 8) | packet[3]
    if ihl < 20 or total_length > n or total_length < ihl + 8:
        return None
    udp_length = (packet[ihl + 4] << 8) | packet[ihl + 5]
    if udp_length != total_length - ihl:
        return None
    return ReceivedDatagram(
        udp_payload=packet[ihl + 8 : total_length],
        src_ip=ipaddress.IPv4Address(bytes(packet[12:16])),
        src_port=(packet[ihl] << 8) | packet[ihl + 1],
        dst_ip=ipaddress.IPv4Address(bytes(packet[16:20])),
        dst_port=(packet[ihl + 2] << 8) | packet[ihl + 3],
        ip_packet=packet[:total_length],
    )
