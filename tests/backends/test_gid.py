"""GID selection (netio.backends.gid) against the real kernel rxe sysfs snapshot and
hand-made mlx5-like trees. Every expected choice is written out from the rule: a
RoCEv2 GID of the peer's address family, on the netdev of the route to the peer, on an
ACTIVE Ethernet port with a large enough MTU, preferring the route's source address."""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from netio.backends.gid import (
    Route,
    choose,
    iboe_mtu_bytes,
    kernel_route,
    no_device_hint,
    read_gid_table,
)

SNAPSHOT = Path(__file__).resolve().parents[2] / ".." / "shared" / "rxe-lab" / "sysfs-rxe-g0.tar"


@pytest.fixture(scope="module")
def rxe_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SNAPSHOT.is_file():
        pytest.skip(f"{SNAPSHOT} is not here (../shared/rxe-lab)")
    out = tmp_path_factory.mktemp("rxe-sysfs")
    with tarfile.open(SNAPSHOT) as tar:
        tar.extractall(out, filter="data")
    return out


def _devinfo_active_mtu(root: Path) -> int:
    """active_mtu as the guest's own ``ibv_devinfo -v`` printed it (an independent source)."""
    text = (root / "rxelab-snapshot" / "ibv_devinfo-v.txt").read_text()
    found = re.search(r"active_mtu:\s+(\d+)", text)
    assert found is not None
    return int(found.group(1))


def test_snapshot_table(rxe_snapshot: Path) -> None:
    entries = read_gid_table(rxe_snapshot / "sys")
    # rxe in kernel 6.1 lists a link-local GID (from the MAC 52:54:00:77:00:0a) at index 0
    # and the IPv4-mapped 10.77.0.10 at index 1, both RoCE v2 on eth0 (lab README).
    assert [(e.device, e.port, e.index, e.gid, e.gid_type, e.netdev) for e in entries] == [
        ("rxe0", 1, 0, "fe80::5054:ff:fe77:a", "RoCE v2", "eth0"),
        ("rxe0", 1, 1, "::ffff:10.77.0.10", "RoCE v2", "eth0"),
    ]
    assert {e.mtu_bytes for e in entries} == {_devinfo_active_mtu(rxe_snapshot)}
    assert all(e.port_state == 4 and e.link_layer == "Ethernet" for e in entries)


def test_snapshot_choice_for_a_lab_peer(rxe_snapshot: Path) -> None:
    entries = read_gid_table(rxe_snapshot / "sys")
    desc = choose(entries, "10.77.0.11", route=Route("eth0", "10.77.0.10"))
    assert (desc.device, desc.port, desc.gid_index, desc.gid) == ("rxe0", 1, 1,
                                                                 "::ffff:10.77.0.10")
    assert (desc.netdev, desc.mtu_bytes, desc.local_ip) == ("eth0", 1024, "10.77.0.10")
    reasons = {c.gid_index: c.reason for c in desc.candidates}
    assert "link-local" in reasons[0]
    assert reasons[1].startswith("chosen: RoCEv2, IPv4-mapped, on eth0")
    assert [c.chosen for c in desc.candidates] == [False, True]
    # the one-line summary used in error hints
    assert desc.summary() == ("verbs, GID ::ffff:10.77.0.10 (index 1, RoCEv2, eth0), "
                              "rxe0 port 1, MTU 1024")


def test_snapshot_ipv6_peer_has_no_usable_gid(rxe_snapshot: Path) -> None:
    desc = choose(read_gid_table(rxe_snapshot / "sys"), "fd00::9", route=Route("eth0", ""))
    assert desc.device == ""
    reasons = [c.reason for c in desc.candidates]
    assert "link-local" in reasons[0]
    assert reasons[1] == "IPv4 GID, the peer fd00::9 is IPv6"
    hint = no_device_hint(desc, rxe_snapshot / "sys")
    assert "every GID was rejected" in hint and "IPv4 GID" in hint


# -- a hand-made mlx5-like tree: RoCEv1 and RoCEv2 entries, several netdevs ----------------

GIDS = {
    # (device, port): (state, netdev MTUs, [(index, gid as sysfs prints it, type, ndev)])
    ("mlx5_0", 1): ("4: ACTIVE", [
        (0, "fe80:0000:0000:0000:0ac0:ebff:fe00:0001", "IB/RoCE v1", "eth2"),
        (1, "fe80:0000:0000:0000:0ac0:ebff:fe00:0001", "RoCE v2", "eth2"),
        (2, "0000:0000:0000:0000:0000:ffff:c0a8:0105", "IB/RoCE v1", "eth2"),
        (3, "0000:0000:0000:0000:0000:ffff:c0a8:0105", "RoCE v2", "eth2"),
        (4, "fd00:0000:0000:0000:0000:0000:0000:0005", "IB/RoCE v1", "eth2"),
        (5, "fd00:0000:0000:0000:0000:0000:0000:0005", "RoCE v2", "eth2"),
        (6, "0000:0000:0000:0000:0000:ffff:0a00:0005", "RoCE v2", "eth2.100"),
        (7, "0000:0000:0000:0000:0000:ffff:c0a8:0107", "RoCE v2", "eth2"),
    ]),
    ("mlx5_1", 1): ("1: DOWN", [
        (0, "0000:0000:0000:0000:0000:ffff:ac10:0005", "RoCE v2", "eth3"),
    ]),
    ("mlx5_2", 1): ("4: ACTIVE", [
        (0, "0000:0000:0000:0000:0000:ffff:c0a8:0106", "RoCE v2", "eth4"),
    ]),
}
NETDEV_MTUS = {"eth2": 9000, "eth2.100": 1500, "eth3": 4200, "eth4": 1500}


def _make_tree(root: Path) -> Path:
    sys_root = root / "sys"
    for (dev, port), (state, gids) in GIDS.items():
        pdir = sys_root / "class" / "infiniband" / dev / "ports" / str(port)
        for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
            (pdir / sub).mkdir(parents=True)
        (pdir / "state").write_text(state + "\n")
        (pdir / "link_layer").write_text("Ethernet\n")
        for index, gid, gid_type, ndev in gids:
            (pdir / "gids" / str(index)).write_text(gid + "\n")
            (pdir / "gid_attrs" / "types" / str(index)).write_text(gid_type + "\n")
            (pdir / "gid_attrs" / "ndevs" / str(index)).write_text(ndev + "\n")
        # an empty slot, as the kernel shows unused entries (its type/ndev do not read)
        (pdir / "gids" / "99").write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")
    for ndev, mtu in NETDEV_MTUS.items():
        (sys_root / "class" / "net" / ndev).mkdir(parents=True)
        (sys_root / "class" / "net" / ndev / "mtu").write_text(f"{mtu}\n")
    return sys_root


@pytest.fixture
def mlx5_tree(tmp_path: Path) -> Path:
    return _make_tree(tmp_path)


def _reasons(desc_candidates: object) -> dict[tuple[str, int], str]:
    return {(c.device, c.gid_index): c.reason for c in desc_candidates}  # type: ignore[attr-defined]


def test_iboe_mtu_rule() -> None:
    # netdev MTU minus 96 bytes of RoCE headers, rounded down to an IB MTU
    # (include/rdma/ib_addr.h iboe_get_mtu); 1500 -> 1024 as rxe reports in the lab.
    assert [iboe_mtu_bytes(m) for m in (1500, 9000, 4200, 4191, 4192, 1120, 1119, 351, 352)] == [
        1024, 4096, 4096, 2048, 4096, 1024, 512, 0, 256]


def test_mlx5_ipv4_peer_takes_rocev2_mapped_source_gid(mlx5_tree: Path) -> None:
    entries = read_gid_table(mlx5_tree)
    assert len(entries) == 10  # 8 + 1 + 1, the empty slots are not candidates
    desc = choose(entries, "192.168.1.9", route=Route("eth2", "192.168.1.5"))
    assert (desc.device, desc.gid_index, desc.gid, desc.netdev, desc.mtu_bytes) == (
        "mlx5_0", 3, "::ffff:192.168.1.5", "eth2", 4096)
    r = _reasons(desc.candidates)
    assert r[("mlx5_0", 0)] == "RoCEv1: netio speaks RoCEv2 only"
    assert "link-local" in r[("mlx5_0", 1)]
    assert r[("mlx5_0", 2)] == "RoCEv1: netio speaks RoCEv2 only"
    assert r[("mlx5_0", 3)].startswith("chosen:")
    assert r[("mlx5_0", 3)].endswith("the route's source address 192.168.1.5")
    assert r[("mlx5_0", 4)] == "RoCEv1: netio speaks RoCEv2 only"
    assert r[("mlx5_0", 5)] == "IPv6 GID, the peer 192.168.1.9 is IPv4"
    assert r[("mlx5_0", 6)] == "on netdev eth2.100, the route to 192.168.1.9 leaves through eth2"
    assert r[("mlx5_0", 7)].startswith("usable, but GID index 3 on mlx5_0 port 1 comes first")
    assert r[("mlx5_1", 0)] == "port not active (state 1: DOWN)"
    assert r[("mlx5_2", 0)] == "on netdev eth4, the route to 192.168.1.9 leaves through eth2"
    assert sum(c.chosen for c in desc.candidates) == 1


def test_mlx5_ipv6_peer_vlan_and_other_device(mlx5_tree: Path) -> None:
    entries = read_gid_table(mlx5_tree)
    v6 = choose(entries, "fd00::9", route=Route("eth2", "fd00::5"))
    assert (v6.device, v6.gid_index, v6.gid) == ("mlx5_0", 5, "fd00::5")
    assert _reasons(v6.candidates)[("mlx5_0", 3)] == "IPv4 GID, the peer fd00::9 is IPv6"
    vlan = choose(entries, "10.0.0.9", route=Route("eth2.100", "10.0.0.5"))
    assert (vlan.gid_index, vlan.netdev, vlan.mtu_bytes) == (6, "eth2.100", 1024)
    other = choose(entries, "192.168.1.20", route=Route("eth4", "192.168.1.6"))
    assert (other.device, other.gid_index, other.netdev) == ("mlx5_2", 0, "eth4")


def test_mlx5_mtu_request_and_explicit_choice(mlx5_tree: Path) -> None:
    entries = read_gid_table(mlx5_tree)
    desc = choose(entries, "192.168.1.20", route=Route("eth4", "192.168.1.6"), mtu_bytes=4096)
    assert desc.device == ""
    assert (_reasons(desc.candidates)[("mlx5_2", 0)]
            == "port MTU 1024 is below the requested 4096")
    # the user names index 7: the route's source address no longer matters
    picked = choose(entries, "192.168.1.9", route=Route("eth2", "192.168.1.5"),
                    device="mlx5_0", gid_index=7)
    assert (picked.gid_index, picked.gid) == (7, "::ffff:192.168.1.7")
    assert _reasons(picked.candidates)[("mlx5_2", 0)] == "not the requested device mlx5_0"
    # a QP bound to a local address takes that address's GID
    bound = choose(entries, None, local_ip="192.168.1.7")
    assert bound.gid_index == 7


def test_local_peer_and_no_route(mlx5_tree: Path) -> None:
    entries = read_gid_table(mlx5_tree)
    loop = choose(entries, "192.168.1.7", route=Route("lo", "192.168.1.7", local=True))
    assert loop.gid_index == 7
    unrouted = choose(entries, "192.168.1.9", route=None)
    assert unrouted.gid_index == 3  # first usable; the netdev could not be checked
    assert unrouted.notes == ("the kernel has no route to 192.168.1.9: the netdev was not "
                              "checked",)


def test_no_rdma_at_all(tmp_path: Path) -> None:
    desc = choose(read_gid_table(tmp_path), "10.0.0.2", route=Route("eth0", "10.0.0.1"))
    assert desc.device == "" and desc.candidates == ()
    hint = no_device_hint(desc, tmp_path, Route("eth0", "10.0.0.1"))
    assert "modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0" in hint
    assert "backend='soft'" in hint


@pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 is not installed")
def test_kernel_route_matches_ip_route_get() -> None:
    """The netlink lookup against iproute2's own `ip route get` (IPv4 and IPv6)."""
    for dst in ("127.0.0.1", "192.0.2.77", "10.1.1.1", "::1", "fd00::9"):
        proc = subprocess.run(["ip", "-o", "route", "get", dst], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            assert kernel_route(dst) is None
            continue
        words = proc.stdout.split()
        route = kernel_route(dst)
        assert route is not None
        assert route.netdev == words[words.index("dev") + 1]
        assert route.src_ip == words[words.index("src") + 1]
        assert route.local == (words[0] == "local")
