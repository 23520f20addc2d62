"""On the real kernel-rxe capture, netio-analyze's counts equal tshark's dissection.

tshark 4.0 dissects UDP port 4791 as RoCEv2 (InfiniBand BTH) by default; the
test checks that too. Retransmissions are derived from tshark's PSNs with a
plain seen-set (a PSN at or behind the highest seen is retransmitted; a
duplicate if that PSN was seen, out of order otherwise).
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from netio.analyze.engine import analyze
from netio.analyze.options import AnalysisOptions
from netio.wire.bth import OPCODE_TABLE

REF = Path(__file__).parents[1] / ".." / "shared" / "rxe-lab" / "ref-rxe-rc.pcap"
pytestmark = pytest.mark.tools


def _tshark_rows() -> list[list[str]]:
    exe = shutil.which("tshark")
    if exe is None:
        pytest.fail("tshark is not installed (apt-get install tshark)")
    out = subprocess.run(
        [exe, "-r", str(REF), "-T", "fields", "-E", "separator=,", "-e", "ip.src",
         "-e", "ip.dst", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp",
         "-e", "infiniband.bth.psn", "-e", "infiniband.aeth.syndrome"],
        capture_output=True, text=True, check=True).stdout
    return [line.split(",") for line in out.splitlines()]


def test_counts_equal_tshark() -> None:
    rows = _tshark_rows()
    assert len(rows) == 200 and all(r[2] for r in rows)  # every frame decoded as RoCEv2
    doc = analyze([str(REF)], AnalysisOptions())
    ours: dict[tuple[str, str, int], dict[str, int]] = {}
    ours_retx: dict[tuple[str, str, int], int] = {}
    for f in doc["flows"]:
        key = (f["src_ip"], f["dst_ip"], f["dest_qp"])
        ours[key] = f["opcodes"]
        ours_retx[key] = f["retransmitted_packets"]
        if f["reverse"] is not None:
            ours[(f["dst_ip"], f["src_ip"], f["reverse"]["dest_qp"])] = f["reverse"]["opcodes"]
    theirs: dict[tuple[str, str, int], Counter[str]] = {}
    naks: Counter[int] = Counter()
    rnr = 0
    psns: dict[tuple[str, str, int], list[int]] = {}
    for src, dst, op, qp, psn, syn in rows:
        key = (src, dst, int(qp, 16))
        info = OPCODE_TABLE[int(op)]
        assert info is not None
        theirs.setdefault(key, Counter())[info.opcode.name] += 1
        if syn:
            s = int(syn)
            if s >> 5 == 3:
                naks[s & 31] += 1
            elif s >> 5 == 1:
                rnr += 1
        if not info.is_response and info.opcode.name != "CNP":
            psns.setdefault(key, []).append(int(psn))
    assert {k: dict(v) for k, v in theirs.items()} == ours
    our_naks: Counter[str] = Counter()
    for f in doc["flows"]:
        our_naks.update(f["naks"])
    assert dict(our_naks) == {"PSN_SEQUENCE_ERROR": naks[0]} and naks[0] == 2
    assert sum(f["rnr_naks"] for f in doc["flows"]) == rnr == 2
    for key, seq in psns.items():
        seen: set[int] = set()
        top = None
        retx = 0
        for p in seq:
            if (top is not None and ((p - top) & 0xFFFFFF) >= 1 << 23) or p == top:
                retx += 1
            else:
                top = p
            seen.add(p)
        if key in ours_retx:
            assert ours_retx[key] == retx, key
    assert sum(ours_retx.values()) > 0
