"""``netio decode``: every line of the kernel-rxe reference capture matches the lab's listing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from netio.cli.main import main
from netio.pcap import PcapWriter
from netio.wire import build_pfc_frame, parse_mac

LAB = Path(__file__).resolve().parents[1].parent / "shared" / "rxe-lab"
REF_PCAP = LAB / "ref-rxe-rc.pcap"
REF_TXT = LAB / "ref-rxe-rc.txt"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["decode", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_reference_frame_matches_the_listing(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, str(REF_PCAP))
    assert code == 0, err
    expected = [" ".join(line.split()) for line in REF_TXT.read_text().splitlines()
                if re.match(r"^ +\d+ \d", line)]
    got = []
    for line in out.splitlines():
        if re.match(r"^ +\d+ +\d+\.\d{6} ", line):
            number, _time, rest = line.split(maxsplit=2)
            got.append(f"{number} {' '.join(rest.split())}")
    assert len(expected) == 200
    assert got == expected
    assert "200 frames, 0 bad ICRC, 0 undecodable" in out


def test_summary_counts_match_the_listing(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--summary", str(REF_PCAP))
    assert code == 0
    counts = dict(re.findall(r"^  (\S+) +(\d+)$", out, re.M))
    listing = dict(re.findall(r"^  ([A-Z_]+) +(\d+)$", REF_TXT.read_text(), re.M))
    assert counts == listing


def test_pfc_frames_and_corrupt_icrc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pfc.pcap"
    ref = list(_ref_frames())
    broken = bytearray(ref[0])
    broken[-10] ^= 0x01  # payload byte: covered by the ICRC
    with PcapWriter(path) as writer:
        writer.write(1_000, build_pfc_frame(parse_mac("02:00:00:00:00:01"), 0x08,
                                            (0, 0, 0, 0xFFFF, 0, 0, 0, 0)))
        writer.write(2_000, bytes(broken))
    code, out, _ = _run(capsys, str(path))
    assert code == 0
    assert "02:00:00:00:00:01 PFC cev=0x08 p3=65535" in out
    assert "ICRC-BAD" in out
    assert "2 frames, 1 bad ICRC" in out


def _ref_frames() -> list[bytes]:
    from netio.pcap import open_capture

    with open_capture(REF_PCAP) as reader:
        return [bytes(r.frame) for r in reader]


def test_truncated_capture_warns_and_exits_1(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    data = REF_PCAP.read_bytes()
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[: len(data) - 20])
    code, out, err = _run(capsys, str(path))
    assert code == 1
    assert "199 frames" in out
    assert err.count("\n") == 1 and "record 199" in err and "byte offset" in err


def test_not_a_capture_is_one_line_and_exit_3(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "junk.pcap"
    path.write_bytes(b"this is not a capture file at all")
    code, out, err = _run(capsys, str(path))
    assert code == 3  # the table's "no input could be used", as netio-analyze says it
    assert out == ""
    assert err.startswith("netio decode: ") and err.count("\n") == 1 and str(path) in err


def test_missing_file_is_one_line_and_exit_3(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "netio.cli.main", "decode",
                           str(tmp_path / "nope.pcap")], capture_output=True, text=True)
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert "nope.pcap" in proc.stderr and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("count", ["0", "-5", "many"])
def test_count_must_be_a_positive_number(count: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ei:
        main(["decode", "-c", count, str(REF_PCAP)])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert "argument -c/--count" in err and "Traceback" not in err


def test_output_closed_early_is_quiet(tmp_path: Path) -> None:
    """``netio decode CAPTURE | head -1``: no "Broken pipe" blamed on the capture."""
    proc = subprocess.Popen([sys.executable, "-m", "netio.cli.main", "decode", str(REF_PCAP)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(30) == 141
    assert first.startswith(b"     1 ") and err == ""


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    import os
    import signal
    import threading
    import time

    fifo = tmp_path / "live.pcap"
    os.mkfifo(fifo)
    release = threading.Event()
    opened = threading.Event()

    def feed() -> None:  # a capture that is still being written
        with open(fifo, "wb") as f:  # returns once netio decode has opened it
            opened.set()
            f.write(REF_PCAP.read_bytes()[:2000])
            f.flush()
            release.wait(30)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "netio.cli.main", "decode", str(fifo)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert opened.wait(60)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        release.set()
        writer.join(30)
    assert proc.returncode == 130
    assert err == "netio decode: interrupted\n"


def test_snaplen_cut_payload_is_marked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from netio.wire.bth import Bth, Opcode
    from netio.wire.packet import build_roce_frame

    frame = build_roce_frame(
        src_mac=parse_mac("02:00:00:00:00:01"), dst_mac=parse_mac("02:00:00:00:00:02"),
        src_ip="10.0.0.1", dst_ip="10.0.0.2", src_port=50000,
        bth=Bth(Opcode.RC_SEND_ONLY, dest_qp=0x22, psn=5), payload=bytes(1024))
    path = tmp_path / "cut.pcap"
    with PcapWriter(path, snaplen=128) as writer:
        writer.write(1_000, frame)  # cut to 128 bytes, 1090 on the wire
        writer.write(2_000, frame[:-4] + b"\0\0\0\0")  # cut too: same marking
    whole = tmp_path / "whole.pcap"
    with PcapWriter(whole) as writer:
        writer.write(1_000, frame)
    code, out, _ = _run(capsys, str(path))
    # 14 Ethernet + 20 IPv4 + 8 UDP + 12 BTH = 54 header bytes: 128 - 54 = 74 kept of 1024.
    assert code == 0 and out.count("payload=74/1024") == 2 and "ICRC-BAD" not in out
    code, out, _ = _run(capsys, str(whole))
    assert code == 0 and "payload=1024\n" in out and "/1024" not in out
