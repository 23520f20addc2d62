"""netio-analyze and netio scenario from the command line: outputs, exit codes, bad input."""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
from ipaddress import IPv6Address
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pcap_builders import block, epb, idb, pcap_file, shb

from netio.analyze.engine import analyze
from netio.analyze.options import AnalysisOptions, FlowFilter
from netio.analyze.schema import SCHEMA_VERSION, TOP_LEVEL_KEYS
from netio.cli import scenario as scenario_cli
from netio.cli.analyze import EXIT_OK, EXIT_STORM, EXIT_UNREADABLE, EXIT_USAGE, main, parse_flow
from netio.scenario import generate, scenario_from_dict
from netio.scenario.presets import small_dict

REF = Path(__file__).parents[1] / ".." / "shared" / "rxe-lab" / "ref-rxe-rc.pcap"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("cli")
    return [str(p) for p in generate(scenario_from_dict(small_dict()), out).captures]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_text_report_storm_exit_code(small: list[str], capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    code, out, err = run(capsys, *small)
    assert code == EXIT_STORM
    lines = out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("Findings (most important first"))
    # The root cause first (the chain, with its congested destination and victims), then
    # the storms it caused.
    assert lines[at + 1].startswith("!! Pause spreading from host3: 02:00:00:00:00:03")
    assert "congested destination 10.0.0.3 (incast: 4 senders" in lines[at + 1]
    assert lines[at + 2].startswith("!! PFC storm on host3: 02:00:00:00:00:03 kept priority 3")
    assert "paused[ms]" in out and "duration[ms]" in out and "Assumptions" in out
    assert "Traceback" not in err


def test_json_document(small: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--json", *small)
    doc = json.loads(out)
    assert code == EXIT_STORM
    assert doc["schema_version"] == SCHEMA_VERSION
    assert set(TOP_LEVEL_KEYS) <= doc.keys()


def test_filters_and_no_storm_exit(small: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # Before the storm starts nothing is paused: exit 0.
    code, out, _ = run(capsys, "--json", "--end", "250ms", *small)
    doc = json.loads(out)
    assert code == EXIT_OK and doc["storms"] == [] and doc["pause_senders"] == []
    code, out, err = run(capsys, "--json", "--priority", "5", *small)
    doc = json.loads(out)
    assert doc["flows"] == [] and doc["pause_senders"] == []
    # Nothing matched the filter: the warning says so, not that the file holds no RoCE.
    assert "no RoCEv2 packets match the filters" in err and "UDP port 4791" not in err
    code, out, _ = run(capsys, "--json", "--flow", "10.0.0.1>10.0.0.5", *small)
    doc = json.loads(out)
    assert {(f["src_ip"], f["dst_ip"]) for f in doc["flows"]} == {("10.0.0.1", "10.0.0.5")}
    code, out, _ = run(capsys, "--json", "--storm-time", "400ms", *small)
    assert json.loads(out)["storms"] == [] and code == EXIT_OK


def test_link_speed_per_file(small: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    host3 = next(p for p in small if p.endswith("host3.pcap"))
    _, out, _ = run(capsys, "--json", "--link-speed", "host3.pcap=25G", host3)
    doc = json.loads(out)
    assert doc["captures"][0]["link_bps"] == 25_000_000_000


def test_plots(small: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "--plot", str(tmp_path / "plots"), *small)
    for name in ("pause_timeline.png", "flow_throughput.png", "ce_cnp.png"):
        data = (tmp_path / "plots" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--link-speed", "fast", "x.pcap"], ["--flow", "nope", "x.pcap"],
                 ["--priority", "9", "x.pcap"], ["--storm-time", "soon", "x.pcap"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "usage:" not in err
    assert err.count("\n") == 4  # one line each


@pytest.mark.parametrize(("text", "want"), [
    ("10.0.0.1>10.0.0.3:0x31", FlowFilter(0x0A000001, 0x0A000003, 0x31)),
    ("10.0.0.1>10.0.0.3", FlowFilter(0x0A000001, 0x0A000003, None)),
    ("*>10.0.0.3:49", FlowFilter(None, 0x0A000003, 49)),
    ("[10.0.0.1]>*", FlowFilter(0x0A000001, None, None)),
    ("*>*:0x12", FlowFilter(None, None, 0x12)),
    ("[fd00::1]>[fd00::2]:0x12", FlowFilter(int(IPv6Address("fd00::1")),
                                            int(IPv6Address("fd00::2")), 0x12, ipv6=True)),
    (" [fd00::1] > * ", FlowFilter(int(IPv6Address("fd00::1")), None, None, ipv6=True)),
    ("*>[::ffff:10.0.0.3]", FlowFilter(None, int(IPv6Address("::ffff:10.0.0.3")), None,
                                       ipv6=True)),
])
def test_flow_syntax(text: str, want: FlowFilter) -> None:
    assert parse_flow(text) == want


@pytest.mark.parametrize(("text", "says"), [
    ("10.0.0.1", "no '>'"),
    ("1.1.1.1>2.2.2.2>3.3.3.3", "more than one '>'"),
    ("fd00::1>fd00::2", "brackets"),
    ("fd00::1>*", "[fd00::1]"),
    ("[fd00::1>[fd00::2]", "unbalanced"),
    ("[fd00::1]>[fd00::2", "unbalanced"),
    ("[fd00::1]>[fd00::2]x", "after DST"),
    ("10.0.0.1>[fd00::2]", "IPv4 but DST is IPv6"),
    ("10.0.0.1>10.0.0.3:", "without a QP"),
    ("10.0.0.1>10.0.0.3:zz", "QP 'zz' is not a number"),
    ("10.0.0.1>10.0.0.3:0x1000000", "24-bit"),
    ("10.0.0.256>*", "SRC '10.0.0.256' is not an IP address"),
    ("[nope]>*", "SRC 'nope' is not an IP address"),
])
def test_bad_flow_is_one_line_naming_the_problem(text: str, says: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--flow", text, "x.pcap"])
    assert exc.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("netio-analyze: error: argument --flow: ")
    assert says in err and "[fd00::1]>[fd00::2]" in err  # the syntax, with an IPv6 example


def _frame(n: int = 60) -> bytes:
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + bytes(n - 14)


@pytest.mark.parametrize("case", ["missing", "empty", "garbage", "header_only"])
def test_unreadable_inputs(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.pcap"
    if case == "empty":
        path.write_bytes(b"")
    elif case == "garbage":
        path.write_bytes(b"this is not a capture at all" * 10)
    elif case == "header_only":
        path.write_bytes(pcap_file([]))
    code, _, err = run(capsys, str(path))
    assert "Traceback" not in err
    if case == "header_only":
        assert code == EXIT_OK and "holds no packets" in err
    else:
        assert code == EXIT_UNREADABLE
        assert "x.pcap" in err and "no capture could be read" in err


def test_truncated_capture_reports_what_was_read(small: list[str], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    data = Path(small[1]).read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[: len(data) // 2 + 7])
    code, out, err = run(capsys, "--json", str(cut))
    doc = json.loads(out)
    cap = doc["captures"][0]
    assert not cap["complete"] and cap["packets"] > 0
    assert "byte offset" in err and "record" in err
    assert code in (EXIT_OK, EXIT_STORM)


def test_pcapng_unknown_blocks_non_ethernet_non_roce(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    ref_frames = []
    raw = REF.read_bytes()
    off = 24
    for _ in range(5):
        caplen = struct.unpack_from("<I", raw, off + 8)[0]
        ref_frames.append(raw[off + 16: off + 16 + caplen])
        off += 16 + caplen
    ng = shb() + idb(1) + block(0x0BAD, b"custom") + b"".join(
        epb(0, i, f) for i, f in enumerate(ref_frames)) + block(0x0BAD, b"x")
    p = tmp_path / "a.pcapng"
    p.write_bytes(ng)
    code, out, err = run(capsys, "--json", str(p))
    assert json.loads(out)["captures"][0]["roce_packets"] == 5
    raw_ip = tmp_path / "raw.pcap"  # linktype 101 (raw IP): RoCE without Ethernet
    raw_ip.write_bytes(pcap_file([(1, i, f[14:], len(f) - 14) for i, f in enumerate(ref_frames)],
                                 linktype=101))
    code, out, err = run(capsys, "--json", str(raw_ip))
    assert json.loads(out)["captures"][0]["roce_packets"] == 5
    weird = tmp_path / "weird.pcap"  # a link type netio does not decode
    weird.write_bytes(pcap_file([(1, 0, _frame(), 60)], linktype=147))
    code, out, err = run(capsys, "--json", str(weird))
    assert "link type 147 is not supported" in err and code == EXIT_UNREADABLE
    plain = tmp_path / "plain.pcap"
    plain.write_bytes(pcap_file([(1, i, _frame(), 60) for i in range(3)]))
    code, out, err = run(capsys, str(plain))
    assert "no RoCEv2 packets" in err and code == EXIT_OK


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=8),
       st.integers(24, 1 << 20))
def test_fuzz_whole_pipeline(tmp_path_factory: pytest.TempPathFactory,
                             flips: list[tuple[int, int]], cut: int) -> None:
    base = _fuzz_base(tmp_path_factory)
    data = bytearray(base[:cut])
    for pos, val in flips:
        if pos < len(data):
            data[pos] = val
    path = tmp_path_factory.mktemp("fz") / "f.pcap"
    path.write_bytes(bytes(data))
    doc = analyze([str(path)], AnalysisOptions())
    json.dumps(doc)
    cap = doc["captures"][0]
    walked = _walk_pcap(bytes(data))
    if walked is None:  # the file header itself is damaged: nothing readable
        assert not cap["readable"] and cap["warnings"] and cap["records"] == 0
        return
    records, clean, linktype = walked
    assert cap["records"] == records  # every record of the file, none invented
    if not clean:  # damage is said, and the capture is not called complete
        assert not cap["complete"] and cap["warnings"]
    elif records == 0:
        assert any("holds no packets" in w for w in cap["warnings"])
    elif linktype in (1, 101, 113, 228, 229, 276):
        assert cap["complete"] and cap["packets"] == records
        assert not [w for w in cap["warnings"] if "record" in w and "byte" in w]
    else:
        assert cap["packets"] == 0 and any("not supported" in w for w in cap["warnings"])


def _walk_pcap(data: bytes) -> tuple[int, bool, int] | None:
    """(records, ended cleanly, link type) of a classic pcap, by the format's
    definition (draft-ietf-opsawg-pcap §4-5: 24-byte file header, 16-byte record
    headers with the captured length at byte 8), with netio's documented limit of
    262,144 captured bytes per record; None when the file header is not pcap's."""
    if len(data) < 24:
        return None
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        order = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        order = ">"
    else:
        return None
    linktype = struct.unpack_from(order + "I", data, 20)[0] & 0xFFFF  # low 16 bits
    off, n = 24, 0
    while off < len(data):
        if off + 16 > len(data):
            return n, False, linktype
        caplen = struct.unpack_from(order + "I", data, off + 8)[0]
        if caplen > 262_144 or off + 16 + caplen > len(data):
            return n, False, linktype
        off += 16 + caplen
        n += 1
    return n, True, linktype


_BASE: dict[str, bytes] = {}


def _fuzz_base(factory: pytest.TempPathFactory) -> bytes:
    if "b" not in _BASE:
        sc = small_dict()
        sc["ports"] = [p for p in sc["ports"] if p["name"] == "sw1-p4"]
        sc["flows"] = [f for f in sc["flows"] if f["hops"][0]["port"] == "sw1-p4"]
        for f in sc["flows"]:
            f["messages"] = min(f["messages"], 40)
        sc["pauses"] = [p for p in sc["pauses"] if p["port"] == "sw1-p4"]
        for p in sc["pauses"]:
            p["duration"] = 0.002
            p["start"] = 0.001
        g = generate(scenario_from_dict(sc), factory.mktemp("base"), truth=False)
        _BASE["b"] = g.captures[0].read_bytes()
    return _BASE["b"]


def test_scenario_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    scenario_cli.register(sub)
    args = parser.parse_args(["scenario", "--list"])
    assert args.func(args) == 0
    assert "demo" in capsys.readouterr().out
    args = parser.parse_args(["scenario", "--bench", "2000", str(tmp_path / "b")])
    assert args.func(args) == 0
    assert (tmp_path / "b" / "bench.pcap").stat().st_size > 0
    assert (tmp_path / "b" / "truth.json").exists()
    args = parser.parse_args(["scenario", "--preset", "nope", str(tmp_path / "c")])
    assert args.func(args) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x"}')
    args = parser.parse_args(["scenario", "--file", str(bad), str(tmp_path / "d")])
    assert args.func(args) == 3  # invalid input file
    assert "missing" in capsys.readouterr().err


def test_console_script_help() -> None:
    exe = shutil.which("netio-analyze", path=str(Path(__file__).parents[1] / ".venv" / "bin"))
    assert exe is not None
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True).stdout
    assert "Exit codes" in out and "storm" in out


def _unused(_: Any) -> None:
    return None


def test_json_is_streamed_one_flow_per_line(small: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "--json", *small)
    doc = json.loads(out)
    # The same document json.dumps would write, laid out one element per line.
    assert json.loads(json.dumps(analyze(small, AnalysisOptions()))) == doc
    lines = out.splitlines()
    at = lines.index(' "flows": [')
    flow_lines = lines[at + 1:at + 1 + len(doc["flows"])]
    assert lines[at + 1 + len(doc["flows"])] == " ],"
    assert len(doc["flows"]) > 0
    assert [json.loads(ln.rstrip(",")) for ln in flow_lines] == doc["flows"]


def test_top_limits_the_text_flows_per_capture(small: list[str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "--json", *small)
    flows = json.loads(out)["flows"]
    per_capture: dict[str, int] = {}
    for f in flows:
        per_capture[f["capture"]] = per_capture.get(f["capture"], 0) + 1
    assert max(per_capture.values()) >= 2
    _, text, _ = run(capsys, "--top", "1", *small)
    table = text.split("RoCE flows (")[1].split("\n\n")[0].splitlines()
    rows = [r for r in table[3:] if not r.startswith(" ")]  # the legend is indented
    assert "the first 1 of each capture shown (--top), all in --json" in table[0]
    assert sorted(r.split()[0] for r in rows) == sorted(per_capture)
    _, text, _ = run(capsys, "--top", "1000", *small)
    assert "(--top)" not in text
    with pytest.raises(SystemExit) as exc:
        main(["--top", "-1", *small])
    err = capsys.readouterr().err
    assert exc.value.code == EXIT_USAGE and "--top" in err and "not a count" in err


ERF_SAYS = ("link type 197 (ERF) is not supported; netio reads Ethernet, Linux cooked v1/v2 "
            "and raw IP")


def test_unsupported_link_type_is_said_once(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    erf = tmp_path / "erf.pcap"
    erf.write_bytes(pcap_file([(1, i, bytes(80), 80) for i in range(50)], linktype=197))
    for pure in ([], ["--pure"]):
        code, out, err = run(capsys, *pure, str(erf))
        assert code == EXIT_UNREADABLE and out == ""
        assert err.count(ERF_SAYS) == 1 and "malformed" not in err and "decoded" not in err
    code, out, err = run(capsys, "--json", str(erf))
    doc = json.loads(out)
    assert code == EXIT_UNREADABLE and ERF_SAYS in doc["error"]
    assert doc["captures"][0]["malformed_packets"] == 0 and not doc["captures"][0]["readable"]
    from netio.cli.main import main as netio_main
    assert netio_main(["decode", str(erf)]) == EXIT_UNREADABLE
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and ERF_SAYS in err


def test_a_second_interface_of_unsupported_type_is_one_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arp = b"\xff" * 6 + b"\x04" * 6 + b"\x08\x06" + bytes(46)  # not RoCE, not malformed
    ng = shb() + idb(1) + idb(197) + b"".join(epb(i % 2, i, arp) for i in range(40))
    p = tmp_path / "mixed.pcapng"
    p.write_bytes(ng)
    code, out, err = run(capsys, "--json", str(p))
    cap = json.loads(out)["captures"][0]
    assert code == EXIT_OK and cap["packets"] == 20 and cap["malformed_packets"] == 0
    assert err.count("20 records skipped: " + ERF_SAYS) == 1


@pytest.mark.parametrize("case", ["missing", "garbage", "usage"])
def test_json_always_writes_one_document(case: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.pcap"
    if case == "garbage":
        path.write_bytes(b"this is not a capture at all" * 10)
    if case == "usage":
        with pytest.raises(SystemExit) as exc:
            main(["--json", "--top", "many", str(path)])
        code = exc.value.code
        out, _ = capsys.readouterr()
    else:
        code, out, _ = run(capsys, "--json", str(path))
    doc = json.loads(out)  # exactly one document
    assert doc["tool"] == "netio-analyze" and doc["schema_version"] == SCHEMA_VERSION
    if case == "usage":
        assert code == EXIT_USAGE and "--top" in doc["error"]
    else:
        assert code == EXIT_UNREADABLE and "x.pcap" in doc["error"]
        assert set(TOP_LEVEL_KEYS) <= doc.keys()


def test_json_error_is_null_on_success(small: list[str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "--json", *small)
    assert json.loads(out)["error"] is None


def test_goodput_has_one_definition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A QP doing WRITEs and a READ: the JSON goodput and the text rate are the same
    number: every byte of data once (WRITE payloads and READ response payloads) over
    the time from the first to the last packet of either direction."""
    from netio.pcap import PcapWriter
    from netio.wire.bth import Bth, Opcode
    from netio.wire.ext import Aeth, Reth

    a, b = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
    fwd = {"src_mac": a, "dst_mac": b, "src_ip": "10.0.0.1", "dst_ip": "10.0.0.2",
           "src_port": 50000}
    rev = {"src_mac": b, "dst_mac": a, "src_ip": "10.0.0.2", "dst_ip": "10.0.0.1",
           "src_port": 50001}
    frames = [  # (ts ns, frame)
        (1_000, build(fwd, Bth(Opcode.RC_RDMA_WRITE_ONLY, dest_qp=0x22, psn=0, ack_req=True),
                      reth=Reth(0x1000, 1, 1000), payload=bytes(1000))),
        (2_000, build(rev, Bth(Opcode.RC_ACKNOWLEDGE, dest_qp=0x11, psn=0),
                      aeth=Aeth.ack(0))),
        (3_000, build(fwd, Bth(Opcode.RC_RDMA_WRITE_ONLY, dest_qp=0x22, psn=1, ack_req=True),
                      reth=Reth(0x1000, 1, 1000), payload=bytes(1000))),
        (4_000, build(fwd, Bth(Opcode.RC_RDMA_READ_REQUEST, dest_qp=0x22, psn=2),
                      reth=Reth(0x2000, 1, 2000))),
        (9_000, build(rev, Bth(Opcode.RC_RDMA_READ_RESPONSE_ONLY, dest_qp=0x11, psn=2),
                      aeth=Aeth.ack(1), payload=bytes(2000))),
    ]
    path = tmp_path / "mixed.pcap"
    w = PcapWriter(path)
    for ts, f in frames:
        w.write(ts, f)
    w.close()
    _, out, _ = run(capsys, "--json", str(path))
    (flow,) = json.loads(out)["flows"]
    data_bytes = 1000 + 1000 + 2000
    span_s = (9_000 - 1_000) / 1e9
    assert flow["goodput_bytes"] == data_bytes
    assert flow["goodput_bps"] == pytest.approx(data_bytes * 8 / span_s)
    _, text, _ = run(capsys, str(path))
    row = next(ln for ln in text.splitlines() if "10.0.0.1->10.0.0.2 qp 0x22" in ln
               and ln.startswith("mixed"))
    assert f"{data_bytes * 8 / span_s / 1e9:.3f}" in row.split()


def build(side: dict[str, Any], bth: Any, **kw: Any) -> bytes:
    from netio.wire.packet import build_roce_frame
    return build_roce_frame(bth=bth, **side, **kw)


def test_streamed_flow_documents_are_the_list(small: list[str]) -> None:
    import io

    from netio.analyze.engine import FlowDocuments
    from netio.analyze.report import to_text, write_json

    listed = analyze(small, AnalysisOptions())
    streamed = analyze(small, AnalysisOptions(), stream_flows=True)
    flows = streamed["flows"]
    assert isinstance(flows, FlowDocuments) and len(flows) == len(listed["flows"]) > 0
    assert list(flows) == list(flows) == listed["flows"]  # made afresh, equal, each time
    assert flows[1] == listed["flows"][1] and flows[:2] == listed["flows"][:2]
    a, b = io.StringIO(), io.StringIO()
    write_json(listed, a)
    write_json(streamed, b)
    assert a.getvalue() == b.getvalue()
    assert to_text(streamed) == to_text(listed)
