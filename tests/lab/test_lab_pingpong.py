"""netio against the kernel's rxe with rdma-core's pingpong tools (issue items 1, 2).

Each test runs the guest's tool and ``netio pingpong`` in the opposite role,
with ``--chk`` on both sides: the tool checks the pages it got back, netio
checks every message it received byte by byte.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NETIO = "pingpong"  # the netio subcommand
ITERS = 100


def _tool(transport: str) -> str:
    return f"ibv_{transport}_pingpong"


def _check(guest_rc: int, guest_out: str, netio_rc: int, netio_out: str, iters: int) -> None:
    assert guest_rc == 0, f"guest tool failed ({guest_rc}):\n{guest_out}\nnetio:\n{netio_out}"
    assert netio_rc == 0, f"netio failed ({netio_rc}):\n{netio_out}\nguest:\n{guest_out}"
    assert "invalid data" not in guest_out, guest_out
    assert f"{iters} iters in" in guest_out, guest_out
    assert f"{iters} iters in" in netio_out, netio_out
    assert f"{iters} received messages checked" in netio_out, netio_out


def _netio_server(lab, transport: str, size: int, mtu: int) -> None:
    guest = (f"{_tool(transport)} -d rxe0 -g {lab.guest.gid_index} -s {size} -n {ITERS} "
             f"-c {'' if transport == 'ud' else f'-m {mtu} '}{lab.host_ip}")
    netio = [f"--{transport}", "-s", str(size), "-n", str(ITERS), "-m", str(mtu), "--chk",
             "--bind", lab.host_ip, "--timeout", "60"]
    _check(*lab.netio_server_guest_client(NETIO, netio, guest), ITERS)


def _guest_server(lab, transport: str, size: int, mtu: int) -> None:
    guest = (f"{_tool(transport)} -d rxe0 -g {lab.guest.gid_index} -s {size} -n {ITERS} -c"
             f"{'' if transport == 'ud' else f' -m {mtu}'}")
    netio = [f"--{transport}", "-s", str(size), "-n", str(ITERS), "-m", str(mtu), "--chk",
             "--bind", lab.host_ip, "--timeout", "60", lab.guest.ip]
    _check(*lab.guest_server_netio_client(NETIO, netio, guest, f"pp-{transport}-{size}"),
           ITERS)


@pytest.mark.parametrize("size", [1, 1000, 4096, 65536])
def test_rc_netio_server_mtu1024(lab1500, size: int) -> None:
    _netio_server(lab1500, "rc", size, 1024)


@pytest.mark.parametrize("size", [1, 1000, 4096, 65536])
def test_rc_netio_client_mtu1024(lab1500, size: int) -> None:
    _guest_server(lab1500, "rc", size, 1024)


@pytest.mark.parametrize("transport", ["uc", "ud"])
def test_uc_ud_netio_server(lab1500, transport: str) -> None:
    _netio_server(lab1500, transport, 1000, 1024)


@pytest.mark.parametrize("transport", ["uc", "ud"])
def test_uc_ud_netio_client(lab1500, transport: str) -> None:
    _guest_server(lab1500, transport, 1000, 1024)


def test_rc_netio_server_udp_receive_mode(lab1500) -> None:
    """The fallback receive path (a UDP socket: no IPv4 ID, so the ICRC is
    checked modulo the ID) against rxe, which numbers its packets."""
    guest = (f"ibv_rc_pingpong -d rxe0 -g {lab1500.guest.gid_index} -s 5000 -n {ITERS} -c "
             f"{lab1500.host_ip}")
    netio = ["--rc", "-s", "5000", "-n", str(ITERS), "--chk", "--bind", lab1500.host_ip,
             "--rx-mode", "udp"]
    _check(*lab1500.netio_server_guest_client(NETIO, netio, guest), ITERS)


@pytest.mark.parametrize("size", [1, 1000, 4096, 65536])
def test_rc_netio_server_mtu4096(lab9000, size: int) -> None:
    _netio_server(lab9000, "rc", size, 4096)


@pytest.mark.parametrize("size", [1, 1000, 4096, 65536])
def test_rc_netio_client_mtu4096(lab9000, size: int) -> None:
    _guest_server(lab9000, "rc", size, 4096)


@pytest.mark.parametrize("transport", ["uc", "ud"])
def test_uc_ud_both_roles_mtu4096(lab9000, transport: str) -> None:
    _netio_server(lab9000, transport, 4096, 4096)
    _guest_server(lab9000, transport, 4096, 4096)
