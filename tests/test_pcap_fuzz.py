"""Fuzz the capture readers: damaged input gives netio's own errors, never a crash or hang.

Each case runs the streaming reader, the native scanner and the pure-Python
reference scanner (in one and in small chunks); all must report the same
packets and the same damage, and nothing but CaptureError may escape.
"""

from __future__ import annotations

import io
import random
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pcap_builders import SAMPLES, Outcome, read_scanner, read_streaming

from netio.errors import CaptureError, CaptureWarning
from netio.pcap import CaptureScanner, open_capture

REF = Path(__file__).resolve().parents[1] / ".." / "shared" / "rxe-lab" / "ref-rxe-rc.pcap"

CASES_PER_SAMPLE = 1500
_INTERESTING_U32 = (0, 1, 4, 8, 12, 13, 16, 28, 32, 0x7FFFFFFF, 0xFFFFFFFF, 262_144, 262_145,
                    16 * 1024 * 1024, 16 * 1024 * 1024 + 4, 0x0A0D0D0A, 0x1A2B3C4D, 0x4D3C2B1A)


def _base_captures() -> dict[str, bytes]:
    ref = REF.read_bytes()
    # the reference capture's header and first 6 packets keeps each case cheap
    with open_capture(REF) as reader:
        records = [next(reader) for _ in range(7)]
    return {**SAMPLES, "ref-head": ref[:records[6].byte_offset]}


def _mutate(rng: random.Random, data: bytes) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:  # truncate
        return data[:rng.randrange(len(data) + 1)]
    buf = bytearray(data)
    if kind == 1:  # overwrite a few random bytes
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
    elif kind == 2:  # an interesting 32-bit value at an aligned offset, either byte order
        at = rng.randrange(0, len(buf) - 3, 4)
        buf[at:at + 4] = rng.choice(_INTERESTING_U32).to_bytes(4, rng.choice(("little", "big")))
    elif kind == 3:  # delete a slice
        at = rng.randrange(len(buf))
        del buf[at:at + rng.randint(1, 64)]
    else:  # insert random bytes
        at = rng.randrange(len(buf))
        buf[at:at] = rng.randbytes(rng.randint(1, 64))
    if rng.random() < 0.3:
        buf = buf[:rng.randrange(len(buf) + 1)]
    return bytes(buf)


def _check(data: bytes) -> Outcome:
    streaming = read_streaming(data)
    assert read_scanner(data, native_scan=True) == streaming
    assert read_scanner(data, native_scan=True, chunk_sizes=(1, 3)) == streaming
    assert read_scanner(data, native_scan=False, chunk_sizes=(2, 5)) == streaming
    return streaming


def _check_strict(data: bytes, lenient: Outcome) -> None:
    try:
        reader = open_capture(io.BytesIO(data), strict=True)
        count = sum(1 for _ in reader)
    except CaptureError as error:
        assert str(error) in (lenient.damage, lenient.open_error)
    else:
        assert lenient.damage is None and count == len(lenient.packets)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["pcap-us-le", "pcap-ns-be", "pcapng-le", "pcapng-be",
                                  "ref-head"])
def test_mutations(name: str) -> None:
    data = _base_captures()[name]
    rng = random.Random(f"netio-pcap-fuzz-{name}")
    damaged = 0
    for case in range(CASES_PER_SAMPLE):
        mutated = _mutate(rng, data)
        outcome = _check(mutated)
        damaged += outcome.damage is not None or outcome.open_error is not None
        if case % 7 == 0:
            _check_strict(mutated, outcome)
    assert damaged > CASES_PER_SAMPLE // 3  # the mutations really do damage


@pytest.mark.timeout(60)
@settings(max_examples=300, deadline=None)
@given(head=st.sampled_from([bytes.fromhex(h) for h in (
    "d4c3b2a1", "a1b2c3d4", "4d3cb2a1", "a1b23c4d", "0a0d0d0a")]),
    rest=st.binary(max_size=400))
def test_arbitrary_bytes_after_a_magic(head: bytes, rest: bytes) -> None:
    _check(head + rest)


@pytest.mark.timeout(60)
def test_zero_and_tiny_blocks_do_not_hang() -> None:
    shb = SAMPLES["pcapng-le"][:28]
    for total in range(0, 16):
        data = shb + (6).to_bytes(4, "little") + total.to_bytes(4, "little") + bytes(64)
        outcome = _check(data)
        assert outcome.damage is not None and outcome.packets == ()
    with CaptureScanner(shb + bytes(12)) as scanner, warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)
        assert list(scanner.chunks(1)) == []
        assert scanner.done and scanner.damage is not None
