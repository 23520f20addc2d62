"""Fuzz decode_frame: random and mutated frames raise DecodeError and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netio.errors import DecodeError
from netio.pcap import open_capture
from netio.wire.link import LinkType
from netio.wire.packet import Frame, decode_frame

PCAP = Path(__file__).parents[1] / ".." / "shared" / "rxe-lab" / "ref-rxe-rc.pcap"
LINKTYPES = [int(t) for t in LinkType]


@pytest.fixture(scope="module")
def ref_frames() -> list[bytes]:
    with open_capture(PCAP) as reader:
        return [record.frame for record in reader]


def _decode_or_reject(data: bytes, linktype: int, allow_truncated: bool) -> Frame | None:
    try:
        frame = decode_frame(data, linktype, allow_truncated=allow_truncated)
        frame.icrc_ok()  # must not raise either
        return frame
    except DecodeError as err:
        assert err.header and err.reason and 0 <= err.offset <= len(data)
        return None


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=160), linktype=st.sampled_from(LINKTYPES),
       allow_truncated=st.booleans())
def test_random_bytes(data: bytes, linktype: int, allow_truncated: bool) -> None:
    _decode_or_reject(data, linktype, allow_truncated)


# Random bytes behind well-formed outer headers reach the inner decoders.
_PREFIXES = [
    bytes.fromhex("52540077000a52540077000b0800"),  # Ethernet, IPv4
    bytes.fromhex("52540077000a52540077000b86dd"),  # Ethernet, IPv6
    bytes.fromhex("52540077000a52540077000b8808"),  # Ethernet, MAC Control
    bytes.fromhex("52540077000a52540077000b8100a0010800"),  # VLAN, IPv4
    bytes.fromhex("450000640000400040110000" "0a4d000b0a4d000a" "c12112b700500000"),  # IPv4+UDP
]


@settings(max_examples=300, deadline=None)
@given(prefix=st.sampled_from(_PREFIXES), data=st.binary(max_size=120),
       allow_truncated=st.booleans())
def test_random_bytes_behind_valid_headers(prefix: bytes, data: bytes,
                                           allow_truncated: bool) -> None:
    linktype = LinkType.RAW if prefix[0] == 0x45 else LinkType.ETHERNET
    _decode_or_reject(prefix + data, linktype, allow_truncated)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, 199), data=st.data(), allow_truncated=st.booleans())
def test_mutated_reference_frames(ref_frames: list[bytes], index: int, data: st.DataObject,
                                  allow_truncated: bool) -> None:
    frame = bytearray(ref_frames[index])
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["set", "header", "cut", "insert", "delete"]))
        if not frame:
            break
        if action == "set":
            frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
        elif action == "header":  # hit the headers (first 110 bytes) more often
            frame[data.draw(st.integers(0, min(len(frame), 110) - 1))] = data.draw(
                st.integers(0, 255))
        elif action == "cut":
            del frame[data.draw(st.integers(0, len(frame) - 1)):]
        elif action == "insert":
            frame.insert(data.draw(st.integers(0, len(frame))), data.draw(st.integers(0, 255)))
        else:
            del frame[data.draw(st.integers(0, len(frame) - 1))]
    _decode_or_reject(bytes(frame), LinkType.ETHERNET, allow_truncated)
