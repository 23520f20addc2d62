"""Collectors against fixture trees: the real rxe snapshot, mlx5-style trees, faults."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from daemon_helpers import Mlx5Host

from netio.errors import DcbError
from netio.telemetry import metrics as m
from netio.telemetry.dcb import (
    DcbCollector,
    IeeePfc,
    NetlinkDcbClient,
    build_error_reply,
    build_ieee_get,
    build_ieee_reply,
    parse_ieee_reply,
)
from netio.telemetry.ethtool import EthtoolCollector, EthtoolTextSource, normalise
from netio.telemetry.netdev import NetdevCollector, NetlinkLinkSource, SysfsLinkSource
from netio.telemetry.rdma import RdmaSysfsCollector, parse_rate_bps
from netio.telemetry.sample import Collection
from netio.telemetry.selection import Selection


def values(col: Collection) -> dict[tuple[str, tuple[str, ...]], float]:
    return {s.key: s.value for s in col.samples}


# ---- RDMA sysfs ----------------------------------------------------------------------------

def test_rxe_snapshot_matches_the_files(rxe_root: Path) -> None:
    col = RdmaSysfsCollector(str(rxe_root)).collect()
    assert col.faults == ()
    v = values(col)
    hw = rxe_root / "class/infiniband/rxe0/ports/1/hw_counters"
    raw = {p.name: int(p.read_text()) for p in hw.iterdir()}
    t = m.RDMA_TRANSPORT.name
    assert v[(t, ("rxe0", "1", "out_of_sequence"))] == raw["out_of_seq_request"] == 591
    assert v[(t, ("rxe0", "1", "duplicate_request"))] == raw["duplicate_request"] == 13
    assert v[(m.RDMA_PACKETS.name, ("rxe0", "1", "rx"))] == raw["rcvd_pkts"]
    assert v[(m.RDMA_PACKETS.name, ("rxe0", "1", "tx"))] == raw["sent_pkts"]
    assert v[(m.RDMA_OPERATIONS.name, ("rxe0", "1", "send"))] == raw["rdma_sends"]
    assert v[(t, ("rxe0", "1", "completer_retry"))] == raw["completer_retry_err"]
    assert v[(m.RDMA_PORT_STATE.name, ("rxe0", "1"))] == 4
    assert v[(m.RDMA_PORT_RATE.name, ("rxe0", "1"))] == 2.5e9 / 8
    # every rxe counter but the lifespan setting is normalised (no counters/ dir: no fault)
    assert len([k for k in v if k[0] != m.RDMA_PORT_STATE.name]) >= 15
    assert not (rxe_root / "class/infiniband/rxe0/ports/1/counters").exists()


def test_rxe_passthrough_only_when_enabled(rxe_root: Path) -> None:
    plain = RdmaSysfsCollector(str(rxe_root)).collect()
    assert not any(s.spec is m.RDMA_OTHER for s in plain.samples)
    hw = rxe_root / "class/infiniband/rxe0/ports/1/hw_counters"
    (hw / "vendor_new_counter").write_text("42\n")
    col = RdmaSysfsCollector(str(rxe_root), passthrough_unknown=True).collect()
    other = {s.labels: s.value for s in col.samples if s.spec is m.RDMA_OTHER}
    assert other == {("rxe0", "1", "vendor_new_counter"): 42.0}


def test_mlx5_names_normalised(mlx5_host: Mlx5Host) -> None:
    h = mlx5_host
    h.hw["mlx5_0"].update(np_cnp_sent=7, rp_cnp_handled=9, np_ecn_marked_roce_packets=11,
                          packet_seq_err=3, local_ack_timeout_err=2, out_of_sequence=5,
                          rnr_nak_retry_err=4, req_cqe_error=1)
    h.pma["mlx5_0"].update(port_xmit_data=1000, port_rcv_data=250, symbol_error=6)
    h.write()
    v = values(RdmaSysfsCollector(str(h.sys)).collect())
    dp = ("mlx5_0", "1")
    assert v[(m.RDMA_CNP.name, (*dp, "sent"))] == 7
    assert v[(m.RDMA_CNP.name, (*dp, "handled"))] == 9
    assert v[(m.RDMA_ECN_MARKED.name, dp)] == 11
    assert v[(m.RDMA_TRANSPORT.name, (*dp, "nak_sequence_error_received"))] == 3
    assert v[(m.RDMA_TRANSPORT.name, (*dp, "local_ack_timeout"))] == 2
    assert v[(m.RDMA_TRANSPORT.name, (*dp, "rnr_nak_received"))] == 4
    assert v[(m.RDMA_COMPLETION_ERRORS.name, (*dp, "requester", "cqe_error"))] == 1
    # PMA data counters count 4-byte words
    assert v[(m.RDMA_BYTES.name, (*dp, "tx"))] == 4000
    assert v[(m.RDMA_BYTES.name, (*dp, "rx"))] == 1000
    assert v[(m.RDMA_PORT_ERRORS.name, (*dp, "symbol"))] == 6
    assert v[(m.RDMA_PORT_RATE.name, dp)] == 100e9 / 8


def test_na_no_pma_is_skipped_not_a_fault(mlx5_host: Mlx5Host) -> None:
    cdir = mlx5_host.sys / "class/infiniband/mlx5_0/ports/1/counters"
    (cdir / "port_rcv_errors").write_text("N/A (no PMA)\n")
    col = RdmaSysfsCollector(str(mlx5_host.sys)).collect()
    assert col.faults == ()
    assert (m.RDMA_PORT_ERRORS.name, ("mlx5_0", "1", "receive")) not in values(col)


def test_unreadable_file_is_a_fault_and_the_rest_is_read(mlx5_host: Mlx5Host) -> None:
    hw = mlx5_host.sys / "class/infiniband/mlx5_0/ports/1/hw_counters"
    (hw / "np_cnp_sent").unlink()
    (hw / "np_cnp_sent").mkdir()  # read() fails with EISDIR, even for root
    mlx5_host.hw["mlx5_0"]["rp_cnp_handled"] = 5
    mlx5_host.hw["mlx5_0"].pop("np_cnp_sent")
    mlx5_host.write()
    col = RdmaSysfsCollector(str(mlx5_host.sys)).collect()
    assert [(f.kind, f.source) for f in col.faults] == [
        ("unreadable", "mlx5_0/1/hw_counters/np_cnp_sent")]
    assert values(col)[(m.RDMA_CNP.name, ("mlx5_0", "1", "handled"))] == 5


@pytest.mark.parametrize("keep_open", [False, True])
def test_device_disappears_and_reappears(tmp_path: Path, keep_open: bool) -> None:
    h = Mlx5Host(tmp_path / "h", devices=2)
    c = RdmaSysfsCollector(str(h.sys), keep_open=keep_open)
    assert set(c.collect().sources) == {"mlx5_0", "mlx5_1"}
    ib = h.sys / "class/infiniband"
    os.rename(ib / "mlx5_1", tmp_path / "away")
    col = c.collect()
    assert col.sources == ("mlx5_0",)
    assert [(f.kind, f.source) for f in col.faults] == [("vanished", "mlx5_1")]
    os.rename(tmp_path / "away", ib / "mlx5_1")
    col = c.collect()
    assert set(col.sources) == {"mlx5_0", "mlx5_1"} and col.faults == ()


def test_kept_descriptors_see_in_place_updates(mlx5_host: Mlx5Host) -> None:
    c = RdmaSysfsCollector(str(mlx5_host.sys), keep_open=True)
    assert c.reader.keep_open and not RdmaSysfsCollector(str(mlx5_host.sys)).reader.keep_open
    key = (m.RDMA_CNP.name, ("mlx5_0", "1", "sent"))
    assert values(c.collect())[key] == 0
    f = mlx5_host.sys / "class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent"
    with open(f, "r+") as fh:  # rewritten in place, as sysfs regenerates on read
        fh.write("123456\n")
    assert values(c.collect())[key] == 123456
    c.reader.close()


def test_counter_file_vanishing_mid_listing(mlx5_host: Mlx5Host) -> None:
    c = RdmaSysfsCollector(str(mlx5_host.sys))
    c.collect()
    (mlx5_host.sys / "class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent").unlink()
    col = c.collect()
    assert [(f.kind, f.source) for f in col.faults] == [
        ("vanished", "mlx5_0/1/hw_counters/np_cnp_sent")]
    assert c.collect().faults == ()  # re-listed


def test_device_selection(tmp_path: Path) -> None:
    h = Mlx5Host(tmp_path / "h", devices=3)
    c = RdmaSysfsCollector(str(h.sys), devices=Selection(("mlx5_*",), ("mlx5_1",)))
    assert c.collect().sources == ("mlx5_0", "mlx5_2")


def test_no_rdma_subsystem_is_empty_not_a_fault(tmp_path: Path) -> None:
    col = RdmaSysfsCollector(str(tmp_path)).collect()
    assert col.samples == () and col.faults == ()


@pytest.mark.parametrize(("text", "bps"), [
    ("2.5 Gb/sec (1X SDR)", 2.5e9), ("100 Gb/sec (4X EDR)", 1e11), ("400 Gb/sec (4X NDR)", 4e11),
    ("10 Mb/sec", 1e7), ("garbage", None)])
def test_rate_parse(text: str, bps: float | None) -> None:
    assert parse_rate_bps(text) == bps


# ---- ethtool -----------------------------------------------------------------------------

def test_ethtool_normalisation_table() -> None:
    cases = {
        "rx_prio3_pause": (m.PFC_PAUSE_FRAMES, ("rx", "3"), 1.0),
        "tx_prio5_pause": (m.PFC_PAUSE_FRAMES, ("tx", "5"), 1.0),
        "rx_prio3_pause_duration": (m.PFC_PAUSE_DURATION, ("rx", "3"), 1e-6),
        "rx_prio0_pause_transition": (m.PFC_PAUSE_TRANSITIONS, ("rx", "0"), 1.0),
        "tx_pause_storm_warning_events": (m.PAUSE_STORM_EVENTS, ("warning",), 1.0),
        "tx_pause_storm_error_events": (m.PAUSE_STORM_EVENTS, ("error",), 1.0),
        "rx_discards_phy": (m.NIC_DROPPED, ("rx", "port_buffer"), 1.0),
        "rx_out_of_buffer": (m.NIC_DROPPED, ("rx", "no_receive_buffer"), 1.0),
        "rx_pfc_ena_frames_pri3": (m.PFC_PAUSE_FRAMES, ("rx", "3"), 1.0),
        "tx_priority_4_xoff.nic": (m.PFC_PAUSE_FRAMES, ("tx", "4"), 1.0),
        "rx_pause_ctrl_phy": (m.LINK_PAUSE_FRAMES, ("rx",), 1.0),
    }
    for stat, (spec, labels, scale) in cases.items():
        got = normalise(stat)
        assert got is not None, stat
        assert (got.spec, got.labels, got.scale) == (spec, labels, scale), stat
    for unknown in ("ch0_rx_packets", "rx_prio8_pause", "rx_vport_unicast_packets"):
        assert normalise(unknown) is None


def test_ethtool_collector_units_and_passthrough(mlx5_host: Mlx5Host) -> None:
    e = mlx5_host.eth["ens0f0np0"]
    e.update(rx_prio3_pause=10, rx_prio3_pause_duration=250_000, ch0_rx_packets=99)
    mlx5_host.write()
    src = EthtoolTextSource(str(mlx5_host.ethtool_dir))
    v = values(EthtoolCollector(src).collect())
    assert v[(m.PFC_PAUSE_FRAMES.name, ("ens0f0np0", "rx", "3"))] == 10
    assert v[(m.PFC_PAUSE_DURATION.name, ("ens0f0np0", "rx", "3"))] == pytest.approx(0.25)
    assert not any(k[0] == m.ETHTOOL_OTHER.name for k in v)
    v = values(EthtoolCollector(src, passthrough_unknown=True).collect())
    assert v[(m.ETHTOOL_OTHER.name, ("ens0f0np0", "ch0_rx_packets"))] == 99
    v = values(EthtoolCollector(src, stats=Selection(("rx_prio*",))).collect())
    assert {k[0] for k in v} == {m.PFC_PAUSE_FRAMES.name, m.PFC_PAUSE_DURATION.name,
                                 m.PFC_PAUSE_TRANSITIONS.name, m.NIC_PRIO_BYTES.name,
                                 m.NIC_PRIO_PACKETS.name}


def test_ethtool_bad_file_is_a_fault(mlx5_host: Mlx5Host) -> None:
    (mlx5_host.ethtool_dir / "bad0.txt").write_text("NIC statistics:\n  rx_x: lots\n")
    col = EthtoolCollector(EthtoolTextSource(str(mlx5_host.ethtool_dir))).collect()
    assert [(f.kind, f.source) for f in col.faults] == [("unreadable", "bad0")]
    assert "line 2" in col.faults[0].reason
    assert "ens0f0np0" in col.sources


def test_ethtool_ioctl_on_this_host() -> None:
    # The live path: pyroute2's SIOCETHTOOL. lo has no stats (skipped, no fault).
    from netio.telemetry.ethtool import IoctlEthtoolSource

    src = IoctlEthtoolSource()
    col = EthtoolCollector(src, interfaces=Selection(("lo",)), passthrough_unknown=True).collect()
    src.close()
    assert col.faults == () and col.sources == ()


# ---- netdev --------------------------------------------------------------------------------

def test_netdev_sysfs_snapshot(rxe_root: Path) -> None:
    v = values(NetdevCollector(SysfsLinkSource(str(rxe_root))).collect())
    stats = rxe_root / "class/net/eth0/statistics"
    assert v[(m.NET_BYTES.name, ("eth0", "rx"))] == int((stats / "rx_bytes").read_text())
    assert v[(m.NET_PACKETS.name, ("eth0", "tx"))] == int((stats / "tx_packets").read_text())
    assert v[(m.NET_UP.name, ("eth0",))] == 1
    assert v[(m.NET_MTU.name, ("eth0",))] == 1500
    assert (m.NET_SPEED.name, ("eth0",)) not in v  # virtio reports speed -1


def test_netdev_netlink_loopback() -> None:
    """The rtnetlink dump, decoded with struct, against the kernel's sysfs view of
    the same rtnl_link_stats64 read just before and just after."""
    def sysfs(name: str) -> int:
        with open(f"/sys/class/net/lo/statistics/{name}") as f:
            return int(f.read())

    names = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "rx_dropped")
    before = {n: sysfs(n) for n in names}
    src = NetlinkLinkSource()
    col = NetdevCollector(src, devices=Selection(("lo",))).collect()
    src.close()
    after = {n: sysfs(n) for n in names}
    v = values(col)
    assert col.sources == ("lo",)
    assert v[(m.NET_MTU.name, ("lo",))] == int(Path("/sys/class/net/lo/mtu").read_text())
    assert v[(m.NET_UP.name, ("lo",))] == 1  # operstate UNKNOWN with carrier, as iproute2
    for spec, name in ((m.NET_BYTES, "bytes"), (m.NET_PACKETS, "packets"),
                       (m.NET_ERRORS, "errors"), (m.NET_DROPPED, "dropped")):
        for d in ("rx", "tx") if name in ("bytes", "packets") else ("rx",):
            got = v[(spec.name, ("lo", d))]
            assert before[f"{d}_{name}"] <= got <= after[f"{d}_{name}"], (spec.name, d)


# ---- DCB -------------------------------------------------------------------------------------

class FakeDcb:
    """Answers with real netlink bytes, as the kernel's dcbnl_ieee_fill() would."""

    def __init__(self, replies: dict[str, IeeePfc | int]) -> None:
        self.replies = replies
        self.requests: list[bytes] = []

    def interfaces(self) -> list[str]:
        return sorted(self.replies)

    def ieee_get(self, ifname: str) -> bytes:
        req = build_ieee_get(ifname, len(self.requests) + 1)
        self.requests.append(req)
        r = self.replies[ifname]
        if isinstance(r, int):
            return build_error_reply(len(self.requests), r, req)
        return build_ieee_reply(ifname, len(self.requests), r)


def test_dcb_request_bytes() -> None:
    req = build_ieee_get("eth0", 7)
    # nlmsghdr: len, RTM_GETDCB=78, NLM_F_REQUEST, seq 7, pid 0; dcbmsg AF_UNSPEC, IEEE_GET=21
    assert req[:16] == (28 + 4).to_bytes(4, "little") + bytes([78, 0, 1, 0]) + \
        (7).to_bytes(4, "little") + bytes(4)
    assert req[16:20] == bytes([0, 21, 0, 0])
    assert req[20:24] == bytes([9, 0, 1, 0]) and req[24:29] == b"eth0\0"


def test_dcb_collector_with_fake_client() -> None:
    import errno

    pfc = IeeePfc(8, 0b0000_1000, 0, 0, (0, 0, 0, 100, 0, 0, 0, 0), (0, 0, 0, 7, 0, 0, 0, 0))
    fake = FakeDcb({"eth0": pfc, "lo": errno.EOPNOTSUPP, "eth1": errno.EIO})
    col = DcbCollector(fake).collect()
    v = values(col)
    assert col.sources == ("eth0",)
    assert v[(m.DCB_PFC_ENABLED.name, ("eth0", "3"))] == 1
    assert v[(m.DCB_PFC_ENABLED.name, ("eth0", "2"))] == 0
    assert v[(m.DCB_PFC_REQUESTS.name, ("eth0", "3"))] == 100
    assert v[(m.DCB_PFC_INDICATIONS.name, ("eth0", "3"))] == 7
    assert v[(m.DCB_PFC_CAP.name, ("eth0",))] == 8
    assert [(f.kind, f.source) for f in col.faults] == [("unreadable", "eth1")]


def test_dcb_real_kernel_says_unsupported() -> None:
    # This host has no DCB-capable device: the kernel must parse our request and
    # answer EOPNOTSUPP (a malformed request would get EINVAL).
    client = NetlinkDcbClient()
    with pytest.raises(DcbError) as ei:
        parse_ieee_reply(client.ieee_get("lo"))
    import errno
    assert ei.value.errno == errno.EOPNOTSUPP
    assert DcbCollector(client).collect().faults == ()
