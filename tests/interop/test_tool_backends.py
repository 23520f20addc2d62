"""``netio pingpong``/``netio perftest`` over other backends of the IO API (issue 8):
``--backend tcp`` between two netio processes, and the one line a tcp run gives
when its peer is a RoCE device (here a soft netio standing in for a kernel tool: it
announces a RoCEv2 GID, ``::ffff:<its address>``, as ibv_*_pingpong and perftest do)."""

from __future__ import annotations

import asyncio
import ipaddress
import random

import pytest

from netio.errors import ExchangeError
from netio.interop.perftest import (
    PerftestConfig,
    PerftestListener,
    PerftestVerb,
    run_perftest,
)
from netio.interop.pingpong import PingpongConfig, PingpongListener, run_pingpong
from netio.roce import QpType

pytestmark = pytest.mark.timeout(120)


def _loopback_pair() -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    base = random.SystemRandom().randrange(1 << 16) << 8
    return (ipaddress.IPv4Address((127 << 24) | base | 1),
            ipaddress.IPv4Address((127 << 24) | base | 2))


def test_pingpong_over_tcp_checks_every_message() -> None:
    server_ip, client_ip = _loopback_pair()

    async def main() -> None:
        listener = PingpongListener(20.0)
        await listener.listen(str(server_ip), 0)
        base = dict(transport=QpType.RC, size_bytes=9000, iters=20, chk=True, timeout_s=20.0,
                    backend="tcp")
        server = asyncio.ensure_future(run_pingpong(
            PingpongConfig(local_ip=server_ip, **base), listener=listener))  # type: ignore[arg-type]
        client = await run_pingpong(PingpongConfig(  # type: ignore[arg-type]
            server=str(server_ip), port=listener.port, local_ip=client_ip, **base))
        served = await server
        assert client.checked_messages == served.checked_messages == 20

    asyncio.run(main())


@pytest.mark.parametrize("verb", list(PerftestVerb))
def test_perftest_over_tcp(verb: PerftestVerb) -> None:
    server_ip, client_ip = _loopback_pair()

    async def main() -> None:
        listener = PerftestListener(20.0)
        await listener.listen(str(server_ip), 0)
        size = None if verb is PerftestVerb.ATOMIC else 3000
        base = dict(verb=verb, size_bytes=size, iters=100, tx_depth=16, rx_depth=32,
                    timeout_s=20.0, backend="tcp")
        server = asyncio.ensure_future(run_perftest(
            PerftestConfig(local_ip=server_ip, **base), listener=listener))  # type: ignore[arg-type]
        client = await run_perftest(PerftestConfig(  # type: ignore[arg-type]
            server=str(server_ip), port=listener.port, local_ip=client_ip, **base))
        served = await server
        assert client.report.iters == 100 and client.report.bw_avg > 0
        if verb is not PerftestVerb.SEND:
            assert served.peer_report == client.report

    asyncio.run(main())


def test_tcp_against_a_roce_peer_says_so_in_one_line() -> None:
    server_ip, client_ip = _loopback_pair()

    async def main() -> tuple[BaseException | None, ExchangeError]:
        listener = PingpongListener(10.0)
        await listener.listen(str(server_ip), 0)
        server = asyncio.ensure_future(run_pingpong(  # soft: a RoCEv2 GID, as the tools
            PingpongConfig(transport=QpType.RC, local_ip=server_ip, timeout_s=10.0),
            listener=listener))
        with pytest.raises(ExchangeError) as client:
            await run_pingpong(PingpongConfig(
                transport=QpType.RC, server=str(server_ip), port=listener.port,
                local_ip=client_ip, timeout_s=10.0, backend="tcp"))
        served = (await asyncio.gather(server, return_exceptions=True))[0]
        return served if isinstance(served, BaseException) else None, client.value

    served, client = asyncio.run(main())
    # the soft server refuses the zero GID the tcp client announces...
    assert isinstance(served, ExchangeError)
    assert "not an IPv4-mapped RoCEv2 GID" in str(served) and "--backend tcp" in str(served)
    # ...and the tcp client says what it needs
    assert "\n" not in str(client)
    assert "with --backend tcp the server must be netio --backend tcp" in str(client)

    async def tcp_server() -> ExchangeError:
        listener = PingpongListener(10.0)
        await listener.listen(str(server_ip), 0)
        server = asyncio.ensure_future(run_pingpong(
            PingpongConfig(transport=QpType.RC, local_ip=server_ip, timeout_s=10.0,
                           backend="tcp"), listener=listener))
        await asyncio.gather(run_pingpong(PingpongConfig(
            transport=QpType.RC, server=str(server_ip), port=listener.port,
            local_ip=client_ip, timeout_s=10.0)), return_exceptions=True)
        with pytest.raises(ExchangeError) as raised:
            await server
        return raised.value

    refused = asyncio.run(tcp_server())
    assert str(refused) == (
        f"pingpong connect: the peer announced RoCE GID ::ffff:{client_ip}: it is a RoCE "
        "device (a kernel tool or netio --backend soft/verbs), and --backend tcp talks only "
        "to netio --backend tcp")
