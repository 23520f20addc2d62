"""The C flow analyzer gives exactly the results of the sequential Python reference.

``FlowReference`` (netio.analyze.flows) states the per-packet rules in plain
Python; ``NativeFlows`` runs them in C (native/analyze_flows.c), fused with
frame extraction. These tests feed both the same packets (hand-made PSN
stories, random packet soups, streams past every per-flow bound, generated
and real captures) and require identical results; the hand-made stories also
pin the expected counts.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netio import native
from netio.analyze.columns import Flag, Kind, PacketColumns
from netio.analyze.engine import analyze
from netio.analyze.extract import extract_scan_reference
from netio.analyze.flows import (
    COUNTERS,
    MAX_MISSING,
    MAX_PENDING,
    OPCODE_SLOTS,
    FlowReference,
    FlowResults,
    NativeFlows,
    OpFlag,
    analyzer_config,
)
from netio.analyze.options import AnalysisOptions, FlowFilter
from netio.analyze.sketch import MAX_BINS, SUB_BITS, LatencySketch
from netio.pcap import PcapWriter
from netio.pcap.scan import CaptureScanner, ScanColumns
from netio.scenario import generate, scenario_from_dict
from netio.scenario.presets import small_dict
from netio.wire.bth import Bth, Opcode
from netio.wire.ethernet import Vlan
from netio.wire.ext import Aeth, Reth
from netio.wire.ip import Ecn
from netio.wire.packet import build_roce_frame

REF = Path(__file__).parents[1] / ".." / "shared" / "rxe-lab" / "ref-rxe-rc.pcap"
ORIGIN = 1_000_000_000
INTERVAL = 1_000_000
CNP_GAP = 50_000
Op = Opcode


def _need_native() -> None:
    if not native.AVAILABLE:
        pytest.fail("netio._native is not built (run tools/rebuild)")


# (src, dst, ipv6): A->B and B->A over IPv4 and IPv6. The IPv6 pair is chosen so
# that the four 32-bit words of each address XOR to the same value as its
# sibling's (the fold netio used to key flows on): only full keys keep them apart.
HOSTS: tuple[tuple[int, int, bool], ...] = (
    (0x0A000001, 0x0A000002, False),
    (0x0A000002, 0x0A000001, False),
    (0xFD00_0000_0000_0000_0000_0000_0000_0001, 0xFD00_0000_0000_0000_0000_0000_0000_0002, True),
    (0xFD00_0000_0000_0000_0000_0000_0000_0002, 0xFD00_0000_0000_0000_0000_0000_0000_0001, True),
    (0xFD00_0000_0000_0001_0000_0000_0000_0000, 0xFD00_0000_0000_0000_0000_0000_0000_0002, True),
)


def columns(packets: list[dict[str, Any]]) -> PacketColumns:
    """RoCE rows from dicts: hosts (index into HOSTS), qp, op, psn, ts and optional fields."""
    cols = PacketColumns.empty(len(packets))
    for i, p in enumerate(packets):
        src, dst, v6 = HOSTS[p.get("hosts", 0)]
        cols.kind[i] = p.get("kind", Kind.ROCE)
        cols.ts_ns[i] = p["ts"]
        flags = p.get("flags", 0) | (Flag.IPV6 if v6 else 0)
        if v6:
            cols.src_ip6[i] = np.frombuffer(src.to_bytes(16, "big"), np.uint8)
            cols.dst_ip6[i] = np.frombuffer(dst.to_bytes(16, "big"), np.uint8)
        else:
            cols.src_ip[i], cols.dst_ip[i] = src, dst
        cols.flags[i] = flags
        cols.dest_qp[i] = p["qp"]
        cols.opcode[i] = p["op"]
        cols.psn[i] = p["psn"] & 0xFFFFFF
        cols.ecn[i] = p.get("ecn", 2)
        cols.syndrome[i] = p.get("syn", 0)
        cols.reth_len[i] = p.get("reth", 0)
        cols.payload_bytes[i] = p.get("pay", 0)
        cols.frame_bytes[i] = p.get("pay", 0) + 62
        cols.src_mac[i] = 0x020000000001 + p.get("hosts", 0)
        cols.dst_mac[i] = 0x020000000100
        cols.pcp[i] = p.get("pcp", 3)
    return cols


def both(cols: PacketColumns, cuts: list[int] | None = None, origin: int = ORIGIN
         ) -> FlowResults:
    """Results of the reference and of the C analyzer (fed in pieces); asserts they agree."""
    _need_native()
    ref = FlowReference(origin, INTERVAL, CNP_GAP)
    nat = NativeFlows(analyzer_config(origin, INTERVAL, CNP_GAP))
    bounds = [0, *sorted(c for c in (cuts or []) if 0 < c < len(cols)), len(cols)]
    for lo, hi in itertools.pairwise(bounds):
        part = cols.take(slice(lo, hi))
        ref.feed(part)
        nat.feed_columns(part)
    r, n = ref.results(), nat.results()
    assert n.differences(r) == []
    return r


def test_constants_match_the_c_enums() -> None:
    _need_native()
    lib = native.lib
    assert len(COUNTERS) == lib.NETIO_FC_COUNT
    for i, name in enumerate(COUNTERS):
        assert getattr(lib, f"NETIO_FC_{name.upper()}") == i, name
    for flag in OpFlag:
        assert getattr(lib, f"NETIO_OPF_{flag.name}") == flag.value
    assert (SUB_BITS, MAX_BINS, MAX_MISSING, MAX_PENDING, OPCODE_SLOTS) == (
        lib.NETIO_SKETCH_SUB_BITS, lib.NETIO_SKETCH_MAX_BINS, lib.NETIO_FLOW_MAX_MISSING,
        lib.NETIO_FLOW_MAX_PENDING, lib.NETIO_FLOW_OPCODE_SLOTS)


def _spec_bucket(v: int) -> int:
    """The sketch's bucket of v as its docstring defines it: below 16 one bucket per
    value; above, octave e = floor(log2 v) cut into 16 equal parts, counted from 16."""
    if v < 16:
        return v
    e = math.floor(math.log2(v))
    return 16 * (e - 3) + math.floor((v / 2**e - 1) * 16)


def _spec_buckets(values: list[int]) -> tuple[int, int, int, list[int]]:
    return len(values), min(values), max(values), sorted(_spec_bucket(v) for v in values)


def _latencies(sk: LatencySketch | None) -> tuple[int, int, int, list[int]]:
    """count, min, max and the bucket of every sample, ascending."""
    assert sk is not None
    buckets = [sk.lo_index + i for i, n in enumerate(sk.bins.tolist()) for _ in range(n)]
    return sk.count, sk.min_ns, sk.max_ns, buckets


def _c(r: FlowResults, fid: int, *names: str) -> list[int]:
    return [int(r.c[n][fid]) for n in names]


def test_request_psn_story_with_wrap_loss_reorder_and_duplicates() -> None:
    t = iter(range(ORIGIN, ORIGIN + 10_000_000, 1000))
    w = Op.RC_RDMA_WRITE_MIDDLE
    psns = [0xFFFFFD, 0xFFFFFE, 0xFFFFFF, 0x000000, 0x000002, 0x000003,  # 0x1 lost upstream
            0x000001,  # the retransmission fills the gap: out of order
            0x000001, 0x000002, 0x000003,  # go-back-N copies already seen: duplicates
            0x000004, 0x000008,  # 5..7 lost
            0x000006]  # fills the middle of that gap
    pk = [{"qp": 0x20, "op": w, "psn": p, "ts": next(t), "pay": 1024} for p in psns]
    pk[-1]["op"] = Op.RC_RDMA_WRITE_LAST
    r = both(columns(pk), cuts=[3, 7])
    assert _c(r, 0, "requests", "gaps", "gap_packets", "ooo", "dups", "messages") == [
        13, 2, 4, 2, 3, 1]
    assert _c(r, 0, "goodput", "data_payload") == [10 * 1024, 10 * 1024]
    # The late copy of 0x5 or 0x7 would now be out of order, a second 0x6 a duplicate.
    more = pk + [{"qp": 0x20, "op": w, "psn": p, "ts": next(t), "pay": 1024}
                 for p in (5, 7, 6)]
    r = both(columns(more))
    assert _c(r, 0, "ooo", "dups") == [4, 4]


def test_read_request_span_and_read_response_duplicates() -> None:
    t = iter(range(ORIGIN, ORIGIN + 10_000_000, 1000))
    rq, rs = 0x20, 0x10  # requester's QP key (A->B, dest qp 0x20), responder's key
    pk = [
        {"qp": rq, "op": Op.RC_RDMA_READ_REQUEST, "psn": 100, "reth": 4096,
         "flags": Flag.ACK_REQ, "ts": next(t)},  # responses use PSNs 100..115
        {"qp": rq, "op": Op.RC_SEND_ONLY, "psn": 116, "ts": next(t), "pay": 64},  # no gap
        {"hosts": 1, "qp": rs, "op": Op.RC_RDMA_READ_RESPONSE_FIRST, "psn": 100, "syn": 0,
         "ts": next(t), "pay": 256},
        *({"hosts": 1, "qp": rs, "op": Op.RC_RDMA_READ_RESPONSE_MIDDLE, "psn": p, "ts": next(t),
           "pay": 256} for p in (101, 102, 104)),  # 103 lost upstream
        {"hosts": 1, "qp": rs, "op": Op.RC_RDMA_READ_RESPONSE_MIDDLE, "psn": 102,
         "ts": next(t), "pay": 256},  # duplicate
        {"hosts": 1, "qp": rs, "op": Op.RC_RDMA_READ_RESPONSE_MIDDLE, "psn": 103,
         "ts": next(t), "pay": 256},  # fills the gap
        {"hosts": 1, "qp": rs, "op": Op.RC_RDMA_READ_RESPONSE_LAST, "psn": 115, "syn": 0,
         "ts": next(t), "pay": 256},  # 105..114 lost
        {"hosts": 1, "qp": rs, "op": Op.RC_ACKNOWLEDGE, "psn": 116, "syn": 0, "ts": next(t)},
        {"qp": rq, "op": Op.RC_RDMA_READ_REQUEST, "psn": 200, "reth": 1, "ts": next(t)},
        {"hosts": 1, "qp": rs, "op": Op.RC_RDMA_READ_RESPONSE_ONLY, "psn": 200, "syn": 0,
         "ts": next(t), "pay": 1},  # a new response message may start anywhere ahead
    ]
    r = both(columns(pk))
    req, resp = r.keys.index(r.keys[0]), 1
    assert r.pair(req) == resp and r.pair(resp) == req
    assert _c(r, req, "gaps", "requests") == [1, 3]  # 117..199 skipped by the second READ
    assert _c(r, resp, "rr_packets", "rr_gaps", "rr_gap_packets", "rr_dups", "rr_ooo") == [
        8, 2, 11, 1, 1]
    assert _latencies(r.sketch(req, "read")) == _spec_buckets([2000, 1000])
    assert int(r.c["data_payload"][resp]) == 6 * 256 + 1  # the duplicate is not data


def test_ack_latency_follows_the_psn_order_of_first_copies() -> None:
    t = iter(range(ORIGIN, ORIGIN + 10_000_000, 1000))
    s = Op.RC_SEND_ONLY
    pk = [{"qp": 0x20, "op": s, "psn": p, "flags": Flag.ACK_REQ, "ts": next(t)}
          for p in (1, 3, 4)]  # 2 lost upstream
    pk.append({"qp": 0x20, "op": s, "psn": 2, "flags": Flag.ACK_REQ, "ts": next(t)})  # fill
    pk.append({"hosts": 1, "qp": 0x10, "op": Op.RC_ACKNOWLEDGE, "psn": 2, "syn": 0,
               "ts": next(t)})  # acknowledges 1 and 2
    pk.append({"hosts": 1, "qp": 0x10, "op": Op.RC_ACKNOWLEDGE, "psn": 4, "syn": 0x61,
               "ts": next(t)})  # a NAK does not acknowledge
    pk.append({"hosts": 1, "qp": 0x10, "op": Op.RC_ACKNOWLEDGE, "psn": 4, "syn": 0x2E,
               "ts": next(t)})  # RNR NAK, timer code 14
    pk.append({"hosts": 1, "qp": 0x10, "op": Op.RC_ACKNOWLEDGE, "psn": 4, "syn": 0,
               "ts": next(t)})
    r = both(columns(pk))
    assert _latencies(r.sketch(0, "ack")) == _spec_buckets([4000, 1000, 6000, 5000])
    assert r.nak_counts(1) == {1: 1} and _c(r, 1, "naks", "rnr", "rnr_codes") == [
        1, 1, 1 << 14]


def test_cnp_reaction_violations_and_pairing_by_psn() -> None:
    t = iter(range(ORIGIN, ORIGIN + 10_000_000, 10_000))
    pk = []
    for p in range(10):  # two QPs between the same hosts, PSNs far apart
        pk.append({"qp": 0x20, "op": Op.RC_SEND_ONLY, "psn": 1000 + p, "ts": next(t),
                   "ecn": 3 if p in (2, 3) else 2, "pay": 8})
        pk.append({"qp": 0x21, "op": Op.RC_SEND_ONLY, "psn": 900_000 + p, "ts": next(t),
                   "pay": 8})
    pk.append({"hosts": 1, "qp": 0x11, "op": Op.RC_ACKNOWLEDGE, "psn": 900_009, "ts": next(t)})
    pk.append({"hosts": 1, "qp": 0x10, "op": Op.CNP, "psn": 0, "ecn": 0, "flags": Flag.BECN,
               "ts": next(t)})  # the last unpaired pair: 0x10 <-> 0x20
    pk.append({"hosts": 1, "qp": 0x10, "op": Op.CNP, "psn": 0, "ecn": 0, "ts": next(t)})
    r = both(columns(pk), cuts=[5])
    q20, q21, a11, a10 = range(4)
    assert r.pair(a11) == q21 and r.pair(a10) == q20
    # from the first CE:
    assert _latencies(r.sketch(q20, "cnp")) == _spec_buckets([(21 - 4) * 10_000])
    assert _c(r, a10, "cnps", "cnp_violations", "becn") == [2, 1, 1]
    assert _c(r, q20, "ce") == [2] and int(r.ce_series.sum()) == 2


def test_ipv6_flows_are_keyed_on_full_addresses() -> None:
    pk = [{"hosts": h, "qp": 0x20, "op": Op.RC_SEND_ONLY, "psn": 1, "ts": ORIGIN + h}
          for h in (0, 2, 4)]
    r = both(columns(pk))
    assert len(r.keys) == 3
    assert [k.ipv6 for k in r.keys] == [False, True, True]
    assert r.keys[1].src_ip != r.keys[2].src_ip


def test_bounds_keep_memory_per_flow() -> None:
    """Past MAX_MISSING gaps and MAX_PENDING waits both agree; latencies in a sketch."""
    n = 2 * MAX_MISSING + 10
    psn = np.arange(n, dtype=np.int64) * 2  # every other PSN lost: a gap per packet
    cols = PacketColumns.empty(2 * n + 2 * MAX_PENDING + 50)
    k = 0

    def put(hosts: int, qp: int, op: int, p: int, ts: int, flags: int = 0) -> None:
        nonlocal k
        src, dst, _ = HOSTS[hosts]
        cols.kind[k], cols.ts_ns[k], cols.src_ip[k], cols.dst_ip[k] = Kind.ROCE, ts, src, dst
        cols.dest_qp[k], cols.opcode[k], cols.psn[k] = qp, op, p & 0xFFFFFF
        cols.flags[k], cols.ecn[k], cols.payload_bytes[k] = flags, 2, 16
        k += 1

    for i in range(n):
        put(0, 0x20, Op.RC_SEND_ONLY, int(psn[i]), ORIGIN + 10 * i, Flag.ACK_REQ)
        put(1, 0x10, Op.RC_ACKNOWLEDGE, int(psn[i]), ORIGIN + 10 * i + 3)
    for i in range(2 * MAX_PENDING):  # never acknowledged (no reverse key)
        put(0, 0x21, Op.RC_SEND_ONLY, i, ORIGIN + 10 * n + i, Flag.ACK_REQ)
    for p in (1, 3, int(psn[-1]) - 1):  # forgotten gaps become duplicates
        put(0, 0x20, Op.RC_SEND_ONLY, p, ORIGIN + 20 * n)
    r = both(cols.take(slice(0, k)), cuts=[1000, n, n + 7])
    assert _c(r, 0, "gaps") == [n - 1]
    assert _c(r, 0, "dups", "ooo") == [2, 1]
    lat = r.sketch(0, "ack")
    assert lat is not None and lat.count == n and (lat.min_ns, lat.max_ns) == (3, 3)
    assert lat.bins.tolist() == [n] and lat.lo_index == 3  # values below 16 are exact


_OPS = [Op.RC_SEND_FIRST, Op.RC_SEND_MIDDLE, Op.RC_SEND_LAST, Op.RC_SEND_ONLY,
        Op.RC_RDMA_WRITE_FIRST, Op.RC_RDMA_WRITE_ONLY, Op.RC_RDMA_READ_REQUEST,
        Op.RC_RDMA_READ_RESPONSE_FIRST, Op.RC_RDMA_READ_RESPONSE_MIDDLE,
        Op.RC_RDMA_READ_RESPONSE_LAST, Op.RC_RDMA_READ_RESPONSE_ONLY, Op.RC_ACKNOWLEDGE,
        Op.RC_ATOMIC_ACKNOWLEDGE, Op.RC_FETCH_ADD, Op.UC_SEND_ONLY, Op.UD_SEND_ONLY, Op.CNP]

_packet = st.fixed_dictionaries({
    "hosts": st.sampled_from([0, 0, 0, 1, 1, 2, 3, 4]),
    "qp": st.sampled_from([0x10, 0x11, 0x20, 0x20, 0x21]),
    "op": st.sampled_from([*_OPS, Op.RC_SEND_ONLY, Op.RC_SEND_ONLY, Op.RC_ACKNOWLEDGE]),
    "dpsn": st.sampled_from([-5, -3, -2, -1, 0, 1, 1, 1, 1, 2, 4, 8]),
    "flags": st.sampled_from([0, Flag.ACK_REQ, Flag.ACK_REQ, Flag.FECN | Flag.BECN,
                              Flag.ICRC_CHECKED, Flag.ICRC_CHECKED | Flag.ICRC_OK]),
    "ecn": st.integers(0, 3),
    "syn": st.sampled_from([0, 0, 0, 0x1F, 0x21, 0x2E, 0x60, 0x61, 0x64]),
    "reth": st.sampled_from([0, 1, 256, 257, 4096]),
    "pay": st.integers(0, 4096),
    "dt": st.integers(-3, 40_000),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_packet, max_size=120), st.integers(0, 0xFFFFFF),
       st.lists(st.integers(0, 120), max_size=4))
def test_random_packet_soups_agree(soup: list[dict[str, Any]], psn0: int,
                                   cuts: list[int]) -> None:
    ts = ORIGIN - 5_000
    psn: dict[tuple[int, int], int] = {}
    pk = []
    for p in soup:
        # Both directions of a QP pair share one PSN walk, so ACKs and READ
        # responses carry PSNs near their requests'.
        key = ((0, 0, 1, 1, 2)[p["hosts"]], p["qp"] & 1)
        psn[key] = (psn.get(key, psn0) + p["dpsn"]) & 0xFFFFFF
        ts += p["dt"]
        pk.append({**p, "psn": psn[key], "ts": ts})
    both(columns(pk), cuts)


def _stream(seed: int, n: int) -> list[dict[str, Any]]:
    """A long random conversation on three QP pairs (IPv4 and IPv6): writes with loss,
    go-back-N and reordering, ACK/NAK/RNR answers, READs with lost and repeated
    responses, CE marks and CNPs, timestamps mostly increasing."""
    rng = np.random.default_rng(seed)
    conns = [(0, 1, 0x20, 0x10), (0, 1, 0x21, 0x11), (2, 3, 0x20, 0x10)]
    psn = [int(rng.integers(0, 1 << 24)) for _ in conns]
    ts = ORIGIN
    out: list[dict[str, Any]] = []
    while len(out) < n:
        k = int(rng.integers(len(conns)))
        fwd, rev, fqp, rqp = conns[k]
        ts += int(rng.integers(-2, 30_000))
        roll = rng.random()
        if roll < 0.55:  # a request; sometimes ahead (loss) or behind (retransmission)
            step = int(rng.choice([1, 1, 1, 1, 1, 1, 3, 7, -2, -4, 0]))
            psn[k] = (psn[k] + step) & 0xFFFFFF
            op = int(rng.choice([Op.RC_SEND_ONLY, Op.RC_RDMA_WRITE_MIDDLE, Op.RC_RDMA_WRITE_LAST,
                                 Op.RC_RDMA_READ_REQUEST]))
            out.append({"hosts": fwd, "qp": fqp, "op": op, "psn": psn[k], "ts": ts,
                        "flags": int(rng.choice([0, Flag.ACK_REQ])), "pay": 1024,
                        "reth": int(rng.choice([256, 1024, 3000])),
                        "ecn": int(rng.choice([2, 2, 2, 3]))})
        elif roll < 0.8:  # an answer at or a little behind the PSN
            back = int(rng.choice([0, 0, 0, 1, 2]))
            syn = int(rng.choice([0, 0, 0, 0, 0x60, 0x2E]))
            op = int(rng.choice([Op.RC_ACKNOWLEDGE, Op.RC_ACKNOWLEDGE,
                                 Op.RC_RDMA_READ_RESPONSE_FIRST, Op.RC_RDMA_READ_RESPONSE_MIDDLE,
                                 Op.RC_RDMA_READ_RESPONSE_LAST, Op.RC_RDMA_READ_RESPONSE_ONLY]))
            out.append({"hosts": rev, "qp": rqp, "op": op, "psn": psn[k] - back, "ts": ts,
                        "syn": syn, "pay": 256 if op != Op.RC_ACKNOWLEDGE else 0})
        else:  # a CNP back to the sender
            out.append({"hosts": rev, "qp": rqp, "op": Op.CNP, "psn": 0, "ts": ts, "ecn": 0,
                        "flags": Flag.BECN})
    return out


@pytest.mark.parametrize("seed", range(6))
def test_long_random_streams_agree(seed: int) -> None:
    r = both(columns(_stream(seed, 6000)), cuts=[100, 2500, 2501])
    seen = {name for name in COUNTERS if int(r.c[name].max(initial=0)) > 0}
    assert {"gaps", "dups", "ooo", "rr_gaps", "rr_dups", "rr_ooo", "naks", "rnr",
            "cnp_violations"} <= seen
    assert {kind for _, kind in r.sketches} == {"ack", "read", "cnp"}


# ------------------------------------------------------------- whole captures


def _capture_columns(path: Path) -> PacketColumns:
    with CaptureScanner(str(path)) as sc:
        scan = ScanColumns.concatenate(list(sc.chunks()))
        return extract_scan_reference(sc.buffer, scan)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("flows")
    return [str(p) for p in generate(scenario_from_dict(small_dict()), out).captures]


def test_generated_and_rxe_captures_agree(small: list[str]) -> None:
    for path in [*small, str(REF)]:
        cols = _capture_columns(Path(path))
        r = both(cols, cuts=[len(cols) // 3, len(cols) // 2], origin=int(cols.ts_ns[0]))
        assert r.beyond_series == 0
    # With a far-away origin the CE/CNP series would be years long: both cut it alike.
    r = both(_capture_columns(Path(small[0])), origin=ORIGIN)
    assert r.beyond_series > 0 and r.ce_series.size == 0


@pytest.mark.parametrize("opts", [
    AnalysisOptions(),
    AnalysisOptions(start_ns=260_000_000, end_ns=700_000_000),
    AnalysisOptions(priorities=frozenset({3})),
    AnalysisOptions(flow=FlowFilter(0x0A000001, None, None)),
    AnalysisOptions(flow=FlowFilter(None, 0x0A000005, 0x51), verify_icrc=False),
    AnalysisOptions(flow=FlowFilter(0x0A000001, None, None, ipv6=True)),  # no IPv6 here
])
def test_native_pipeline_matches_the_reference_document(small: list[str],
                                                        opts: AnalysisOptions) -> None:
    _need_native()
    a = analyze(small, opts, use_native=True, chunk_records=777)
    b = analyze(small, opts, use_native=False)
    assert a.pop("native") is True and b.pop("native") is False
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_victim_flows_are_listed(small: list[str]) -> None:
    doc = analyze(small, AnalysisOptions())
    victims = doc["spreading"][0]["victims"]
    assert [v["capture"] for v in victims] == ["sw1-p4"]
    flows = {(f["src_ip"], f["dst_ip"], f["dest_qp"]) for f in victims[0]["flows"]}
    # h4's writes to h5 and h4's READ responses to h5 (the reverse key of h5's READ).
    assert flows == {("10.0.0.4", "10.0.0.5", 0x52), ("10.0.0.4", "10.0.0.5", 0x53)}
    assert all(f["data_bytes"] > 0 for f in victims[0]["flows"])


def test_ipv6_capture_end_to_end(tmp_path: Path) -> None:
    mac1, mac2 = b"\x02\0\0\0\0\x01", b"\x02\0\0\0\0\x02"
    a1, b1 = "fd00::1", "fd00::2"
    a2 = "fd00:0:0:1::"  # folds to the same 32 bits as fd00::1
    frames = []
    for i, src in enumerate((a1, a2, a1, a2)):
        frames.append(build_roce_frame(
            src_mac=mac1, dst_mac=mac2, src_ip=src, dst_ip=b1, src_port=5000, ipv6=True,
            bth=Bth(Op.RC_RDMA_WRITE_ONLY, dest_qp=0x12, psn=10 + i // 2, ack_req=True),
            reth=Reth(0x1000, 5, 8), payload=bytes(8), ecn=Ecn.ECT0, vlan=Vlan(pcp=3, vid=7)))
    frames.append(build_roce_frame(src_mac=mac2, dst_mac=mac1, src_ip=b1, dst_ip=a1,
                                   src_port=5001, ipv6=True,
                                   bth=Bth(Op.RC_ACKNOWLEDGE, dest_qp=0x11, psn=11),
                                   aeth=Aeth.ack(0), vlan=Vlan(pcp=3, vid=7)))
    path = tmp_path / "v6.pcap"
    w = PcapWriter(path)
    for i, fr in enumerate(frames):
        w.write(ORIGIN + 1000 * i, fr)
    w.close()
    docs = [analyze([str(path)], AnalysisOptions(), use_native=u) for u in (True, False)]
    for doc in docs:
        doc.pop("native")
        got = {(f["src_ip"], f["dst_ip"]): f for f in doc["flows"]}
        assert set(got) == {(a1, b1), ("fd00:0:0:1::", b1)}
        assert got[(a1, b1)]["ack_latency_s"]["count"] == 2
        assert got[(a1, b1)]["reverse"]["dest_qp"] == 0x11
    assert json.dumps(docs[0], sort_keys=True) == json.dumps(docs[1], sort_keys=True)
    # --flow with IPv6 addresses: the native filter and the reference agree.
    v6 = [int(ipaddress.IPv6Address(x)) for x in (a1, b1, a2)]
    for fl, want in [
        (FlowFilter(v6[0], v6[1], None, ipv6=True), {(a1, b1)}),
        (FlowFilter(v6[2], None, None, ipv6=True), {(a2, b1)}),
        (FlowFilter(None, v6[1], 0x12, ipv6=True), {(a1, b1), (a2, b1)}),
        (FlowFilter(v6[1], v6[0], 0x11, ipv6=True), {(a1, b1)}),  # given from the other end
        (FlowFilter(None, None, 0x12), {(a1, b1), (a2, b1)}),  # a QP alone: any IP version
        (FlowFilter(0xFD000001, None, None), set()),  # an IPv4 address: no IPv6 packet
    ]:
        got = [analyze([str(path)], AnalysisOptions(flow=fl), use_native=u) for u in (True, False)]
        for doc in got:
            doc.pop("native")
            assert {(f["src_ip"], f["dst_ip"]) for f in doc["flows"]} == want, fl
        assert json.dumps(got[0], sort_keys=True) == json.dumps(got[1], sort_keys=True)
    assert [f["reverse"]["packets"] for f in analyze(
        [str(path)], AnalysisOptions(flow=FlowFilter(v6[0], v6[1], 0x12, ipv6=True)))["flows"]
    ] == [1]  # the ACK, whatever its QP


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 1 << 42), min_size=1, max_size=300))
def test_latency_sketches_agree_and_fold_alike(delays: list[int]) -> None:
    # One request and its ACK after each delay: ACK latency = delay, over up to 42
    # octaves, so the C sketch and the reference both fold their lowest buckets.
    packets: list[dict[str, Any]] = []
    ts = ORIGIN
    for i, d in enumerate(delays):
        packets.append({"qp": 0x20, "op": Op.RC_SEND_ONLY, "psn": i, "ts": ts,
                        "flags": Flag.ACK_REQ})
        packets.append({"hosts": 1, "qp": 0x10, "op": Op.RC_ACKNOWLEDGE, "psn": i,
                        "ts": ts + d})
        ts += d + 1
    r = both(columns(packets), cuts=[len(packets) // 2])
    sk = r.sketch(0, "ack")
    assert sk is not None and (sk.count, sk.min_ns, sk.max_ns) == (
        len(delays), min(delays), max(delays))
    assert len(sk.bins) <= MAX_BINS and int(sk.bins.sum()) == len(delays)


def test_data_series_sums_intervals_revisited_by_timestamps_going_back() -> None:
    # One flow's first-copy SENDs at these times (in intervals of INTERVAL from
    # ORIGIN): 0.5, 2.5, 1.5, 2.6, 0.2, 2.7 -> interval 0: 100 + 500 bytes,
    # 1: 300, 2: 200 + 400 + 600 (each interval once, ascending, summed).
    at = [0.5, 2.5, 1.5, 2.6, 0.2, 2.7]
    pk = [{"qp": 0x10, "op": Op.RC_SEND_ONLY, "psn": i, "pay": 100 * (i + 1),
           "ts": ORIGIN + int(t * INTERVAL)} for i, t in enumerate(at)]
    r = both(columns(pk))
    bins, vals = r.series[0]
    assert bins.tolist() == [0, 1, 2] and vals.tolist() == [600, 300, 1200]
