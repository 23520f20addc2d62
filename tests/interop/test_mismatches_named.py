"""Failed completions are explained in the tools' error lines (issue 8): a path-MTU
mismatch between two ``netio pingpong`` processes, and a refused access in perftest.

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

import asyncio
import ipaddress
import random
import socket
import subprocess
import sys
import time

import pytest

import netio
from netio.backends.base import QpAddress, Transport
from netio.errors import ExchangeError
from netio.interop.perftest import (
    PerftestConfig,
    PerftestKeys,
    PerftestListener,
    PerftestVerb,
    run_perftest,
)

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
    assert server.returncode == 4 and client.returncode == 4, (server_err, client_err)
    assert server_err.count("\n") == 1 and client_err.count("\n") == 1
    assert server_err.startswith("netio pingpong: pingpong: failed status WR_FLUSH_ERR (5)")
    assert (f"payload of {client_mtu} bytes in a first packet, path MTU is {SERVER_MTU}: the "
            f"peers' MTUs differ (local {SERVER_MTU}, remote {client_mtu})") in server_err
    assert client_err.startswith(
        "netio pingpong: pingpong: failed status REM_INV_REQ_ERR (9) for wr_id 2")
    assert (f"both sides must use the same -s and -m (here -s {size}, -m {client_mtu})"
            in client_err)


def test_perftest_error_line_carries_the_endpoint_hint() -> None:
    """A perftest server that announces a wrong rkey (every other key right): netio's
    WRITE client gets the responder's remote access NAK (``IBV_WC_REM_ACCESS_ERR`` = 10)
    and its error line names the rkey and range it was refused, not only the status."""
    net = random.SystemRandom().randrange(1 << 16)
    server_ip = f"127.{net >> 8}.{net & 0xFF}.1"
    client_ip = ipaddress.IPv4Address(f"127.{net >> 8}.{net & 0xFF}.2")

    async def lying_server(listener: PerftestListener) -> None:
        channel = await listener.accept(10.0)
        await listener.close()
        await channel.exchange_versions()
        await channel.exchange_sys_data()
        mtu = await channel.exchange_mtu(1024)
        async with netio.open("soft", local_addr=server_ip, mtu=mtu) as ctx:
            region = ctx.register(bytearray(8192))
            ep = await ctx.endpoint("rc", peer=server_ip)
            a = ep.address
            keys = PerftestKeys(0, 1, a.qpn, a.psn, region.rkey ^ 0x5A5A, region.addr,
                                ipaddress.IPv6Address(a.gid))
            theirs = await channel.hand_shake(keys)
            await ep.connect_to(QpAddress(Transport.ROCE, f"::ffff:{client_ip}", theirs.qpn,
                                          theirs.psn, mtu), mtu_bytes=mtu)
            for _ in range(2):
                await channel.hand_shake(keys)
            await asyncio.sleep(5)  # the client fails meanwhile
            channel.abort()

    async def main() -> ExchangeError:
        listener = PerftestListener(10.0)
        await listener.listen(server_ip, 0)
        server = asyncio.ensure_future(lying_server(listener))
        try:
            with pytest.raises(ExchangeError) as raised:
                await run_perftest(PerftestConfig(
                    verb=PerftestVerb.WRITE, server=server_ip, port=listener.port,
                    local_ip=client_ip, size_bytes=1000, iters=10, mtu_bytes=1024,
                    timeout_s=10.0))
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
        return raised.value

    error = asyncio.run(main())
    text = str(error)
    assert text.startswith("perftest: completion with error REM_ACCESS_ERR (10) after 0 "
                           "operations: the peer refused rkey "), text
    assert "1000 bytes of a 4096-byte region" in text and "\n" not in text
