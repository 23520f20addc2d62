"""Captures: the generator's packet tables written as pcap files, fast (third stage).

Every distinct packet shape (flow, direction, opcode, payload size; PFC/PAUSE
sender) is built once with the ``netio.wire`` builders (``build_roce_frame``,
``build_pfc_frame``, ``build_pause_frame``); the per-packet fields (PSN,
AckReq, ECN, BECN, AETH, pause quanta) are then written into copies of that
template with numpy, the IPv4 checksum is recomputed vectorised and the ICRC
with ``netio.wire.icrc.compute_icrc`` (only for frames captured whole). The
pcap file header comes from ``netio.pcap.PcapWriter``; records are appended in
bulk.
"""

from __future__ import annotations

from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from netio.analyze.columns import Kind
from netio.pcap import PcapWriter
from netio.scenario.packets import Rows
from netio.scenario.spec import Scenario
from netio.wire.bth import Bth, ExtHeader, Opcode, opcode_info
from netio.wire.cnp import Cnp
from netio.wire.ethernet import Vlan
from netio.wire.ext import Aeth, Reth
from netio.wire.icrc import compute_icrc
from netio.wire.ip import Ecn
from netio.wire.packet import build_roce_frame
from netio.wire.pfc import build_pause_frame, build_pfc_frame

U8 = npt.NDArray[np.uint8]

# Offsets inside a VLAN-tagged IPv4 RoCEv2 frame (the only shape the generator emits).
_IP = 18
_BTH = _IP + 20 + 8
_AETH = _BTH + 12
#: Rows synthesised per batch (bounds memory for huge scenarios).
BATCH_ROWS = 1 << 17


def _roce_template(scenario: Scenario, fidx: int, direction: int, opcode: int, payload: int,
                   src_mac: int, dst_mac: int) -> bytes:
    f = scenario.flows[fidx]
    a, b = IPv4Address(f.src_ip), IPv4Address(f.dst_ip)
    src_ip, dst_ip = (a, b) if direction == 0 else (b, a)
    dest_qp = f.dst_qp if direction == 0 else f.src_qp
    info = opcode_info(opcode)
    kwargs: dict[str, Any] = {}
    if ExtHeader.RETH in info.headers:
        kwargs["reth"] = Reth(0x1000_0000, 0x1234, f.message_bytes)
    if ExtHeader.AETH in info.headers:
        kwargs["aeth"] = Aeth.ack(0)
    if opcode == Opcode.CNP:
        kwargs["cnp"] = Cnp()
    bth = Bth(Opcode(opcode), dest_qp=dest_qp, pad_count=(-payload) % 4,
              becn=opcode == Opcode.CNP)
    return build_roce_frame(
        src_mac=src_mac.to_bytes(6, "big"), dst_mac=dst_mac.to_bytes(6, "big"), src_ip=src_ip,
        dst_ip=dst_ip, src_port=f.src_port + 1000 * direction, bth=bth, payload=bytes(payload),
        ecn=Ecn.ECT0, vlan=Vlan(pcp=f.priority, vid=f.vlan), **kwargs)


def _ipv4_checksums(rows: U8) -> None:
    """Recompute the IPv4 header checksum of every row in place (RFC 1071)."""
    hdr = rows[:, _IP:_IP + 20].astype(np.uint32)
    words = (hdr[:, 0::2] << 8) | hdr[:, 1::2]
    words[:, 5] = 0
    total = words.sum(axis=1)
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    csum = (~total) & 0xFFFF
    rows[:, _IP + 10] = (csum >> 8).astype(np.uint8)
    rows[:, _IP + 11] = (csum & 0xFF).astype(np.uint8)


def _put_be(rows: U8, offset: int, values: npt.NDArray[Any], nbytes: int) -> None:
    v = values.astype(np.uint64)
    for i in range(nbytes):
        rows[:, offset + i] = ((v >> np.uint64(8 * (nbytes - 1 - i))) & np.uint64(0xFF)).astype(
            np.uint8)


def _synth_roce(template: bytes, cols: dict[str, npt.NDArray[Any]], sel: npt.NDArray[np.intp],
                caplen: int) -> U8:
    n = sel.size
    rows = np.tile(np.frombuffer(template, dtype=np.uint8), (n, 1))
    tos = rows[:, _IP + 1] & 0xFC
    rows[:, _IP + 1] = tos | cols["ecn"][sel].astype(np.uint8)
    _put_be(rows, _BTH + 9, cols["psn"][sel], 3)
    rows[:, _BTH + 8] = np.where(cols["ack_req"][sel], 0x80, 0).astype(np.uint8)
    rows[:, _BTH + 4] = np.where(cols["becn"][sel], 0x40, 0).astype(np.uint8)
    if opcode_info(template[_BTH]).headers[:1] == (ExtHeader.AETH,):
        rows[:, _AETH] = cols["syndrome"][sel].astype(np.uint8)
        _put_be(rows, _AETH + 1, cols["msn"][sel], 3)
    _ipv4_checksums(rows)
    if caplen >= rows.shape[1]:
        bad = cols["bad_icrc"][sel]
        for i in range(n):
            icrc = compute_icrc(rows[i, _IP:-4].tobytes())
            if bad[i]:
                icrc ^= 0xFFFFFFFF
            rows[i, -4:] = np.frombuffer(icrc.to_bytes(4, "little"), dtype=np.uint8)
    return rows


def _synth_control(template: bytes, kind: int, cols: dict[str, npt.NDArray[Any]],
                   sel: npt.NDArray[np.intp]) -> U8:
    rows = np.tile(np.frombuffer(template, dtype=np.uint8), (sel.size, 1))
    body = len(template) - 46  # MAC Control payload after the EtherType
    q = cols["q0"][sel]
    if kind == Kind.PAUSE:
        _put_be(rows, body + 2, q, 2)
        return rows
    cev = int(template[body + 3])
    for prio in range(8):
        if cev >> prio & 1:
            _put_be(rows, body + 4 + 2 * prio, q, 2)
    return rows


def write_capture(path: Path, scenario: Scenario, table: Rows, *, snaplen: int) -> None:
    """Write ``table`` (sorted by time) as a nanosecond pcap at ``path``."""
    cols = table.cols
    n = len(table)
    with open(path, "wb") as file:
        PcapWriter(file, snaplen=snaplen, nanosecond=True).close()
        for lo in range(0, n, BATCH_ROWS):
            hi = min(n, lo + BATCH_ROWS)
            file.write(_batch(scenario, {k: v[lo:hi] for k, v in cols.items()}, hi - lo,
                              snaplen))


def _batch(scenario: Scenario, cols: dict[str, npt.NDArray[Any]], n: int, snaplen: int) -> bytes:
    kind = cols["kind"]
    keys = np.stack([kind.astype(np.int64), cols["flow"].astype(np.int64),
                     cols["dir"].astype(np.int64), cols["opcode"].astype(np.int64),
                     cols["payload"].astype(np.int64), cols["src_mac"].astype(np.int64),
                     cols["dst_mac"].astype(np.int64), cols["pfc_cev"].astype(np.int64),
                     cols["vlan"].astype(np.int64)], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    groups: list[tuple[npt.NDArray[np.intp], U8]] = []
    orig = np.zeros(n, dtype=np.int64)
    for g, key in enumerate(uniq.tolist()):
        k, fidx, direction, opcode, payload, smac, dmac, cev, vlan = key
        sel = np.nonzero(inverse == g)[0]
        tag = None if vlan < 0 else Vlan(pcp=0, vid=vlan)
        if k == Kind.ROCE:
            tmpl = _roce_template(scenario, fidx, direction, opcode, payload, smac, dmac)
            rows = _synth_roce(tmpl, cols, sel, snaplen)
        elif k == Kind.PFC:
            tmpl = build_pfc_frame(smac.to_bytes(6, "big"), cev, (0,) * 8, vlan=tag)
            rows = _synth_control(tmpl, k, cols, sel)
        else:
            tmpl = build_pause_frame(smac.to_bytes(6, "big"), 0, vlan=tag)
            rows = _synth_control(tmpl, k, cols, sel)
        orig[sel] = rows.shape[1]
        groups.append((sel, rows[:, :snaplen]))
    cap = np.minimum(orig, snaplen)
    rec_len = 16 + cap
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(rec_len[:-1], out=starts[1:])
    out = np.empty(int(rec_len.sum()), dtype=np.uint8)
    ts = cols["ts_ns"]
    hdr = np.empty((n, 4), dtype="<u4")
    hdr[:, 0] = ts // 1_000_000_000
    hdr[:, 1] = ts % 1_000_000_000
    hdr[:, 2] = cap
    hdr[:, 3] = orig
    hdr_bytes = hdr.view(np.uint8).reshape(n, 16)
    out[starts[:, None] + np.arange(16)] = hdr_bytes
    for sel, rows in groups:
        width = rows.shape[1]
        for lo in range(0, sel.size, 8192):
            part = sel[lo:lo + 8192]
            out[(starts[part] + 16)[:, None] + np.arange(width)] = rows[lo:lo + 8192]
    return out.tobytes()
