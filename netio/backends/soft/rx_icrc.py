"""ICRC verification of received RoCEv2 datagrams (IBTA vol 1 Annex A17.3.3).

The ICRC covers the IPv4 header except TOS, TTL and checksum, so it covers the
IPv4 identification and the flags. Two ways to check it on receive:

* :func:`verify_ip_packet`: the IP header is visible (raw socket, AF_PACKET):
  the exact check, :func:`netio.wire.icrc.verify_icrc`.
* :class:`HeaderlessVerifier`: a plain UDP socket shows the addresses, the
  ports and the payload, but not the IPv4 identification nor the flags, and
  Linux rxe sends a per-packet identification (netio sends 0). The CRC is
  affine in the message bits, so for a fixed length, changing the 16 ID bits
  and the DF bit moves the ICRC within a 17-dimensional subspace of the
  32-bit values. :meth:`HeaderlessVerifier.verify` rebuilds the header with
  ID 0 and DF set, and accepts the datagram when the difference between the
  carried and the computed ICRC lies in that subspace. Every other field
  (addresses, ports, lengths, all of BTH .. payload) stays covered, with a
  false-accept probability of 2**-15 for a random corruption instead of
  2**-32: a weaker but sound check, never a skipped one. It assumes an IPv4
  header without options (RoCEv2 senders add none).
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections import OrderedDict
from dataclasses import dataclass

from netio.wire import icrc

Buffer = bytes | bytearray | memoryview

_IPV4_HEADER_BYTES = 20
_UDP_HEADER_BYTES = 8
_ICRC_BYTES = 4
_LRH_MASK_BYTES = 8  # the 8 bytes of ones standing for the masked LRH
_ID_OFFSET = _LRH_MASK_BYTES + 4  # IPv4 identification in the masked message
_DF_BIT_OFFSET = _LRH_MASK_BYTES + 6  # the byte holding DF (0x40)
_CACHE_ENTRIES = 256


def verify_ip_packet(ip_packet_with_icrc: Buffer) -> bool:
    """Exact ICRC check of a whole IPv4/IPv6 packet (IP header .. ICRC)."""
    return icrc.verify_icrc(ip_packet_with_icrc)


@dataclass(frozen=True, slots=True)
class _Subspace:
    """A GF(2) basis in echelon form: (pivot mask, vector) pairs, highest pivot first."""

    rows: tuple[tuple[int, int], ...]

    def contains(self, value: int) -> bool:
        for pivot, row in self.rows:
            if value & pivot:
                value ^= row
        return value == 0


def _echelon(vectors: list[int]) -> _Subspace:
    rows: list[tuple[int, int]] = []
    for v in vectors:
        for pivot, row in rows:
            if v & pivot:
                v ^= row
        if v:
            pivot = 1 << (v.bit_length() - 1)
            # keep every row free of the new pivot so that reduction is one pass
            rows = [(p, r ^ v if r & pivot else r) for p, r in rows]
            rows.append((pivot, v))
    rows.sort(key=lambda pr: -pr[0])
    return _Subspace(tuple(rows))


class HeaderlessVerifier:
    """ICRC check of a UDP payload when the IPv4 header was not seen (see module doc)."""

    def __init__(self) -> None:
        self._subspaces: OrderedDict[int, _Subspace] = OrderedDict()

    def _subspace(self, masked_length: int) -> _Subspace:
        space = self._subspaces.get(masked_length)
        if space is not None:
            self._subspaces.move_to_end(masked_length)
            return space
        # The CRC of two equal-length messages differing in one bit differs by the
        # CRC (zero init, no final xor) of that bit followed by the zero tail: compute
        # it as the xor of two zlib CRCs, one per unknown bit (16 ID bits + DF).
        zeros = bytes(masked_length)
        base = zlib.crc32(zeros)
        vectors = []
        for bit in range(16):
            probe = bytearray(zeros)
            probe[_ID_OFFSET + (0 if bit >= 8 else 1)] = 1 << (bit % 8)
            vectors.append(zlib.crc32(probe) ^ base)
        probe = bytearray(zeros)
        probe[_DF_BIT_OFFSET] = 0x40
        vectors.append(zlib.crc32(probe) ^ base)
        space = _echelon(vectors)
        self._subspaces[masked_length] = space
        if len(self._subspaces) > _CACHE_ENTRIES:
            self._subspaces.popitem(last=False)
        return space

    def verify(
        self,
        udp_payload: Buffer,
        *,
        src_ip: ipaddress.IPv4Address,
        dst_ip: ipaddress.IPv4Address,
        src_port: int,
        dst_port: int,
    ) -> bool:
        """True when the payload's ICRC matches for some IPv4 identification and DF."""
        n = len(udp_payload)
        if n < 12 + _ICRC_BYTES:
            return False
        total_length = _IPV4_HEADER_BYTES + _UDP_HEADER_BYTES + n
        header = struct.pack(
            "!BBHHHBBH4s4sHHHH",
            0x45, 0, total_length, 0, 0x4000, 64, 17, 0,
            src_ip.packed, dst_ip.packed,
            src_port, dst_port, _UDP_HEADER_BYTES + n, 0,
        )
        packet = memoryview(header + bytes(udp_payload))
        computed = icrc.compute_icrc(packet[:-_ICRC_BYTES])
        carried = icrc.stored_icrc(packet)
        if computed == carried:
            return True
        masked_length = _LRH_MASK_BYTES + total_length - _ICRC_BYTES
        return self._subspace(masked_length).contains(computed ^ carried)
