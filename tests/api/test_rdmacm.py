"""``cm="rdma_cm"`` where it cannot be used (soft, tcp), and the parts of
netio.backends.rdmacm that need no RDMA device: the REQ/REP/REJ private data and the
translation of CM events into errors. The connections themselves are tested against
the kernel's rdma_cm and rping in tests/lab/test_lab_rdmacm.py."""

from __future__ import annotations

import pytest

import netio
from netio.backends import rdmacm
from tests.api.conftest import soft_addresses


def _open(backend: str) -> netio.Context:
    if backend == "soft":
        return netio.open("soft", local_addr=soft_addresses()[0])
    return netio.open(backend)


@pytest.mark.parametrize("backend", ["soft", "tcp"])
def test_rdma_cm_needs_the_verbs_backend(backend: str) -> None:
    with _open(backend) as ctx:
        for call in (lambda: ctx.connect("127.0.0.1:7471", cm="rdma_cm"),
                     lambda: ctx.listen("127.0.0.1:7471", cm="rdma_cm")):
            with pytest.raises(netio.IoError) as info:
                call()
            text = str(info.value)
            assert "\n" not in text
            assert text == (f"cm='rdma_cm' needs the verbs backend; this context uses "
                            f"{backend} (use cm='netio' there)")


def test_unknown_cm_is_refused() -> None:
    with _open("tcp") as ctx, pytest.raises(netio.IoError, match="cm='ib_cm' is not one of"):
        ctx.connect("127.0.0.1:7471", cm="ib_cm")


def test_private_data_of_a_netio_peer() -> None:
    # a REQ arrives zero-padded to 56 bytes (IB CM REQ private data 92 bytes, less the
    # 36-byte rdma_cm header); "NIO1" then the MTU as a big-endian 16-bit number
    req = b"NIO1" + bytes([0x04, 0x00]) + bytes(50)
    assert rdmacm._netio_mtu(req) == 1024
    assert rdmacm._netio_mtu(b"NIO1\x10\x00") == 4096
    assert rdmacm._netio_mtu(b"NIO1\x03\xe8") == 0  # 1000 is not an IB MTU
    assert rdmacm._netio_mtu(b"") is None  # rping, ucmatose: no private data
    assert rdmacm._netio_mtu(bytes(56)) is None
    assert rdmacm._reject_reason(b"NIO1:the listener is closing\x00\x00") == (
        "the listener is closing")
    assert rdmacm._reject_reason(bytes(148)) == ""


def test_cm_events_become_connect_failed_with_hints() -> None:
    def event(kind: rdmacm.CmEvent, data: bytes = b"") -> rdmacm._Event:
        return rdmacm._Event(int(kind), f"RDMA_CM_EVENT_{kind.name}", data, None)

    rej = rdmacm._event_error(event(rdmacm.CmEvent.REJECTED), "connect", "10.0.0.2:7471",
                              "10.0.0.2")
    assert isinstance(rej, netio.ConnectFailed)
    assert "10.0.0.2:7471" in str(rej) and "rejected" in str(rej)
    assert "no rdma_cm listener on that port" in rej.hint
    told = rdmacm._event_error(event(rdmacm.CmEvent.REJECTED, b"NIO1:device mismatch"),
                               "connect", "10.0.0.2:7471", "10.0.0.2")
    assert str(told) == "rdma_cm connect to 10.0.0.2:7471: the peer refused: device mismatch"
    for kind, needle in ((rdmacm.CmEvent.UNREACHABLE, "UDP 4791"),
                         (rdmacm.CmEvent.ADDR_ERROR, "ip route get 10.0.0.2"),
                         (rdmacm.CmEvent.ROUTE_ERROR, "ip route get 10.0.0.2")):
        err = rdmacm._event_error(event(kind), "connect", "10.0.0.2:7471", "10.0.0.2")
        assert isinstance(err, netio.ConnectFailed) and needle in err.hint, (kind, err)
        assert "10.0.0.2:7471" in str(err)


def test_cm_event_numbers_are_librdmacms() -> None:
    # enum rdma_cm_event_type in <rdma/rdma_cma.h>, written out
    expected = {"ADDR_RESOLVED": 0, "ADDR_ERROR": 1, "ROUTE_RESOLVED": 2, "ROUTE_ERROR": 3,
                "CONNECT_REQUEST": 4, "CONNECT_RESPONSE": 5, "CONNECT_ERROR": 6,
                "UNREACHABLE": 7, "REJECTED": 8, "ESTABLISHED": 9, "DISCONNECTED": 10,
                "DEVICE_REMOVAL": 11, "MULTICAST_JOIN": 12, "MULTICAST_ERROR": 13,
                "ADDR_CHANGE": 14, "TIMEWAIT_EXIT": 15}
    assert {e.name: e.value for e in rdmacm.CmEvent} == expected
