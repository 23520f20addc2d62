"""``ibv_rc_pingpong --chk`` against netio while the guest's egress loses,
reorders and duplicates packets (``tc netem``), in both roles (issue item 4).

A capture on the lab bridge, decoded with netio's own codec, must show both
sides' retransmissions: a request PSN the kernel sent twice with different
IPv4 identifications (rxe numbers every packet it sends, so a netem duplicate
keeps its ID and a retransmission gets a new one), and a request PSN netio sent
twice (netio's egress has no netem). Every frame's ICRC must verify: the
kernel's and netio's.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from netio.pcap import open_capture
from netio.roce import udp_source_port
from netio.wire.bth import Opcode
from netio.wire.packet import decode_frame

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NETIO = "pingpong"  # the netio subcommand
ITERS = 100
SIZE = 16384  # 16 packets per message at MTU 1024: go-back-N has something to resend
NETEM = "delay 1ms reorder 25% 50% loss 5% duplicate 5%"
_RESPONSES = {Opcode.RC_ACKNOWLEDGE, Opcode.RC_ATOMIC_ACKNOWLEDGE}


@pytest.fixture
def lossy_guest(lab1500) -> Iterator[object]:
    rc, out = lab1500.run(f"tc qdisc replace dev eth0 root netem {NETEM}")
    assert rc == 0, out
    try:
        yield lab1500
    finally:
        lab1500.run("tc qdisc del dev eth0 root")


def _retransmissions(path: Path, kernel_ip: str, netio_ip: str) -> tuple[int, int, int]:
    """(kernel retransmitted PSNs, netio retransmitted PSNs, frames) from the capture.

    Also checks what both sides must agree on: every frame's ICRC, and one UDP
    source port per connection in both directions (rxe's flow-label rule is
    symmetric in the two QPNs)."""
    ids: dict[tuple[int, int], set[int]] = defaultdict(set)
    sent_by_netio: Counter[tuple[int, int]] = Counter()
    qpns: dict[str, int] = {}
    ports: set[int] = set()
    frames = 0
    with open_capture(path) as capture:
        for record in capture:
            frame = decode_frame(record.frame, record.linktype)
            if frame.roce is None or frame.ipv4 is None:
                continue
            frames += 1
            assert frame.icrc_ok(), f"bad ICRC in frame {record.record_index}"
            bth = frame.roce.bth
            assert frame.udp is not None
            qpns[str(frame.ipv4.dst_ip)] = bth.dest_qp
            ports.add(frame.udp.src_port)
            src = str(frame.ipv4.src_ip)
            if src == netio_ip:
                assert frame.ipv4.identification == 0 and frame.ipv4.dont_fragment
            if bth.opcode in _RESPONSES:
                continue
            key = (bth.dest_qp, bth.psn)
            if src == kernel_ip:
                ids[key].add(frame.ipv4.identification)
            elif src == netio_ip:
                sent_by_netio[key] += 1
    assert ports == {udp_source_port(qpns[netio_ip], qpns[kernel_ip])}, ports
    kernel = sum(1 for seen in ids.values() if len(seen) > 1)
    netio = sum(1 for n in sent_by_netio.values() if n > 1)
    return kernel, netio, frames


def _check(lab, capture: Path, result: tuple[int, str, int, str]) -> None:
    guest_rc, guest_out, netio_rc, netio_out = result
    assert guest_rc == 0, f"guest failed ({guest_rc}):\n{guest_out}\nnetio:\n{netio_out}"
    assert netio_rc == 0, f"netio failed ({netio_rc}):\n{netio_out}\nguest:\n{guest_out}"
    assert "invalid data" not in guest_out
    assert f"{ITERS} received messages checked" in netio_out, netio_out
    kernel, netio, frames = _retransmissions(capture, lab.guest.ip, lab.host_ip)
    assert kernel > 0, f"no kernel retransmission among {frames} frames"
    assert netio > 0, f"no netio retransmission among {frames} frames"


def test_faults_netio_server(lossy_guest, tmp_path: Path) -> None:
    lab = lossy_guest
    capture = tmp_path / "server.pcap"
    guest = (f"ibv_rc_pingpong -d rxe0 -g {lab.guest.gid_index} -s {SIZE} -n {ITERS} -c "
             f"{lab.host_ip}")
    netio = ["--rc", "-s", str(SIZE), "-n", str(ITERS), "--chk", "--bind", lab.host_ip]
    with lab.capture(capture):
        result = lab.netio_server_guest_client(NETIO, netio, guest, timeout_s=240)
    _check(lab, capture, result)


def test_faults_netio_client(lossy_guest, tmp_path: Path) -> None:
    lab = lossy_guest
    capture = tmp_path / "client.pcap"
    guest = f"ibv_rc_pingpong -d rxe0 -g {lab.guest.gid_index} -s {SIZE} -n {ITERS} -c"
    netio = ["--rc", "-s", str(SIZE), "-n", str(ITERS), "--chk", "--bind", lab.host_ip,
             lab.guest.ip]
    with lab.capture(capture):
        result = lab.guest_server_netio_client(NETIO, netio, guest, "pp-faults", timeout_s=240)
    _check(lab, capture, result)
