"""CRC-32 and RoCEv2 ICRC: native (PCLMULQDQ, slicing-by-8) == pure Python == zlib."""

from __future__ import annotations

import itertools
import os
import random
import zlib
from ipaddress import IPv4Address, IPv6Address

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netio import native
from netio.errors import DecodeError
from netio.wire import icrc
from netio.wire.bth import Bth, Opcode
from netio.wire.ip import Ecn
from netio.wire.packet import build_roce_ip_packet

needs_native = pytest.mark.skipif(
    os.environ.get("NETIO_PURE") == "1", reason="NETIO_PURE=1 forces the pure-Python path")


@pytest.fixture(scope="module")
def lib() -> object:
    if not native.AVAILABLE:
        pytest.fail("netio._native is not built (run tools/rebuild)")
    return native.lib


@needs_native
def test_native_reports_its_implementation(lib: object) -> None:
    impl = icrc.implementation()
    assert impl in ("pclmul", "slice8")
    assert (impl == "pclmul") == bool(native.lib.netio_crc32_pclmul_supported())


@needs_native
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=10000), skew=st.integers(0, 15), seed=st.integers(0, 2**32 - 1))
def test_crc32_native_equals_reference_and_zlib(lib: object, data: bytes, skew: int,
                                                seed: int) -> None:
    # Misalign the start: slice a view out of a larger buffer.
    view = memoryview(bytes(skew) + data)[skew:]
    expected = zlib.crc32(data, seed)
    assert icrc.crc32(view, seed) == expected
    assert icrc.crc32(data, seed) == expected
    assert native.lib.netio_crc32_slice8(seed, data, len(data)) == expected
    assert native.lib.netio_crc32_pclmul(seed, data, len(data)) == expected
    if len(data) <= 2048:  # the byte-at-a-time reference is slow; bound the suite's time
        assert icrc.crc32_reference(view, seed) == expected


@needs_native
def test_crc32_boundary_lengths_and_alignments(lib: object) -> None:
    """Every fold boundary of the PCLMULQDQ path (16/64-byte blocks, tails) at every alignment."""
    rng = random.Random(4791)
    block = rng.randbytes(10000 + 16)
    lengths = [*range(0, 200), 255, 256, 257, 1023, 1024, 1025, 4095, 4096, 4097, 9999, 10000]
    for skew in range(16):
        for n in lengths:
            data = memoryview(block)[skew:skew + n]
            expected = zlib.crc32(data, 0x5A5A5A5A)
            assert native.lib.netio_crc32_pclmul(0x5A5A5A5A, bytes(data), n) == expected
            assert native.lib.netio_crc32_slice8(0x5A5A5A5A, bytes(data), n) == expected
            assert icrc.crc32(data, 0x5A5A5A5A) == expected
    for n in (0, 1, 63, 64, 65, 1000, 10000):
        assert icrc.crc32_reference(block[:n]) == zlib.crc32(block[:n])


@needs_native
@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=4000), cuts=st.lists(st.integers(0, 4000), max_size=4))
def test_crc32_chains(lib: object, data: bytes, cuts: list[int]) -> None:
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    native_crc = reference_crc = 0
    for lo, hi in itertools.pairwise(bounds):
        native_crc = icrc.crc32(data[lo:hi], native_crc)
        reference_crc = icrc.crc32_reference(data[lo:hi], reference_crc)
    assert native_crc == reference_crc == zlib.crc32(data)


def test_crc32_reference_known_value() -> None:
    assert icrc.crc32_reference(b"123456789") == 0xCBF43926  # the CRC-32 check value
    assert icrc.crc32_reference(b"") == 0


def test_pure_fallback_when_native_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    packet = _packet(payload=b"fallback", ipv6=False)
    expected = icrc.compute_icrc_reference(packet[:-4])
    monkeypatch.setattr(icrc, "_lib", None)
    assert icrc.implementation() == "zlib"
    assert icrc.crc32(b"abc") == zlib.crc32(b"abc")
    assert icrc.compute_icrc(packet[:-4]) == expected
    assert icrc.verify_icrc(packet)


def _packet(*, payload: bytes, ipv6: bool, dscp: int = 0, ecn: Ecn = Ecn.NOT_ECT,
            ttl: int = 64, opcode: Opcode = Opcode.RC_SEND_ONLY, psn: int = 1) -> bytes:
    src: IPv4Address | IPv6Address = IPv6Address("fd00::a") if ipv6 else IPv4Address("10.1.0.1")
    dst: IPv4Address | IPv6Address = IPv6Address("fd00::b") if ipv6 else IPv4Address("10.1.0.2")
    return build_roce_ip_packet(src_ip=src, dst_ip=dst, src_port=50000,
                                bth=Bth(opcode, dest_qp=0x12, psn=psn), payload=payload,
                                dscp=dscp, ecn=ecn, ttl=ttl, flow_label=0x12345 if ipv6 else 0)


def _readme_icrc(packet: bytes) -> int:
    """The ICRC exactly as the rxe lab README states it, with zlib (independent of netio)."""
    body = bytearray(packet[:-4])
    if body[0] >> 4 == 4:
        body[1] = body[8] = 0xFF
        body[10:12] = b"\xff\xff"
        ip_bytes = 20
    else:
        body[0] |= 0x0F
        body[1:4] = b"\xff\xff\xff"
        body[7] = 0xFF
        ip_bytes = 40
    body[ip_bytes + 6:ip_bytes + 8] = b"\xff\xff"
    body[ip_bytes + 12] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(body))


def _masked_offsets(packet: bytes) -> set[int]:
    if packet[0] >> 4 == 4:
        return {1, 8, 10, 11, 26, 27, 32}
    return {0, 1, 2, 3, 7, 46, 47, 52}


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(max_size=600), ipv6=st.booleans(), data=st.data())
def test_any_covered_byte_corruption_fails_verification(payload: bytes, ipv6: bool,
                                                        data: st.DataObject) -> None:
    packet = _packet(payload=payload, ipv6=ipv6)
    assert icrc.verify_icrc(packet) and icrc.verify_icrc_reference(packet)
    assert icrc.stored_icrc(packet) == _readme_icrc(packet)
    masked = _masked_offsets(packet)
    position = data.draw(st.integers(0, len(packet) - 1).filter(lambda i: i not in masked))
    delta = data.draw(st.integers(1, 255))
    corrupt = bytearray(packet)
    corrupt[position] ^= delta
    try:
        native_ok = icrc.verify_icrc(corrupt)
        reference_ok = icrc.verify_icrc_reference(corrupt)
    except DecodeError:  # e.g. the IP version nibble no longer says 4 or 6
        return
    assert not native_ok and not reference_ok


@settings(max_examples=60, deadline=None)
@given(ipv6=st.booleans(), dscp=st.integers(0, 63), ecn=st.sampled_from(list(Ecn)),
       ttl=st.integers(0, 255), data=st.data())
def test_masked_fields_do_not_change_the_icrc(ipv6: bool, dscp: int, ecn: Ecn, ttl: int,
                                              data: st.DataObject) -> None:
    base = _packet(payload=b"masked fields", ipv6=ipv6)
    varied = _packet(payload=b"masked fields", ipv6=ipv6, dscp=dscp, ecn=ecn, ttl=ttl)
    assert icrc.stored_icrc(base) == icrc.stored_icrc(varied)
    # Any value in any masked byte (checksums, flow label, BTH resv8a/FECN/BECN) keeps it valid.
    # (For IPv6 byte 0 only the traffic-class nibble is masked; the version nibble is not.)
    corrupt = bytearray(base)
    for offset in _masked_offsets(base):
        value = data.draw(st.integers(0, 255))
        corrupt[offset] = (0x60 | (value & 0x0F)) if (ipv6 and offset == 0) else value
    assert icrc.verify_icrc(corrupt) and icrc.verify_icrc_reference(corrupt)


def test_short_or_non_ip_packets_raise() -> None:
    with pytest.raises(DecodeError) as err:
        icrc.compute_icrc(b"\x45" + bytes(30))
    assert err.value.header == "ICRC"
    with pytest.raises(DecodeError):
        icrc.compute_icrc(b"\x55" + bytes(60))  # IP version 5
    with pytest.raises(DecodeError):
        icrc.compute_icrc(b"\x44" + bytes(60))  # IHL 4
    with pytest.raises(DecodeError):
        icrc.compute_icrc(b"")
    with pytest.raises(DecodeError):
        icrc.stored_icrc(b"abc")
