"""RC connections from the Communication Manager's MADs: who connected which QPs, when.

A connection is set up by REQ (active side: its QP, starting PSN, service ID,
path MTU, retry counts), REP (passive side: its QP and starting PSN) and RTU,
and torn down by DREQ and DREP (IBTA vol 1 §12.6, §12.9; field layouts in
``netio.wire.mad``). The messages travel as UD SENDs to QP1 (the GSI) and
name each other by communication IDs: REP, RTU, DREQ and DREP carry the
sender's (local) and the peer's (remote) ID, so a message belongs to the
connection whose active side is (sender, local ID) or (receiver, remote ID),
or whose passive side is.

Set-up time: REQ to RTU as captured (REQ to REP when no RTU was seen);
tear-down time: DREQ to DREP. A data flow belongs to a connection when it is
addressed to one of its QPs at that side's IP address.

The MADs are found by a second pass over a capture, made only when its first
pass saw RoCE packets to QP1 (C extraction per chunk; Python decodes only the
QP1 frames).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from netio import native
from netio.analyze.columns import Flag, Kind
from netio.analyze.extract import extract_native, extract_scan_reference
from netio.errors import CaptureError, DecodeError
from netio.pcap.scan import CaptureScanner
from netio.wire.mad import GSI_QP, CmDrep, CmDreq, CmFields, CmRep, CmReq, CmRtu, decode_cm
from netio.wire.packet import decode_frame

#: An IP address as (integer, IPv6).
Address = tuple[int, bool]


@dataclass(frozen=True, slots=True)
class CmEvent:
    ts_ns: int
    src: Address
    dst: Address
    fields: CmFields


def cm_events(path: str, *, use_native: bool | None = None) -> list[CmEvent]:
    """Every REQ/REP/RTU/DREQ/DREP MAD of a capture, in capture order."""
    if use_native is None:
        use_native = native.AVAILABLE
    out: list[CmEvent] = []
    try:
        sc = CaptureScanner(path, native_scan=use_native)
    except CaptureError:
        return out
    with sc:
        for scan in sc.chunks(1 << 16):
            cols = (extract_native(sc.buffer, scan, verify_icrc=False) if use_native
                    else extract_scan_reference(sc.buffer, scan, verify_icrc=False))
            rows = np.nonzero((cols.kind == Kind.ROCE) & (cols.dest_qp == GSI_QP))[0]
            for r in rows.tolist():
                off, cap = int(scan.frame_offset[r]), int(scan.caplen[r])
                try:
                    frame = decode_frame(bytes(sc.buffer[off:off + cap]),
                                         int(scan.linktype[r]), allow_truncated=True)
                    if frame.roce is None or frame.roce.mad is None or frame.ip is None:
                        continue
                    fields = decode_cm(frame.payload)
                except DecodeError:
                    continue
                if fields is None:
                    continue
                v6 = bool(cols.flags[r] & Flag.IPV6)
                out.append(CmEvent(int(scan.ts_ns[r]), (int(frame.ip.src_ip), v6),
                                   (int(frame.ip.dst_ip), v6), fields))
    return out


@dataclass(slots=True)
class Connection:
    """One RC connection as its CM messages described it (times in ns, None if unseen)."""

    active: Address
    active_comm_id: int
    active_qpn: int
    active_psn: int
    service_id: int
    path_mtu_bytes: int | None
    retry_count: int
    rnr_retry_count: int
    req_ns: int
    passive: Address | None = None
    passive_comm_id: int | None = None
    passive_qpn: int | None = None
    passive_psn: int | None = None
    rep_ns: int | None = None
    rtu_ns: int | None = None
    dreq_ns: int | None = None
    drep_ns: int | None = None

    @property
    def setup_ns(self) -> int | None:
        end = self.rtu_ns if self.rtu_ns is not None else self.rep_ns
        return None if end is None else end - self.req_ns

    @property
    def teardown_ns(self) -> int | None:
        if self.dreq_ns is None or self.drep_ns is None:
            return None
        return self.drep_ns - self.dreq_ns

    def side_of(self, dst: Address, dest_qp: int) -> str | None:
        """'active' or 'passive' when (dst, dest_qp) is that side's QP."""
        if dst == self.active and dest_qp == self.active_qpn:
            return "active"
        if self.passive is not None and dst == self.passive and dest_qp == self.passive_qpn:
            return "passive"
        return None


def connections(events: list[CmEvent]) -> list[Connection]:
    """The connections the CM messages set up (in order of their REQ)."""
    out: list[Connection] = []
    by_id: dict[tuple[Address, int], Connection] = {}  # (side's address, its comm id)

    def find(e: CmEvent, local: int, remote: int) -> Connection | None:
        return by_id.get((e.src, local)) or by_id.get((e.dst, remote))

    for e in events:
        f = e.fields
        if isinstance(f, CmReq):
            if (e.src, f.local_comm_id) in by_id:
                continue  # a retransmitted REQ
            c = Connection(e.src, f.local_comm_id, f.local_qpn, f.starting_psn, f.service_id,
                           f.path_mtu_bytes, f.retry_count, f.rnr_retry_count, e.ts_ns)
            by_id[(e.src, f.local_comm_id)] = c
            out.append(c)
        elif isinstance(f, CmRep):
            got = by_id.get((e.dst, f.remote_comm_id))
            if got is not None and got.rep_ns is None:
                got.passive, got.passive_comm_id = e.src, f.local_comm_id
                got.passive_qpn, got.passive_psn = f.local_qpn, f.starting_psn
                got.rep_ns = e.ts_ns
                by_id[(e.src, f.local_comm_id)] = got
        else:
            known = find(e, f.local_comm_id, f.remote_comm_id)
            if known is None:
                continue
            if isinstance(f, CmRtu) and known.rtu_ns is None:
                known.rtu_ns = e.ts_ns
            elif isinstance(f, CmDreq) and known.dreq_ns is None:
                known.dreq_ns = e.ts_ns
            elif isinstance(f, CmDrep) and known.drep_ns is None:
                known.drep_ns = e.ts_ns
    return out


__all__ = ["CmEvent", "Connection", "cm_events", "connections"]
