"""The column layout every analysis consumes: one numpy array per extracted field.

A capture is turned into ``PacketColumns`` chunk by chunk, either by the
native extractor (``native/analyze_extract.c``) or by the pure-Python
reference (``netio.analyze.extract.extract_reference``, built on
``netio.wire.packet.decode_frame``). The analyses never see frame bytes, so
their memory is bounded by the chunk size plus their own carried state.

Field semantics (one row per captured record):

- ``ts_ns``: capture time, int64 ns since the epoch.
- ``kind``: ``Kind`` (RoCEv2, PFC, 802.3x PAUSE, other, malformed RoCE).
- ``flags``: ``Flag`` bits (BTH FECN/BECN/AckReq, VLAN present, ICRC checked/ok,
  truncated by the snap length, IPv6).
- ``pcp``/``vlan``: outermost 802.1Q priority and VLAN id (0 when untagged).
- ``ecn``: IP ECN codepoint (``netio.wire.ip.Ecn``).
- ``src_mac``/``dst_mac``: the 48-bit MACs as integers.
- ``src_ip``/``dst_ip``: IPv4 addresses as integers (0 for IPv6).
- ``src_ip6``/``dst_ip6``: IPv6 addresses, 16 bytes each (zero for IPv4); rows
  flagged ``IPV6``. Flows are keyed on the full address either way.
- ``opcode``, ``dest_qp``, ``psn``: BTH fields (IBTA vol 1 §9.2).
- ``syndrome``/``msn``: AETH (§9.3.5), valid when the opcode carries an AETH.
- ``reth_len``: RETH DMA length (§9.3.3), valid on RDMA WRITE FIRST/ONLY and READ REQUEST.
- ``payload_bytes``: RoCE payload on the wire (from the original length, so a
  snap-length-truncated capture still counts its bytes); pad and ICRC excluded.
- ``frame_bytes``: the frame's length on the wire (original length).
- ``pfc_cev``/``quanta``: PFC class-enable vector and the 8 pause quanta (IEEE
  802.1Qbb §36.1.3); for 802.3x PAUSE ``pfc_cev`` is 0 and ``quanta[:, 0]`` holds
  the single pause time.

``MALFORMED`` rows (a frame ``decode_frame`` rejects, or RoCE cut by the snap
length before the end of its transport headers) carry only ``ts_ns``,
``frame_bytes`` and the ``TRUNCATED`` flag; every other field is zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import NamedTuple

import numpy as np
import numpy.typing as npt


class Kind(IntEnum):
    """What a captured record is, as far as the analyses care."""

    OTHER = 0  # not RoCEv2, not MAC control: counted, otherwise ignored
    ROCE = 1  # RoCEv2 (UDP 4791) with a decodable BTH
    PFC = 2  # IEEE 802.1Qbb priority flow control frame
    PAUSE = 3  # IEEE 802.3x (Annex 31B) link-level PAUSE frame
    MALFORMED = 4  # UDP 4791 or MAC control that failed to decode


class Flag(IntFlag):
    """Per-packet bits in the ``flags`` column."""

    FECN = 0x01
    BECN = 0x02
    ACK_REQ = 0x04
    VLAN = 0x08
    ICRC_CHECKED = 0x10  # the whole frame was captured, so the ICRC could be checked
    ICRC_OK = 0x20
    TRUNCATED = 0x40  # caplen < orig_len
    IPV6 = 0x80


class FlowKey(NamedTuple):
    """A RoCE flow's identity: one direction of a QP (src IP, dst IP, BTH dest QP).

    Addresses are integers: 32-bit for IPv4, 128-bit for IPv6 (``ipv6`` set),
    so IPv4 and IPv6 flows never collide.
    """

    src_ip: int
    dst_ip: int
    dest_qp: int
    ipv6: bool


#: (name, dtype) of every 1-D column, in the order of the native struct.
COLUMN_DTYPES: tuple[tuple[str, type[np.generic]], ...] = (
    ("ts_ns", np.int64),
    ("src_mac", np.uint64),
    ("dst_mac", np.uint64),
    ("src_ip", np.uint32),
    ("dst_ip", np.uint32),
    ("dest_qp", np.uint32),
    ("psn", np.uint32),
    ("msn", np.uint32),
    ("reth_len", np.uint32),
    ("payload_bytes", np.uint32),
    ("frame_bytes", np.uint32),
    ("vlan", np.uint16),
    ("kind", np.uint8),
    ("flags", np.uint8),
    ("pcp", np.uint8),
    ("ecn", np.uint8),
    ("opcode", np.uint8),
    ("syndrome", np.uint8),
    ("pfc_cev", np.uint8),
)

#: (name, dtype, width) of the 2-D columns: PFC quanta, IPv6 addresses.
WIDE_COLUMNS: tuple[tuple[str, type[np.generic], int], ...] = (
    ("quanta", np.uint16, 8),
    ("src_ip6", np.uint8, 16),
    ("dst_ip6", np.uint8, 16),
)

COLUMN_NAMES: tuple[str, ...] = (*(name for name, _ in COLUMN_DTYPES),
                                 *(name for name, _, _ in WIDE_COLUMNS))


@dataclass(slots=True)
class PacketColumns:
    """One chunk of extracted packets (mutable arrays, immutable shape)."""

    ts_ns: npt.NDArray[np.int64]
    src_mac: npt.NDArray[np.uint64]
    dst_mac: npt.NDArray[np.uint64]
    src_ip: npt.NDArray[np.uint32]
    dst_ip: npt.NDArray[np.uint32]
    dest_qp: npt.NDArray[np.uint32]
    psn: npt.NDArray[np.uint32]
    msn: npt.NDArray[np.uint32]
    reth_len: npt.NDArray[np.uint32]
    payload_bytes: npt.NDArray[np.uint32]
    frame_bytes: npt.NDArray[np.uint32]
    vlan: npt.NDArray[np.uint16]
    kind: npt.NDArray[np.uint8]
    flags: npt.NDArray[np.uint8]
    pcp: npt.NDArray[np.uint8]
    ecn: npt.NDArray[np.uint8]
    opcode: npt.NDArray[np.uint8]
    syndrome: npt.NDArray[np.uint8]
    pfc_cev: npt.NDArray[np.uint8]
    quanta: npt.NDArray[np.uint16]  # shape (n, 8)
    src_ip6: npt.NDArray[np.uint8]  # shape (n, 16)
    dst_ip6: npt.NDArray[np.uint8]  # shape (n, 16)

    @classmethod
    def empty(cls, n: int) -> PacketColumns:
        """Zero-filled columns for ``n`` packets."""
        arrays = {name: np.zeros(n, dtype=dt) for name, dt in COLUMN_DTYPES}
        wide = {name: np.zeros((n, w), dtype=dt) for name, dt, w in WIDE_COLUMNS}
        return cls(**arrays, **wide)

    def __len__(self) -> int:
        return int(self.ts_ns.shape[0])

    def take(self, index: npt.NDArray[np.intp] | npt.NDArray[np.bool_] | slice) -> PacketColumns:
        """The rows selected by ``index`` (a mask, indices or a slice)."""
        arrays = {name: getattr(self, name)[index] for name in COLUMN_NAMES}
        return PacketColumns(**arrays)

    @classmethod
    def concat(cls, parts: list[PacketColumns]) -> PacketColumns:
        if not parts:
            return cls.empty(0)
        arrays = {name: np.concatenate([getattr(p, name) for p in parts]) for name in COLUMN_NAMES}
        return cls(**arrays)

    def equals(self, other: PacketColumns) -> list[str]:
        """Names of the columns that differ (empty when identical)."""
        return [name for name in COLUMN_NAMES
                if not np.array_equal(getattr(self, name), getattr(other, name))]


def flow_keys(cols: PacketColumns, rows: npt.NDArray[np.intp]) -> list[FlowKey]:
    """The ``FlowKey`` of each of ``rows`` (RoCE rows of ``cols``)."""
    v6 = ((cols.flags[rows] & Flag.IPV6) != 0).tolist()
    src = cols.src_ip[rows].tolist()
    dst = cols.dst_ip[rows].tolist()
    qp = cols.dest_qp[rows].tolist()
    out = []
    for k, i in enumerate(rows.tolist()):
        if v6[k]:
            out.append(FlowKey(int.from_bytes(cols.src_ip6[i].tobytes(), "big"),
                               int.from_bytes(cols.dst_ip6[i].tobytes(), "big"), qp[k], True))
        else:
            out.append(FlowKey(src[k], dst[k], qp[k], False))
    return out


def key_of_words(w0: int, w1: int, w2: int, w3: int, w4: int) -> FlowKey:
    """A ``FlowKey`` from the native table's five words (see ``native/netio_native.h``)."""
    if w0 >> 32 & 1:
        return FlowKey(w1 << 64 | w2, w3 << 64 | w4, w0 & 0xFFFFFFFF, True)
    return FlowKey(w1, w3, w0 & 0xFFFFFFFF, False)
