"""WindowScanner (read() window) yields exactly CaptureScanner's (mmap) records and damage.

Same packets, frames, timestamps, interfaces and the same damage message
(file, record index, byte offset), for classic pcap and pcapng in both byte
orders, at every truncation, under random corruption, with windows small
enough to force refills and growth at every record.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pcap_builders import SAMPLES, Outcome, block, epb, idb, shb

from netio import native
from netio.errors import CaptureError, CaptureWarning
from netio.pcap.scan import CaptureScanner, ScanColumns, WindowScanner
from netio.scenario import generate, scenario_from_dict
from netio.scenario.presets import small_dict

REF = Path(__file__).parents[1] / ".." / "shared" / "rxe-lab" / "ref-rxe-rc.pcap"


def read_mapped(path: Path) -> Outcome:
    try:
        scanner = CaptureScanner(str(path), native_scan=True)
    except CaptureError as error:
        return Outcome((), None, str(error))
    packets = []
    with warnings.catch_warnings(), scanner:
        warnings.simplefilter("ignore", CaptureWarning)
        for out in scanner.chunks(1000):
            for i in range(len(out)):
                start = int(out.frame_offset[i])
                packets.append((int(out.ts_ns[i]),
                                bytes(scanner.buffer[start:start + int(out.caplen[i])]),
                                int(out.orig_len[i]), int(out.linktype[i]),
                                int(out.interface_id[i])))
        return Outcome(tuple(packets), None if scanner.damage is None else str(scanner.damage),
                       None)


def read_windowed(path: Path, window: int, batches: Sequence[int]) -> Outcome:
    try:
        scanner = WindowScanner(path, window_bytes=window)
    except CaptureError as error:
        return Outcome((), None, str(error))
    packets = []
    turn = 0
    with scanner:
        while True:
            out = ScanColumns.empty(batches[turn % len(batches)])
            turn += 1
            n = scanner.next_batch(out)
            if n == 0:
                break
            for i in range(n):
                start = int(out.frame_offset[i])
                packets.append((int(out.ts_ns[i]),
                                scanner.buffer[start:start + int(out.caplen[i])].tobytes(),
                                int(out.orig_len[i]), int(out.linktype[i]),
                                int(out.interface_id[i])))
        assert scanner.done
        assert [str(w) for w in scanner.warnings] == (
            [] if scanner.damage is None else [str(scanner.damage)])
        return Outcome(tuple(packets), None if scanner.damage is None else str(scanner.damage),
                       None)


def agree(path: Path, windows: Sequence[int] = (64, 100, 1 << 16),
          batches: Sequence[int] = (1, 3, 1000)) -> Outcome:
    if not native.AVAILABLE:
        pytest.fail("netio._native is not built (run tools/rebuild)")
    want = read_mapped(path)
    for w in windows:
        assert read_windowed(path, w, batches) == want, (path.name, w)
    return want


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_samples_and_every_truncation(name: str, tmp_path: Path) -> None:
    data = SAMPLES[name]
    path = tmp_path / "c.pcap"
    path.write_bytes(data)
    whole = agree(path)
    assert whole.damage is None and whole.packets
    for cut in range(len(data)):
        path.write_bytes(data[:cut])
        agree(path, windows=(64, 4096), batches=(2, 1000))


def test_open_errors_agree(tmp_path: Path) -> None:
    cases = {"missing": None, "empty": b"", "garbage": b"not a capture at all" * 3,
             "short": SAMPLES["pcap-us-le"][:10]}
    for name, data in cases.items():
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        got = agree(path)
        assert got.open_error is not None and name in got.open_error
    assert agree(tmp_path).open_error is not None  # a directory


def test_large_blocks_grow_the_window(tmp_path: Path) -> None:
    big = bytes(range(256)) * 300  # a 76800-byte frame, a 100000-byte custom block
    data = shb() + idb(1) + block(0x0BAD, bytes(100_000)) + epb(0, 5, big) + epb(0, 6, b"x" * 60)
    path = tmp_path / "big.pcapng"
    path.write_bytes(data)
    got = agree(path, windows=(64, 4096))
    assert [len(p[1]) for p in got.packets] == [len(big), 60]


def test_real_and_generated_captures(tmp_path: Path) -> None:
    agree(REF, windows=(1000, 1 << 20), batches=(7, 8192))
    for path in generate(scenario_from_dict(small_dict()), tmp_path, truth=False).captures:
        got = agree(path, windows=(3000, 1 << 21), batches=(8192, 333))
        assert len(got.packets) > 1000


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(SAMPLES)),
       st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), min_size=1, max_size=6))
def test_corrupted_captures_agree(tmp_path_factory: pytest.TempPathFactory, name: str,
                                  flips: list[tuple[int, int]]) -> None:
    data = bytearray(SAMPLES[name])
    for pos, val in flips:
        if pos < len(data):
            data[pos] = val
    path = tmp_path_factory.mktemp("fz") / "f.pcap"
    path.write_bytes(bytes(data))
    agree(path, windows=(64, 4096), batches=(1, 1000))
