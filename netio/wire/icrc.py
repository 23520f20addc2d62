"""RoCEv2 invariant CRC (IBTA vol 1 Annex A17.3.3; Linux ``rxe_icrc.c``).

The ICRC is the Ethernet CRC-32 (as ``zlib.crc32``) of::

    8 x 0xFF (masked LRH) + IP header (IPv4: TOS, TTL, checksum = all ones;
    IPv6: traffic class, flow label, hop limit = all ones) + UDP header
    (checksum = 0xFFFF) + BTH (byte 4 = FECN/BECN/resv6 = 0xFF) + the rest of
    the packet up to the ICRC,

stored little-endian in the last four bytes. The native path
(``native/icrc.c``, ``native/crc32.c``: PCLMULQDQ folding or slicing-by-8) is
used when ``netio.native.AVAILABLE``; :func:`crc32_reference` is the
pure-Python table-driven reference the tests hold it to.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from netio import native
from netio.errors import DecodeError

Buffer = bytes | bytearray | memoryview

_POLY_REFLECTED = 0xEDB88320


def _make_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY_REFLECTED if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _make_table()
_FF8 = b"\xff" * 8
_LE32 = struct.Struct("<I")
_BTH_BYTES = 12
_UDP_BYTES = 8


def crc32_reference(data: Buffer, crc: int = 0) -> int:
    """CRC-32 of ``data`` continuing from ``crc`` (same contract as ``zlib.crc32``).

    Byte-at-a-time over a 256-entry table: slow, obviously correct, no zlib.
    """
    table = _TABLE
    c = crc ^ 0xFFFFFFFF
    for byte in bytes(data):
        c = table[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _as_bytes_view(data: Buffer) -> Buffer:
    if isinstance(data, memoryview) and (data.itemsize != 1 or not data.c_contiguous):
        return memoryview(data.tobytes())
    return data


_lib: Any = native.lib
_ffi: Any = native.ffi


def _native_ptr(data: Buffer) -> Any:
    # cffi takes bytes as a const pointer directly; other buffers go through from_buffer.
    return data if isinstance(data, bytes) else _ffi.from_buffer(_as_bytes_view(data))


def crc32(data: Buffer, crc: int = 0) -> int:
    """CRC-32 of ``data`` continuing from ``crc``: native when available, else the reference."""
    if _lib is None:
        # Without the extension, the stdlib's C CRC-32 is ~400x the Python reference.
        return zlib.crc32(data, crc)
    return int(_lib.netio_crc32(crc, _native_ptr(data), len(data)))


def implementation() -> str:
    """Which CRC-32 code :func:`crc32` runs: ``"pclmul"``, ``"slice8"`` or ``"zlib"``."""
    if _lib is None:
        return "zlib"
    return str(_ffi.string(_lib.netio_crc32_impl()).decode())


def _masked_headers(ip_packet: Buffer) -> bytearray:
    """IP + UDP + BTH headers of ``ip_packet`` with the variant fields set to ones."""
    n = len(ip_packet)
    if n < 1:
        raise DecodeError("ICRC", 0, "empty IP packet")
    version = ip_packet[0] >> 4
    if version == 4:
        ip_bytes = (ip_packet[0] & 0xF) * 4
        if ip_bytes < 20:
            raise DecodeError("ICRC", 0, f"IPv4 header length {ip_bytes} is below 20")
    elif version == 6:
        ip_bytes = 40
    else:
        raise DecodeError("ICRC", 0, f"IP version {version} is neither 4 nor 6")
    end = ip_bytes + _UDP_BYTES + _BTH_BYTES
    if n < end:
        raise DecodeError("ICRC", 0, f"{n} bytes is shorter than the IP, UDP and BTH headers "
                                     f"({end} bytes)")
    hdr = bytearray(ip_packet[:end])
    if version == 4:
        hdr[1] = 0xFF  # TOS (DSCP + ECN)
        hdr[8] = 0xFF  # TTL
        hdr[10] = hdr[11] = 0xFF  # header checksum
    else:
        hdr[0] |= 0x0F  # traffic class, high nibble
        hdr[1] = hdr[2] = hdr[3] = 0xFF  # traffic class low nibble + flow label
        hdr[7] = 0xFF  # hop limit
    hdr[ip_bytes + 6] = hdr[ip_bytes + 7] = 0xFF  # UDP checksum
    hdr[ip_bytes + 8 + 4] = 0xFF  # BTH FECN, BECN, resv6
    return hdr


def compute_icrc_reference(ip_packet: Buffer) -> int:
    """:func:`compute_icrc` in pure Python over :func:`crc32_reference`."""
    hdr = _masked_headers(ip_packet)
    crc = crc32_reference(_FF8 + hdr)
    return crc32_reference(memoryview(ip_packet)[len(hdr):], crc)


def compute_icrc(ip_packet: Buffer) -> int:
    """ICRC of ``ip_packet`` (IP header .. end of payload and pad, without the ICRC).

    The result is the integer whose little-endian bytes go on the wire.
    DecodeError if the packet is not IPv4/IPv6 or is shorter than its IP, UDP
    and BTH headers.
    """
    if _lib is None:
        hdr = _masked_headers(ip_packet)
        return zlib.crc32(memoryview(ip_packet)[len(hdr):], zlib.crc32(_FF8 + hdr))
    value = int(_lib.netio_icrc(_native_ptr(ip_packet), len(ip_packet)))
    if value < 0:
        _masked_headers(ip_packet)  # raises the DecodeError that says why
    return value


def icrc_bytes(ip_packet: Buffer) -> bytes:
    """The four ICRC bytes to append to ``ip_packet``."""
    return _LE32.pack(compute_icrc(ip_packet))


def stored_icrc(ip_packet_with_icrc: Buffer) -> int:
    """The ICRC carried in the last four bytes."""
    if len(ip_packet_with_icrc) < 4:
        raise DecodeError("ICRC", 0, f"{len(ip_packet_with_icrc)} bytes hold no ICRC")
    return int(_LE32.unpack_from(ip_packet_with_icrc, len(ip_packet_with_icrc) - 4)[0])


def verify_icrc(ip_packet_with_icrc: Buffer) -> bool:
    """True when the last four bytes are the ICRC of the bytes before them."""
    stored = stored_icrc(ip_packet_with_icrc)
    return compute_icrc(memoryview(ip_packet_with_icrc)[:-4]) == stored


def verify_icrc_reference(ip_packet_with_icrc: Buffer) -> bool:
    """:func:`verify_icrc` in pure Python."""
    stored = stored_icrc(ip_packet_with_icrc)
    return compute_icrc_reference(memoryview(ip_packet_with_icrc)[:-4]) == stored
