"""What netio says when the kernel tool on the other side does not match (issue 8).

* A path-MTU mismatch: ``ibv_rc_pingpong -m 4096`` (rxe at netdev MTU 9000) against
  ``netio pingpong -m 1024``. The kernel's first packet of an 8 KiB SEND carries its
  path MTU, 4096 bytes (IBTA §9.7.4.1.6: first and middle packets carry exactly the
  path MTU); netio refuses it and must name both MTUs, where it used to print a bare
  ``WR_FLUSH_ERR (5)``.
* ``--backend tcp`` against a kernel tool, which announces its RoCEv2 GID: one line
  saying tcp talks only to netio.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_kernel_tool_at_mtu4096_against_netio_at_1024_is_named(lab9000) -> None:
    lab = lab9000
    guest = (f"ibv_rc_pingpong -d rxe0 -g {lab.guest.gid_index} -s 8192 -n 5 -m 4096 "
             f"{lab.host_ip}")
    netio = ["--rc", "-s", "8192", "-n", "5", "-m", "1024", "--bind", lab.host_ip,
             "--timeout", "20"]
    guest_rc, guest_out, netio_rc, netio_out = lab.netio_server_guest_client(
        "pingpong", netio, guest, timeout_s=60)
    assert netio_rc == 4, netio_out  # ExitCode.FAILED
    assert ("payload of 4096 bytes in a first packet, path MTU is 1024: the peers' MTUs "
            "differ (local 1024, remote 4096)") in netio_out, netio_out
    assert guest_rc != 0, guest_out  # the kernel got netio's NAK (or lost its peer)


def test_tcp_backend_against_a_kernel_tool_says_so(lab1500) -> None:
    lab = lab1500
    guest = f"ibv_rc_pingpong -d rxe0 -g {lab.guest.gid_index} -n 5 {lab.host_ip}"
    netio = ["--rc", "-n", "5", "--backend", "tcp", "--bind", lab.host_ip, "--timeout", "20"]
    _guest_rc, guest_out, netio_rc, netio_out = lab.netio_server_guest_client(
        "pingpong", netio, guest, timeout_s=60)
    assert netio_rc == 4, netio_out  # ExitCode.FAILED
    assert (f"the peer announced RoCE GID ::ffff:{lab.guest.ip}: it is a RoCE device (a "
            "kernel tool or netio --backend soft/verbs), and --backend tcp talks only to "
            "netio --backend tcp") in netio_out, (netio_out, guest_out)
