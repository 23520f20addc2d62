"""A path-MTU mismatch between two ``netio pingpong`` processes is named (issue 8).

The pingpong exchange carries no MTU, so each side uses its own ``-m``. IBTA vol 1
§9.7.4.1.6 (C9-46): a first or middle packet carries exactly the path MTU of
payload, so the receiver refuses a sender whose MTU differs, and the first packet's
length tells it the sender's MTU. Expected here, from the options each process was
given: the receiving side (the server, at -m 1024) prints "payload of <client's -m>
bytes in a first packet, path MTU is 1024: the peers' MTUs differ (local 1024,
remote <client's -m>)"; the sending side gets the responder's NAK (an invalid
request, ``IBV_WC_REM_INV_REQ_ERR`` = 9) and says to check -s and -m. Both exit 1
with one line each, instead of a bare ``WR_FLUSH_ERR (5)``.
"""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.timeout(120)

SERVER_MTU = 1024


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def _netio(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "netio.cli.main", "pingpong", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(("client_mtu", "size"), [(256, 4096), (4096, 8192)])
def test_pingpong_mtu_mismatch_is_named_on_both_sides(client_mtu: int, size: int) -> None:
    net = random.SystemRandom().randrange(1 << 16)
    server_ip = f"127.{net >> 8}.{net & 0xFF}.1"
    client_ip = f"127.{net >> 8}.{net & 0xFF}.2"
    port = _free_port(server_ip)
    common = ["--rc", "-s", str(size), "-n", "5", "-p", str(port), "--timeout", "10"]
    server = _netio(*common, "-m", str(SERVER_MTU), "--bind", server_ip)
    try:
        assert server.stdout is not None
        end = time.monotonic() + 30
        while "waiting for a client" not in server.stdout.readline():
            assert time.monotonic() < end and server.poll() is None, server.stderr
        client = _netio(*common, "-m", str(client_mtu), "--bind", client_ip, server_ip)
        _, client_err = client.communicate(timeout=60)
        _, server_err = server.communicate(timeout=60)
    finally:
        for proc in (server,):
            if proc.poll() is None:
                proc.kill()
    assert server.returncode == 1 and client.returncode == 1, (server_err, client_err)
    assert server_err.count("\n") == 1 and client_err.count("\n") == 1
    assert server_err.startswith("netio pingpong: pingpong: failed status WR_FLUSH_ERR (5)")
    assert (f"payload of {client_mtu} bytes in a first packet, path MTU is {SERVER_MTU}: the "
            f"peers' MTUs differ (local {SERVER_MTU}, remote {client_mtu})") in server_err
    assert client_err.startswith(
        "netio pingpong: pingpong: failed status REM_INV_REQ_ERR (9) for wr_id 2")
    assert (f"both sides must use the same -s and -m (here -s {size}, -m {client_mtu})"
            in client_err)
