"""Decode the kernel-rxe reference capture and hold every packet to its listing.

``ref-rxe-rc.pcap`` (200 RoCEv2 frames from Linux rxe, Ethernet link type) and
``ref-rxe-rc.txt`` (an independent per-packet decode) live in the rxe lab.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

import pytest

from netio import native
from netio.pcap import open_capture
from netio.wire import icrc
from netio.wire.ext import AckType
from netio.wire.link import LinkType
from netio.wire.packet import Frame, decode_frame

LAB = Path(__file__).parents[1] / ".." / "shared" / "rxe-lab"
PCAP = LAB / "ref-rxe-rc.pcap"
LISTING = LAB / "ref-rxe-rc.txt"

_LINE = re.compile(
    r"^\s*(?P<no>\d+) (?P<src>[\d.]+):(?P<sport>\d+) > (?P<dst>[\d.]+) qp=0x(?P<qp>[0-9a-f]+) "
    r"psn=(?P<psn>\d+) (?P<ack>A )?(?P<op>[A-Z_]+)(?P<rest>.*) payload=(?P<payload>\d+)$")
_AETH = re.compile(r"AETH\((?P<type>ACK|RNR_NAK|NAK) (?P<value>\d+) msn=(?P<msn>\d+)\)")
_RETH = re.compile(r"RETH\(va=0x(?P<va>[0-9a-f]+) rkey=0x(?P<rkey>[0-9a-f]+) len=(?P<len>\d+)\)")
_ATOMIC = re.compile(r"AtomicETH\(va=0x(?P<va>[0-9a-f]+) rkey=0x(?P<rkey>[0-9a-f]+) "
                     r"add/swap=(?P<swap>\d+) cmp=(?P<cmp>\d+)\)")
_ORIG = re.compile(r"orig=(?P<orig>\d+)")
_DETH = re.compile(r"DETH\(qkey=0x(?P<qkey>[0-9a-f]+) srcqp=0x(?P<srcqp>[0-9a-f]+)\)")
_MAD = re.compile(r"MAD\(class=0x(?P<cls>[0-9a-f]+) method=0x(?P<method>[0-9a-f]+) "
                  r"attr=(?P<attr>\w+)\)")
_COUNT = re.compile(r"^  (?P<op>(?:RC|UC|UD)_[A-Z_]+)\s+(?P<n>\d+)$")


@dataclass(frozen=True)
class Expected:
    src: str
    src_port: int
    dst: str
    dest_qp: int
    psn: int
    ack_req: bool
    opcode: str
    payload_bytes: int
    rest: str


def _listing() -> tuple[list[Expected], Counter[str]]:
    packets: list[Expected] = []
    counts: Counter[str] = Counter()
    in_packets = False
    for line in LISTING.read_text().splitlines():
        if line.startswith("Per-packet decode"):
            in_packets = True
            continue
        if not in_packets:
            m = _COUNT.match(line)
            if m:
                counts[m["op"]] = int(m["n"])
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        if int(m["no"]) != len(packets) + 1:
            raise ValueError(f"listing out of order at {line!r}")
        packets.append(Expected(m["src"], int(m["sport"]), m["dst"], int(m["qp"], 16),
                                int(m["psn"]), m["ack"] is not None, m["op"],
                                int(m["payload"]), m["rest"]))
    return packets, counts


@pytest.fixture(scope="module")
def decoded() -> list[tuple[Expected, Frame]]:
    expected, _ = _listing()
    with open_capture(PCAP) as reader:
        records = list(reader)
    assert len(records) == len(expected) == 200
    out = []
    for exp, record in zip(expected, records, strict=True):
        assert record.linktype == LinkType.ETHERNET
        out.append((exp, decode_frame(record.frame, record.linktype)))
    return out


def test_listing_covers_every_step() -> None:
    expected, counts = _listing()
    assert len(expected) == 200
    assert sum(counts.values()) == 200
    assert Counter(e.opcode for e in expected) == counts


def test_every_packet_matches_listing(decoded: list[tuple[Expected, Frame]]) -> None:
    for exp, frame in decoded:
        where = f"frame {exp.src}:{exp.src_port} psn={exp.psn} {exp.opcode}"
        assert frame.ipv4 is not None and frame.udp is not None and frame.roce is not None, where
        roce = frame.roce
        bth = roce.bth
        assert frame.ipv4.src_ip == IPv4Address(exp.src), where
        assert frame.ipv4.dst_ip == IPv4Address(exp.dst), where
        assert frame.udp.src_port == exp.src_port and frame.udp.dst_port == 4791, where
        assert bth.opcode.name == exp.opcode, where
        assert bth.dest_qp == exp.dest_qp, where
        assert bth.psn == exp.psn, where
        assert bth.ack_req == exp.ack_req, where
        assert len(frame.payload) == exp.payload_bytes, where

        m = _AETH.search(exp.rest)
        assert (roce.aeth is not None) == (m is not None), where
        if m is not None and roce.aeth is not None:
            aeth = roce.aeth
            assert aeth.msn == int(m["msn"]), where
            kind, value = m["type"], int(m["value"])
            assert aeth.ack_type is AckType[kind], where
            if kind == "ACK":
                assert aeth.credit_count == value, where
            elif kind == "RNR_NAK":
                assert aeth.rnr_timer_code == value, where
            else:
                assert aeth.nak_code == value, where

        m = _RETH.search(exp.rest)
        assert (roce.reth is not None) == (m is not None), where
        if m is not None and roce.reth is not None:
            assert roce.reth.virtual_address == int(m["va"], 16), where
            assert roce.reth.rkey == int(m["rkey"], 16), where
            assert roce.reth.dma_length == int(m["len"]), where

        m = _ATOMIC.search(exp.rest)
        assert (roce.atomic_eth is not None) == (m is not None), where
        if m is not None and roce.atomic_eth is not None:
            atomic = roce.atomic_eth
            assert atomic.virtual_address == int(m["va"], 16), where
            assert atomic.rkey == int(m["rkey"], 16), where
            assert atomic.swap_add_data == int(m["swap"]), where
            assert atomic.compare_data == int(m["cmp"]), where

        m = _ORIG.search(exp.rest)
        assert (roce.atomic_ack_eth is not None) == (m is not None), where
        if m is not None and roce.atomic_ack_eth is not None:
            assert roce.atomic_ack_eth.original_remote_data == int(m["orig"]), where

        m = _DETH.search(exp.rest)
        assert (roce.deth is not None) == (m is not None), where
        if m is not None and roce.deth is not None:
            assert roce.deth.qkey == int(m["qkey"], 16), where
            assert roce.deth.src_qp == int(m["srcqp"], 16), where

        m = _MAD.search(exp.rest)
        assert (roce.mad is not None) == (m is not None), where
        if m is not None and roce.mad is not None:
            assert roce.mad.mgmt_class == int(m["cls"], 16), where
            assert roce.mad.method == int(m["method"], 16), where
            cm = roce.mad.cm_message
            assert cm is not None and cm.name == m["attr"], where


def test_all_icrcs_verify_native_and_reference(decoded: list[tuple[Expected, Frame]]) -> None:
    # NETIO_PURE=1 deliberately runs without the extension; otherwise it must be built.
    if not native.AVAILABLE and os.environ.get("NETIO_PURE") != "1":
        pytest.fail("netio._native is not built (run tools/rebuild)")
    assert icrc.implementation() in (("pclmul", "slice8") if native.AVAILABLE else ("zlib",))
    for exp, frame in decoded:
        packet = frame.ip_packet
        stored = icrc.stored_icrc(packet)
        assert frame.icrc == stored
        body = packet[:-4]
        assert icrc.compute_icrc(body) == stored, exp
        assert icrc.compute_icrc_reference(body) == stored, exp
        assert frame.icrc_ok() is True


def test_reencoding_headers_reproduces_the_frame(decoded: list[tuple[Expected, Frame]]) -> None:
    """Encoding each decoded header again gives back the captured bytes."""
    for _exp, frame in decoded:
        assert frame.ethernet is not None and frame.ipv4 is not None and frame.udp is not None
        assert frame.roce is not None
        roce = frame.roce
        parts = [frame.ethernet.encode(), frame.ipv4.encode(), frame.udp.encode(),
                 roce.bth.encode()]
        for name in ("deth", "feth", "reth", "aeth", "atomic_eth", "atomic_ack_eth", "imm_dt",
                     "ieth"):
            header = getattr(roce, name)
            if header is not None:
                parts.append(header.encode())
        parts.append(frame.payload)
        parts.append(bytes(roce.bth.pad_count))
        parts.append(frame.icrc.to_bytes(4, "little") if frame.icrc is not None else b"")
        assert b"".join(parts) == bytes(frame.raw[:frame.l3_end])
