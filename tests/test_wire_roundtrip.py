"""Every netio.wire header round-trips encode -> decode; bad fields and short input raise."""

from __future__ import annotations

from dataclasses import replace
from ipaddress import IPv4Address, IPv6Address
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netio.errors import DecodeError, EncodeError
from netio.wire.bth import OPCODE_TABLE, Bth, Opcode, Position, Transport, opcode_info
from netio.wire.cnp import Cnp
from netio.wire.ethernet import Ethernet, Vlan, format_mac, parse_mac
from netio.wire.ext import (
    AckType,
    Aeth,
    AtomicAckEth,
    AtomicEth,
    Deth,
    Feth,
    Ieth,
    ImmDt,
    NakCode,
    Reth,
    rnr_timer_code,
    rnr_timer_ns,
    rnr_timer_s,
)
from netio.wire.ip import Ecn, Ipv4, Ipv6
from netio.wire.link import Sll, Sll2
from netio.wire.mad import CmMessage, Mad, MgmtClass
from netio.wire.pfc import PauseFrame, PfcFrame, quanta_to_ns, quanta_to_s, s_to_quanta
from netio.wire.udp import Udp


def uint(bits: int) -> st.SearchStrategy[int]:
    return st.integers(0, (1 << bits) - 1)


macs = st.binary(min_size=6, max_size=6)
v4 = st.builds(IPv4Address, uint(32))
v6 = st.builds(IPv6Address, uint(128))

HEADERS: dict[str, st.SearchStrategy[Any]] = {
    "Ethernet": st.builds(Ethernet, macs, macs, uint(16)),
    "Vlan": st.builds(Vlan, uint(3), st.booleans(), uint(12), uint(16)),
    "Ipv4": st.builds(Ipv4, v4, v4, uint(8), uint(6), st.sampled_from(list(Ecn)),
                      st.integers(60, 0xFFFF), uint(16), st.booleans(), uint(8), uint(16),
                      st.booleans(), uint(13),
                      st.integers(0, 10).map(lambda n: bytes(range(4 * n)))),
    "Ipv6": st.builds(Ipv6, v6, v6, uint(8), uint(6), st.sampled_from(list(Ecn)), uint(20),
                      uint(16), uint(8)),
    "Udp": st.builds(Udp, uint(16), uint(16), st.integers(8, 0xFFFF), uint(16)),
    "Bth": st.builds(Bth, st.sampled_from(list(Opcode)), st.booleans(), st.booleans(),
                     uint(2), uint(4), uint(16), st.booleans(), st.booleans(), uint(24),
                     st.booleans(), uint(24)),
    "Reth": st.builds(Reth, uint(64), uint(32), uint(32)),
    "Aeth": st.builds(Aeth, uint(7), uint(24)),
    "AtomicEth": st.builds(AtomicEth, uint(64), uint(32), uint(64), uint(64)),
    "AtomicAckEth": st.builds(AtomicAckEth, uint(64)),
    "ImmDt": st.builds(ImmDt, uint(32)),
    "Ieth": st.builds(Ieth, uint(32)),
    "Deth": st.builds(Deth, uint(32), uint(24)),
    "Feth": st.builds(Feth, uint(2), uint(4)),
    "Cnp": st.builds(Cnp, st.binary(min_size=16, max_size=16)),
    "Mad": st.builds(Mad, uint(8), uint(8), uint(8), uint(8), uint(16), uint(64), uint(16),
                     uint(32), uint(16)),
    "PauseFrame": st.builds(PauseFrame, uint(16)),
    "PfcFrame": st.builds(PfcFrame, uint(8), st.tuples(*[uint(16)] * 8)),
    "Sll": st.builds(Sll, uint(16), uint(16), uint(16), st.binary(min_size=8, max_size=8),
                     uint(16)),
    "Sll2": st.builds(Sll2, uint(16), uint(32), uint(16), uint(8), uint(8),
                      st.binary(min_size=8, max_size=8)),
}


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_header_round_trips(name: str) -> None:
    @settings(max_examples=80, deadline=None)
    @given(header=HEADERS[name], prefix=st.binary(max_size=8))
    def check(header: Any, prefix: bytes) -> None:
        wire = header.encode()
        size = getattr(type(header), "SIZE_BYTES", None)
        if size is not None and name not in ("Ipv4", "PauseFrame", "PfcFrame"):
            assert len(wire) == size
        # decode at an offset inside a larger buffer, from bytes and from a memoryview
        buf = prefix + wire + b"\xee" * 3
        assert type(header).decode(buf, len(prefix)) == header
        assert type(header).decode(memoryview(buf), len(prefix)) == header
        # one byte short of the header raises DecodeError naming the header and offset
        fixed = size if name not in ("Ipv4", "PauseFrame", "PfcFrame") else (
            20 + len(header.options) if name == "Ipv4" else size)
        with pytest.raises(DecodeError) as err:
            type(header).decode(prefix + wire[:fixed - 1], len(prefix))
        assert err.value.offset == len(prefix)

    check()


def test_ipv4_checksum_is_computed_and_checked() -> None:
    header = Ipv4(IPv4Address("10.0.0.1"), IPv4Address("10.0.0.2"), 17, total_length=48)
    decoded = Ipv4.decode(header.encode())
    assert decoded.checksum == header.compute_checksum() and decoded.checksum_ok()
    assert decoded.checksum is not None
    assert not replace(decoded, checksum=decoded.checksum ^ 1).checksum_ok()


@pytest.mark.parametrize(("factory", "field"), [
    (lambda: Bth(Opcode.RC_SEND_ONLY, psn=1 << 24), "psn"),
    (lambda: Bth(Opcode.RC_SEND_ONLY, dest_qp=-1), "dest_qp"),
    (lambda: Bth(Opcode.RC_SEND_ONLY, pad_count=4), "pad_count"),
    (lambda: Bth(0x40), "opcode"),  # type: ignore[arg-type]  # RD is not supported
    (lambda: Reth(1 << 64, 0, 0), "virtual_address"),
    (lambda: Aeth(0x80, 0), "syndrome"),
    (lambda: Aeth(0, 1 << 24), "msn"),
    (lambda: Deth(0, 1 << 24), "src_qp"),
    (lambda: Vlan(pcp=8), "pcp"),
    (lambda: Vlan(vid=4096), "vid"),
    (lambda: Udp(70000), "src_port"),
    (lambda: Ipv4(IPv4Address("1.1.1.1"), IPv4Address("1.1.1.2"), 17, dscp=64), "dscp"),
    (lambda: Ipv6(IPv6Address("::1"), IPv6Address("::2"), 17, flow_label=1 << 20), "flow_label"),
    (lambda: Ethernet(b"\x00" * 5, b"\x00" * 6, 0x800), "dst_mac"),
    (lambda: PfcFrame(0x100, (0,) * 8), "class_enable_vector"),
    (lambda: PfcFrame(1, (0,) * 7), "quanta"),
    (lambda: PauseFrame(1 << 16), "quanta"),
    (lambda: Mad(transaction_id=1 << 64), "transaction_id"),
    (lambda: Aeth.rnr_nak(0, 32), "RNR timer"),
    (lambda: ImmDt(-1), "immediate_data"),
])
def test_out_of_range_fields_raise_encode_error(factory: Any, field: str) -> None:
    with pytest.raises(EncodeError) as err:
        factory()
    assert field in str(err.value)


def test_aeth_syndromes() -> None:
    ack = Aeth.ack(7)
    assert (ack.ack_type, ack.credit_count, ack.rnr_timer_code, ack.nak_code) == (
        AckType.ACK, 31, None, None)
    rnr = Aeth.rnr_nak(9, 12)
    assert (rnr.ack_type, rnr.rnr_timer_code, rnr.credit_count, rnr.syndrome) == (
        AckType.RNR_NAK, 12, None, 0x2C)
    nak = Aeth.nak(3, NakCode.REMOTE_ACCESS_ERROR)
    assert (nak.ack_type, nak.nak_code, nak.msn, nak.syndrome) == (
        AckType.NAK, NakCode.REMOTE_ACCESS_ERROR, 3, 0x62)
    assert Aeth(0x40, 0).ack_type is AckType.RESERVED
    with pytest.raises(DecodeError):
        Aeth.decode(b"\x80\x00\x00\x00")


def test_rnr_timer_table() -> None:
    # IBTA Table 45 spot checks (the table is in milliseconds).
    assert rnr_timer_ns(0) == 655_360_000
    assert rnr_timer_ns(1) == 10_000
    assert rnr_timer_ns(12) == 640_000
    assert rnr_timer_ns(31) == 491_520_000
    assert rnr_timer_s(14) == pytest.approx(1.28e-3)
    assert rnr_timer_code(0.00064) == 12 and rnr_timer_code(0.0006) == 12
    assert rnr_timer_code(0.6) == 0 and rnr_timer_code(0) == 1


def test_opcode_table() -> None:
    rc_send_first = opcode_info(Opcode.RC_SEND_FIRST)
    assert rc_send_first.is_first and rc_send_first.has_payload and not rc_send_first.headers
    write_imm = opcode_info(Opcode.UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE)
    assert write_imm.transport is Transport.UC and write_imm.has_immediate
    assert write_imm.header_bytes == 20 and write_imm.position is Position.ONLY
    assert opcode_info(Opcode.RC_ATOMIC_ACKNOWLEDGE).header_bytes == 12
    assert opcode_info(Opcode.RC_SEND_LAST_WITH_INVALIDATE).has_invalidate
    assert opcode_info(Opcode.UD_SEND_ONLY_WITH_IMMEDIATE).header_bytes == 12
    assert not opcode_info(Opcode.RC_RDMA_READ_REQUEST).has_payload
    assert opcode_info(Opcode.RC_RDMA_READ_RESPONSE_MIDDLE).is_response
    assert opcode_info(Opcode.CNP).transport is Transport.CNP
    # RC and UC share the low five bits of the opcodes UC supports.
    for op in Opcode:
        info = opcode_info(op)
        assert info.opcode is op and (op >> 5) == info.transport
    assert sum(info is not None for info in OPCODE_TABLE) == len(Opcode)
    with pytest.raises(EncodeError):
        opcode_info(0x40)
    with pytest.raises(DecodeError) as err:
        Bth.decode(bytes([0x40]) + bytes(11), 0)
    assert err.value.header == "BTH" and "0x40" in err.value.reason


def test_mad_names_cm_messages() -> None:
    assert Mad(attribute_id=0x10).cm_message is CmMessage.REQ
    assert Mad(attribute_id=0x16).cm_message is CmMessage.DREP
    assert Mad(mgmt_class=MgmtClass.PERF_MGMT, attribute_id=0x10).cm_message is None
    assert Mad(method=0x81).is_response


def test_pfc_helpers() -> None:
    frame = PfcFrame(0b1000_0101, (100, 0, 0, 0, 0, 0, 0, 65535))
    assert frame.paused_priorities == (0, 7) and frame.resumed_priorities == (2,)
    assert frame.pause_s(1, 100e9) == 0.0
    # 1 quantum = 512 bit times: 65535 quanta at 100 Gb/s = 335.5392 us
    assert quanta_to_s(65535, 100e9) == pytest.approx(335.5392e-6)
    assert quanta_to_ns(65535, 100_000_000_000) == 335_539
    assert quanta_to_ns(1, 25_000_000_000) == 20  # 20.48 ns rounds to 20
    assert s_to_quanta(335.5392e-6, 100e9) == 65535
    assert s_to_quanta(1.0, 100e9) == 65535
    assert len(frame.encode()) == 46
    with pytest.raises(ValueError):
        quanta_to_s(1, 0)


def test_mac_text() -> None:
    assert parse_mac("52:54:00:77:00:0a") == bytes.fromhex("52540077000a")
    assert format_mac(bytes.fromhex("52540077000a")) == "52:54:00:77:00:0a"
    for bad in ("52:54:00:77:00", "52:54:00:77:00:0g", "152:54:00:77:00:0a", "::::::"):
        with pytest.raises(EncodeError):
            parse_mac(bad)
