"""netio against the kernel's rxe with perftest's bandwidth tests (issue item 3):
the guest's ``ib_<verb>_bw`` client against ``netio perftest`` as the server,
and ``netio perftest`` as the client of the guest's server. Each run must
complete and report a bandwidth."""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NETIO = "perftest"  # the netio subcommand
ITERS = 200
VERBS = ["write", "read", "send", "atomic"]
_REPORT = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", re.MULTILINE)


def _size_args(verb: str) -> list[str]:
    return [] if verb == "atomic" else ["-s", "4096"]


def _bandwidth(output: str, size: int) -> float:
    """BW average of perftest's report line for ``size`` bytes and ITERS iterations."""
    for m in _REPORT.finditer(output):
        if int(m.group(1)) == size and int(m.group(2)) == ITERS:
            return float(m.group(4))
    raise AssertionError(f"no report line for {size} B x {ITERS} in:\n{output}")


def _ok(guest_rc: int, guest_out: str, netio_rc: int, netio_out: str) -> None:
    assert guest_rc == 0, f"perftest failed ({guest_rc}):\n{guest_out}\nnetio:\n{netio_out}"
    assert netio_rc == 0, f"netio failed ({netio_rc}):\n{netio_out}\nperftest:\n{guest_out}"


@pytest.mark.parametrize("verb", VERBS)
def test_perftest_client_against_netio_server(lab1500, verb: str) -> None:
    size = 8 if verb == "atomic" else 4096
    guest = (f"ib_{verb}_bw -d rxe0 -x {lab1500.guest.gid_index} "
             f"{' '.join(_size_args(verb))} -n {ITERS} {lab1500.host_ip}")
    netio = [verb, *_size_args(verb), "-n", str(ITERS), "--bind", lab1500.host_ip]
    guest_rc, guest_out, netio_rc, netio_out = lab1500.netio_server_guest_client(
        NETIO, netio, guest)
    _ok(guest_rc, guest_out, netio_rc, netio_out)
    assert _bandwidth(guest_out, size) > 0
    if verb != "send":  # netio shows the client's report, as perftest's server does
        assert _bandwidth(netio_out, size) == pytest.approx(_bandwidth(guest_out, size))


@pytest.mark.parametrize("verb", VERBS)
def test_netio_client_against_perftest_server(lab1500, verb: str) -> None:
    size = 8 if verb == "atomic" else 4096
    guest = (f"ib_{verb}_bw -d rxe0 -x {lab1500.guest.gid_index} "
             f"{' '.join(_size_args(verb))} -n {ITERS}")
    netio = [verb, *_size_args(verb), "-n", str(ITERS), "--bind", lab1500.host_ip,
             lab1500.guest.ip]
    guest_rc, guest_out, netio_rc, netio_out = lab1500.guest_server_netio_client(
        NETIO, netio, guest, f"pf-{verb}")
    _ok(guest_rc, guest_out, netio_rc, netio_out)
    assert _bandwidth(netio_out, size) > 0
    assert _bandwidth(guest_out, size) > 0  # the server prints netio's report (or, SEND, its own)
