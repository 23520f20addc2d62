"""CM connection set-up and tear-down: fields as tshark dissects them, connections tied to QPs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from netio.analyze.connections import CmEvent, connections
from netio.analyze.engine import analyze
from netio.analyze.options import AnalysisOptions
from netio.pcap import open_capture
from netio.wire.mad import CmDrep, CmDreq, CmRep, CmReq, CmRtu, decode_cm
from netio.wire.packet import decode_frame

REF = Path(__file__).resolve().parents[1].parent / "shared" / "rxe-lab" / "ref-rxe-rc.pcap"
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")

REQ_FIELDS = {  # tshark field -> CmReq attribute
    "infiniband.cm.req": "local_comm_id", "infiniband.cm.req.localqpn": "local_qpn",
    "infiniband.cm.req.startpsn": "starting_psn", "infiniband.cm.req.retrcount": "retry_count",
    "infiniband.cm.req.rnrretrcount": "rnr_retry_count",
    "infiniband.cm.req.pppmtu": "path_mtu_code", "infiniband.cm.req.pkey": "partition_key",
    "infiniband.cm.req.responderres": "responder_resources",
    "infiniband.cm.req.initdepth": "initiator_depth",
    "infiniband.cm.req.maxcmretr": "max_cm_retries",
    "infiniband.cm.req.localresptout": "local_cm_response_timeout",
}
REP_FIELDS = {
    "infiniband.cm.rep": "local_comm_id", "infiniband.cm.rep.remotecommid": "remote_comm_id",
    "infiniband.cm.rep.localqpn": "local_qpn", "infiniband.cm.rep.startpsn": "starting_psn",
}


def _tshark(frame: int, fields: list[str]) -> list[int]:
    out = subprocess.run(
        ["tshark", "-r", str(REF), "-Y", f"frame.number=={frame}", "-T", "fields",
         "-E", "separator=;", *[x for f in fields for x in ("-e", f)]],
        capture_output=True, text=True, check=True).stdout.strip().split(";")
    return [int(v, 0) for v in out]


def _cm_frames() -> dict[int, object]:
    got = {}
    with open_capture(REF) as r:
        for n, rec in enumerate(r, start=1):
            f = decode_frame(rec.frame, rec.linktype)
            if f.roce is not None and f.roce.mad is not None:
                got[n] = decode_cm(f.payload)
    return got


@needs_tshark
@pytest.mark.tools
def test_cm_fields_as_tshark_dissects_them() -> None:
    cm = _cm_frames()
    kinds = {n: type(m).__name__ for n, m in cm.items()}
    assert kinds == {113: "CmReq", 114: "CmRep", 115: "CmRtu", 140: "CmDreq", 141: "CmDrep"}
    req, rep = cm[113], cm[114]
    assert isinstance(req, CmReq) and isinstance(rep, CmRep)
    assert [getattr(req, a) for a in REQ_FIELDS.values()] == _tshark(113, list(REQ_FIELDS))
    assert [getattr(rep, a) for a in REP_FIELDS.values()] == _tshark(114, list(REP_FIELDS))
    prefix_hex = subprocess.run(  # printed as bare hex digits
        ["tshark", "-r", str(REF), "-Y", "frame.number==113", "-T", "fields", "-e",
         "infiniband.cm.req.serviceid.prefix"], capture_output=True, text=True,
        check=True).stdout.strip()
    prefix = int(prefix_hex, 16)
    proto, port = _tshark(113, ["infiniband.cm.req.serviceid.protocol",
                                "infiniband.cm.req.serviceid.dport"])
    assert req.service_id == (prefix << 24) | (proto << 16) | port
    assert req.path_mtu_bytes == 1024  # MTU code 3 (IBTA: 1 = 256 ... 5 = 4096)
    dreq = cm[140]
    assert isinstance(dreq, CmDreq)
    assert [dreq.local_comm_id, dreq.remote_comm_id, dreq.remote_qpn] == _tshark(
        140, ["infiniband.cm.dreq.localcommid", "infiniband.cm.dreq.remotecommid",
              "infiniband.cm.req.remoteqpneecn"])  # tshark files it under req


@needs_tshark
@pytest.mark.tools
def test_connection_in_the_reference_capture() -> None:
    doc = analyze([str(REF)], AnalysisOptions())
    (c,) = doc["connections"]
    times = {n: _tshark_time(n) for n in (113, 114, 115, 140, 141)}
    assert c["active"] == {"ip": "10.77.0.11", "qpn": 0x1B, "starting_psn": 0xFD0E15}
    assert c["passive"]["ip"] == "10.77.0.10" and c["passive"]["qpn"] == 0x1B
    assert c["setup_s"] == pytest.approx(times[115] - times[113], abs=1e-9)
    assert c["teardown_s"] == pytest.approx(times[141] - times[140], abs=1e-9)
    assert (c["path_mtu_bytes"], c["retry_count"], c["rnr_retry_count"]) == (1024, 7, 7)
    named = [f for f in doc["flows"] if f["connection"] == c["name"]]
    # The data QPs of the connection, either way: to 10.77.0.10 qp 0x1b or to .11 qp 0x1b.
    assert named and all((f["dst_ip"], f["dest_qp"]) in (("10.77.0.10", 0x1B),
                                                          ("10.77.0.11", 0x1B)) for f in named)
    assert all(f["connection"] is None for f in doc["flows"] if f not in named)
    json.dumps(doc)


def _tshark_time(frame: int) -> float:
    out = subprocess.run(["tshark", "-r", str(REF), "-Y", f"frame.number=={frame}", "-T",
                          "fields", "-e", "frame.time_relative"], capture_output=True, text=True,
                         check=True).stdout
    return float(out)


A, B = (0x0A000001, False), (0x0A000002, False)


def _req(comm: int, qpn: int) -> CmReq:
    return CmReq(comm, 0x106, qpn, 1, 1, 100, 20, 7, 0xFFFF, 5, 6, 15)


def test_messages_are_matched_by_communication_ids() -> None:
    events = [
        CmEvent(1_000, A, B, _req(11, 0x20)),
        CmEvent(1_100, A, B, _req(12, 0x21)),  # a second connection, never answered
        CmEvent(1_500, A, B, _req(11, 0x20)),  # REQ retransmitted: same connection
        CmEvent(2_000, B, A, CmRep(99, 11, 0x30, 500, 1, 1, 7)),
        CmEvent(2_500, B, A, CmRep(98, 77, 0x31, 500, 1, 1, 7)),  # answers nothing seen
        CmEvent(3_000, A, B, CmRtu(11, 99)),
        CmEvent(9_000, B, A, CmDreq(99, 11, 0x20)),  # the passive side disconnects
        CmEvent(9_400, A, B, CmDrep(11, 99)),
    ]
    first, second = connections(events)
    assert (first.active_qpn, first.passive_qpn, first.passive_psn) == (0x20, 0x30, 500)
    assert (first.setup_ns, first.teardown_ns, first.path_mtu_bytes) == (2_000, 400, 4096)
    assert first.side_of(B, 0x30) == "passive" and first.side_of(A, 0x20) == "active"
    assert first.side_of(B, 0x20) is None
    assert second.passive is None and second.setup_ns is None and second.teardown_ns is None


def test_too_short_cm_mad_is_a_decode_error() -> None:
    from netio.errors import DecodeError
    from netio.wire.mad import CmMessage, Mad

    head = Mad(attribute_id=CmMessage.REQ).encode()
    with pytest.raises(DecodeError, match="REQ needs 52 bytes"):
        decode_cm(head + bytes(20))
    assert decode_cm(Mad(attribute_id=0x0099).encode() + bytes(232)) is None
    assert isinstance(decode_cm(Mad(attribute_id=CmMessage.RTU).encode() + bytes(232)), CmRtu)
