"""Captures of a chosen shape for the analyzer benchmark, written fast with numpy.

``write_shape`` writes a nanosecond pcap of ``packets`` frames: RoCEv2 RC
traffic over ``flows`` QPs (round robin; per QP three SEND ONLY requests of
1 KiB, the third with AckReq, then the responder's ACK; PSNs in order) and
``pause_intervals`` PFC pauses (an XOFF for priority 3, then its XON as the
next frame) from ``senders`` switch MACs in turn, spread evenly over the
capture.
Frames are built once with the ``netio.wire`` builders and copied with their
per-packet fields (addresses, QPs, PSNs, IPv4 checksums, and the ICRC when
frames are captured whole) written in bulk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from netio.pcap import PcapWriter
from netio.wire.bth import Bth, Opcode
from netio.wire.ethernet import Vlan
from netio.wire.ext import Aeth
from netio.wire.icrc import compute_icrc
from netio.wire.ip import Ecn
from netio.wire.packet import build_roce_frame
from netio.wire.pfc import build_pfc_frame

U8 = npt.NDArray[np.uint8]
_IP = 18  # VLAN-tagged frames
_BTH = _IP + 28
PAYLOAD_BYTES = 1024
GAP_NS = 100  # between packets
BATCH = 1 << 17


@dataclass(frozen=True)
class Shape:
    packets: int
    flows: int
    pause_intervals: int
    senders: int
    snaplen: int

    @property
    def label(self) -> str:
        whole = "whole" if self.snaplen >= 9000 else f"snap{self.snaplen}"
        return (f"{self.packets // 1000}k pkts, {self.flows} flows, {self.pause_intervals} "
                f"pauses/{self.senders} senders, {whole}")


def _templates() -> tuple[bytes, bytes, bytes, bytes]:
    mac_a, mac_b = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
    common = {"src_port": 49152, "ecn": Ecn.ECT0, "vlan": Vlan(pcp=3, vid=10)}
    req = build_roce_frame(src_mac=mac_a, dst_mac=mac_b, src_ip="10.1.0.1", dst_ip="10.2.0.1",
                           bth=Bth(Opcode.RC_SEND_ONLY, dest_qp=1), payload=bytes(PAYLOAD_BYTES),
                           **common)
    ack = build_roce_frame(src_mac=mac_b, dst_mac=mac_a, src_ip="10.2.0.1", dst_ip="10.1.0.1",
                           bth=Bth(Opcode.RC_ACKNOWLEDGE, dest_qp=1), aeth=Aeth.ack(0),
                           **common)
    xoff = build_pfc_frame(bytes.fromhex("020000010000"), 1 << 3, (0, 0, 0, 0xFFFF, 0, 0, 0, 0))
    xon = build_pfc_frame(bytes.fromhex("020000010000"), 1 << 3, (0,) * 8)
    return req, ack, xoff, xon


def _put(rows: U8, offset: int, values: npt.NDArray[np.int64], nbytes: int) -> None:
    for i in range(nbytes):
        rows[:, offset + i] = (values >> (8 * (nbytes - 1 - i))) & 0xFF


def _ipv4_checksums(rows: U8) -> None:
    hdr = rows[:, _IP:_IP + 20].astype(np.uint32)
    words = (hdr[:, 0::2] << 8) | hdr[:, 1::2]
    words[:, 5] = 0
    total = words.sum(axis=1)
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    csum = (~total) & 0xFFFF
    rows[:, _IP + 10] = csum >> 8
    rows[:, _IP + 11] = csum & 0xFF


def _roce_rows(template: bytes, flow: npt.NDArray[np.int64], psn: npt.NDArray[np.int64],
               ack_req: npt.NDArray[np.bool_], reverse: bool, whole: bool) -> U8:
    rows = np.tile(np.frombuffer(template, np.uint8), (flow.size, 1))
    host = flow % 50_000
    src = 0x0A010000 + host  # 10.1.x.y
    dst = 0x0A020000 + (flow % 64)  # 64 destinations
    if reverse:
        src, dst = dst, src
    _put(rows, _IP + 12, src, 4)
    _put(rows, _IP + 16, dst, 4)
    _put(rows, _BTH + 5, (0x800000 if reverse else 0x100) + flow, 3)
    _put(rows, _BTH + 9, psn & 0xFFFFFF, 3)
    rows[:, _BTH + 8] = np.where(ack_req, 0x80, 0)
    if reverse:
        rows[:, _BTH + 13:_BTH + 16] = rows[:, _BTH + 9:_BTH + 12]  # AETH MSN = PSN
    _ipv4_checksums(rows)
    if whole:
        for i in range(rows.shape[0]):
            rows[i, -4:] = np.frombuffer(
                compute_icrc(rows[i, _IP:-4].tobytes()).to_bytes(4, "little"), np.uint8)
    return rows


def write_shape(path: Path, shape: Shape) -> int:
    """Write the capture; returns its packet count."""
    req_t, ack_t, xoff_t, xon_t = _templates()
    n_ctl = 2 * shape.pause_intervals
    n_roce = shape.packets - n_ctl
    if n_roce < shape.flows:
        raise ValueError(f"{shape}: fewer RoCE packets than flows")
    # Control frames at evenly spread positions; RoCE packets fill the rest.
    ctl_pos = np.zeros(shape.packets, np.bool_)
    if shape.pause_intervals:
        starts = np.linspace(0, shape.packets - 2, shape.pause_intervals).astype(np.int64)
        starts = starts + np.arange(shape.pause_intervals) % 2  # never the same slot twice
        starts = np.unique(np.minimum(starts, shape.packets - 2))
        starts = starts[np.concatenate(([True], np.diff(starts) >= 2))]
        ctl_pos[starts] = ctl_pos[starts + 1] = True
        n_ctl = int(ctl_pos.sum())
        n_roce = shape.packets - n_ctl
    whole = shape.snaplen >= 9000
    # A frame the snap length keeps whole has its ICRC checked: it must be right.
    ack_whole = whole or len(ack_t) <= shape.snaplen
    with open(path, "wb") as f:
        PcapWriter(f, snaplen=shape.snaplen, nanosecond=True).close()
        roce_done = 0
        ctl_done = 0
        for lo in range(0, shape.packets, BATCH):
            hi = min(shape.packets, lo + BATCH)
            is_ctl = ctl_pos[lo:hi]
            idx = np.arange(lo, hi, dtype=np.int64)
            ts = 1_700_000_000_000_000_000 + idx * GAP_NS
            frames: list[tuple[npt.NDArray[np.intp], U8]] = []
            # RoCE rows: k-th RoCE packet -> flow k % flows, step k // flows of that flow.
            r_sel = np.nonzero(~is_ctl)[0]
            k = roce_done + np.arange(r_sel.size, dtype=np.int64)
            roce_done += r_sel.size
            flow = k % shape.flows
            step = k // shape.flows
            is_ack = step % 4 == 3
            psn = step - step // 4 - (is_ack.astype(np.int64))
            ack_req = step % 4 == 2
            frames.append((r_sel[~is_ack], _roce_rows(req_t, flow[~is_ack], psn[~is_ack],
                                                      ack_req[~is_ack], False, whole)))
            frames.append((r_sel[is_ack], _roce_rows(ack_t, flow[is_ack], psn[is_ack],
                                                     np.zeros(int(is_ack.sum()), np.bool_),
                                                     True, ack_whole)))
            c_sel = np.nonzero(is_ctl)[0]
            j = ctl_done + np.arange(c_sel.size, dtype=np.int64)
            ctl_done += c_sel.size
            sender = (j // 2) % max(1, shape.senders)
            for tmpl, which in ((xoff_t, j % 2 == 0), (xon_t, j % 2 == 1)):
                rows = np.tile(np.frombuffer(tmpl, np.uint8), (int(which.sum()), 1))
                _put(rows, 6 + 3, sender[which], 3)  # source MAC 02:00:00:SS:SS:SS
                frames.append((c_sel[which], rows))
            f.write(_records(hi - lo, ts, frames, shape.snaplen))
    return shape.packets


def _records(n: int, ts: npt.NDArray[np.int64], frames: list[tuple[npt.NDArray[np.intp], U8]],
             snaplen: int) -> bytes:
    orig = np.zeros(n, np.int64)
    for sel, rows in frames:
        orig[sel] = rows.shape[1]
    cap = np.minimum(orig, snaplen)
    starts = np.zeros(n, np.int64)
    np.cumsum(16 + cap[:-1], out=starts[1:])
    out = np.empty(int((16 + cap).sum()), np.uint8)
    hdr = np.empty((n, 4), "<u4")
    hdr[:, 0] = ts // 1_000_000_000
    hdr[:, 1] = ts % 1_000_000_000
    hdr[:, 2] = cap
    hdr[:, 3] = orig
    out[starts[:, None] + np.arange(16)] = hdr.view(np.uint8).reshape(n, 16)
    for sel, rows in frames:
        if sel.size:
            width = min(rows.shape[1], snaplen)
            out[(starts[sel] + 16)[:, None] + np.arange(width)] = rows[:, :width]
    return out.tobytes()
