"""The out-of-band exchanges of the libibverbs examples and perftest: message
codecs (against the tools' own format strings), fuzzing of what a peer can
send, and netio against netio over loopback in every role, through the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netio.cli import perftest as perftest_cli
from netio.cli import pingpong as pingpong_cli
from netio.errors import ExchangeError
from netio.interop.perftest import (
    KEY_MESSAGE_BYTES,
    AtomicType,
    BwReport,
    PerftestChannel,
    PerftestConfig,
    PerftestKeys,
    PerftestListener,
    PerftestVerb,
    remote_offset,
    run_perftest,
)
from netio.interop.pingpong import (
    ADDRESS_MESSAGE_BYTES,
    PingpongAddress,
    PingpongConfig,
    PingpongListener,
    chk_pattern,
    run_pingpong,
)
from netio.roce import LinkFaults, QpType

pytestmark = pytest.mark.timeout(120)


def _loopback_pair() -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    base = random.SystemRandom().randrange(1 << 16) << 8
    return (ipaddress.IPv4Address((127 << 24) | base | 1),
            ipaddress.IPv4Address((127 << 24) | base | 2))


# -- pingpong messages -----------------------------------------------------------------------


def test_pingpong_address_matches_the_tools_format() -> None:
    gid = ipaddress.IPv6Address("::ffff:10.77.0.1")
    addr = PingpongAddress(lid=0, qpn=0x11, psn=0xABCDEF, gid=gid)
    raw = addr.encode()
    # sprintf("%04x:%06x:%06x:%s") with gid_to_wire_gid: the raw GID bytes in hex
    assert raw == b"0000:000011:abcdef:00000000000000000000ffff0a4d0001\x00"
    assert len(raw) == ADDRESS_MESSAGE_BYTES
    assert PingpongAddress.decode(raw) == addr
    assert addr.has_gid
    assert not PingpongAddress(0, 1, 2, ipaddress.IPv6Address("::")).has_gid


@settings(max_examples=200, deadline=None)
@given(lid=st.integers(0, 0xFFFF), qpn=st.integers(0, 0xFFFFFF), psn=st.integers(0, 0xFFFFFF),
       gid=st.binary(min_size=16, max_size=16))
def test_pingpong_address_round_trip(lid: int, qpn: int, psn: int, gid: bytes) -> None:
    addr = PingpongAddress(lid, qpn, psn, ipaddress.IPv6Address(gid))
    assert PingpongAddress.decode(addr.encode()) == addr


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_pingpong_address_decode_fuzz(raw: bytes) -> None:
    with contextlib.suppress(ExchangeError):
        PingpongAddress.decode(raw)


def test_chk_pattern() -> None:
    p = chk_pattern(10000)
    assert len(p) == 10000
    assert p[0] == p[4096] == p[8192] == 0
    assert p[1] == p[4095] == p[4097] == p[9999] == 0x7B
    assert chk_pattern(1) == b"\x00"


# -- perftest messages -----------------------------------------------------------------------


def test_perftest_keys_match_key_print_fmt_gid() -> None:
    keys = PerftestKeys(lid=0, out_reads=16, qpn=0x11, psn=0x760F1C, rkey=0x19E,
                        vaddr=0x7E0000000000, gid=ipaddress.IPv6Address("::ffff:10.77.0.1"))
    raw = keys.encode()
    assert len(raw) == KEY_MESSAGE_BYTES == 108
    # KEY_PRINT_FMT_GID: "%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:"
    c_format = ("%04x:%04x:%06x:%06x:%08x:%016x:" + "%02x:" * 16 + "%08x:") % (
        0, 16, 0x11, 0x760F1C, 0x19E, 0x7E0000000000, *keys.gid.packed, 0)
    assert raw == c_format.encode() + b"\x00"
    assert PerftestKeys.decode(raw) == keys


@settings(max_examples=200, deadline=None)
@given(out_reads=st.integers(0, 0xFFFF), qpn=st.integers(0, 0xFFFFFF),
       psn=st.integers(0, 0xFFFFFF), rkey=st.integers(0, 0xFFFFFFFF),
       vaddr=st.integers(0, 2**64 - 1), gid=st.binary(min_size=16, max_size=16),
       srqn=st.integers(0, 0xFFFFFFFF))
def test_perftest_keys_round_trip(out_reads: int, qpn: int, psn: int, rkey: int, vaddr: int,
                                  gid: bytes, srqn: int) -> None:
    keys = PerftestKeys(0, out_reads, qpn, psn, rkey, vaddr, ipaddress.IPv6Address(gid), srqn)
    assert PerftestKeys.decode(keys.encode()) == keys


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=KEY_MESSAGE_BYTES))
def test_perftest_keys_decode_fuzz(raw: bytes) -> None:
    with contextlib.suppress(ExchangeError):
        PerftestKeys.decode(raw)


def test_remote_offset_follows_increase_rem_addr() -> None:
    # messages up to half the cycle buffer step by the size rounded up to a cache line
    offsets = [remote_offset(i, 100, 4096, 64, PerftestVerb.WRITE) for i in range(40)]
    assert offsets[:3] == [0, 128, 256] and max(offsets) == 31 * 128 and offsets[32] == 0
    assert {remote_offset(i, 4096, 4096, 64, PerftestVerb.READ) for i in range(5)} == {0}
    atomics = [remote_offset(i, 8, 4096, 64, PerftestVerb.ATOMIC) for i in range(65)]
    assert atomics[1] == 64 and atomics[64] == 0 and all(o % 8 == 0 for o in atomics)


def test_perftest_channel_blobs_and_peer_checks() -> None:
    """The server reads first, the client writes first; old peers are refused."""
    async def main() -> None:
        listener = PerftestListener()
        await listener.listen("127.0.0.1", 0)
        client_task = asyncio.ensure_future(PerftestChannel.connect("127.0.0.1", listener.port))
        server = await listener.accept()
        client = await client_task

        async def both(a: object, b: object) -> tuple[object, object]:
            return tuple(await asyncio.gather(a, b))  # type: ignore[arg-type]

        assert await both(client.exchange_versions("6.06"), server.exchange_versions("5.93")) == (
            "5.93", "6.06")
        assert await both(client.exchange_sys_data(4096, 64),
                          server.exchange_sys_data(8192, 32)) == ((8192, 64), (8192, 64))
        assert await both(client.exchange_mtu(4096), server.exchange_mtu(1024)) == (1024, 1024)
        mine = BwReport(65536, 1000, 1.5, 1.25, 0.02)
        theirs, echoed = await both(client.exchange_reports(mine),
                                    server.exchange_reports(BwReport(65536, 1000, 0, 0, 0)))
        assert echoed == mine and theirs == BwReport(65536, 1000, 0.0, 0.0, 0.0)
        with pytest.raises(ExchangeError, match=r"older than 5\.70"):
            await both(client.exchange_versions("6.06"), server.exchange_versions("5.60"))
        client.abort()
        server.abort()
        await listener.close()

    asyncio.run(main())


def test_perftest_report_wire_format() -> None:
    """xchg_bw_reports sends size, iters (64-bit) and the doubles big-endian."""
    async def main() -> bytes:
        got = bytearray()

        async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for _ in range(5):  # one blob at a time, each answered (ctx_xchg_data)
                got.extend(await reader.readexactly(8))
                writer.write(bytes(8))
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        channel = await PerftestChannel.connect("127.0.0.1", port)
        await asyncio.wait_for(channel.exchange_reports(BwReport(4096, 200, 30.0, 25.5, 0.0064)),
                               10)
        channel.abort()
        server.close()
        return bytes(got)

    raw = asyncio.run(main())
    assert struct.unpack(">QQddd", raw) == (4096, 200, 30.0, 25.5, 0.0064)


# -- netio against netio -----------------------------------------------------------------


@pytest.mark.parametrize("qp_type", [QpType.RC, QpType.UC, QpType.UD])
def test_pingpong_netio_against_netio(qp_type: QpType) -> None:
    server_ip, client_ip = _loopback_pair()
    size = 1000 if qp_type is QpType.UD else 6000

    async def main() -> None:
        listener = PingpongListener()
        await listener.listen(str(server_ip), 0)
        base = dict(transport=qp_type, size_bytes=size, iters=20, chk=True, timeout_s=20.0)
        server = asyncio.ensure_future(run_pingpong(
            PingpongConfig(local_ip=server_ip, **base), listener=listener))  # type: ignore[arg-type]
        client = await run_pingpong(PingpongConfig(  # type: ignore[arg-type]
            server=str(server_ip), port=listener.port, local_ip=client_ip, **base))
        served = await server
        await listener.close()
        for result in (client, served):
            assert result.iters == 20 and result.checked_messages == 20
        assert client.theirs == served.mine and served.theirs == client.mine

    asyncio.run(main())


def test_pingpong_rc_through_lossy_links_checks_every_message() -> None:
    server_ip, client_ip = _loopback_pair()
    faults = LinkFaults(drop=0.05, duplicate=0.05, reorder=0.05, corrupt=0.02,
                        reorder_ns=200_000)

    async def main() -> None:
        listener = PingpongListener()
        await listener.listen(str(server_ip), 0)
        base = dict(transport=QpType.RC, size_bytes=5000, iters=30, chk=True, faults=faults,
                    timeout_s=30.0)
        server = asyncio.ensure_future(run_pingpong(
            PingpongConfig(local_ip=server_ip, fault_seed=1, **base),  # type: ignore[arg-type]
            listener=listener))
        client = await run_pingpong(PingpongConfig(  # type: ignore[arg-type]
            server=str(server_ip), port=listener.port, local_ip=client_ip, fault_seed=2,
            psn=0xFFFFF8, **base))
        served = await server
        await listener.close()
        assert client.checked_messages == served.checked_messages == 30

    asyncio.run(main())


@pytest.mark.parametrize("verb", list(PerftestVerb))
def test_perftest_netio_against_netio(verb: PerftestVerb) -> None:
    server_ip, client_ip = _loopback_pair()

    async def main() -> None:
        listener = PerftestListener()
        await listener.listen(str(server_ip), 0)
        size = None if verb is PerftestVerb.ATOMIC else 3000
        base = dict(verb=verb, size_bytes=size, iters=100, tx_depth=16, rx_depth=32,
                    mtu_bytes=1024, timeout_s=20.0)
        server = asyncio.ensure_future(run_perftest(
            PerftestConfig(local_ip=server_ip, **base), listener=listener))  # type: ignore[arg-type]
        client = await run_perftest(PerftestConfig(  # type: ignore[arg-type]
            server=str(server_ip), port=listener.port, local_ip=client_ip,
            atomic_type=AtomicType.CMP_AND_SWAP, **base))
        served = await server
        await listener.close()
        assert client.is_client and not served.is_client
        assert client.report.iters == 100 and client.report.bw_avg > 0
        if verb is PerftestVerb.SEND:
            assert served.report.iters == 100 and served.peer_report is None
        else:  # the server shows the client's report
            assert served.peer_report == client.report
        assert client.mtu_bytes == served.mtu_bytes == 1024

    asyncio.run(main())


# -- the commands ----------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["--ud", "-s", "2000", "-m", "1024", "127.0.0.1"],  # UD message larger than the MTU
    ["-s", "0", "127.0.0.1"],
    ["-m", "1000", "127.0.0.1"],
])
def test_pingpong_cli_bad_arguments(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert pingpong_cli.main(argv) == pingpong_cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("netio pingpong:") and len(err.strip().splitlines()) == 1


def test_perftest_cli_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert perftest_cli.main(["atomic", "-s", "16", "127.0.0.1"]) == perftest_cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "atomic operations are 8 bytes" in err and len(err.strip().splitlines()) == 1


def test_pingpong_cli_fails_cleanly_without_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    _, client_ip = _loopback_pair()
    code = pingpong_cli.main(["-n", "1", "-p", "1", "--bind", str(client_ip), "--timeout", "1",
                              "127.0.0.1"])
    assert code == pingpong_cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert "netio pingpong:" in err and "Traceback" not in err


def test_cli_runs_netio_against_netio(capsys: pytest.CaptureFixture[str]) -> None:
    """Both commands end to end (server in a thread, client here) print the tools' lines."""
    import threading

    server_ip, client_ip = _loopback_pair()
    port = random.SystemRandom().randrange(20000, 30000)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(pingpong_cli.main(
        ["--rc", "-s", "2048", "-n", "5", "--chk", "-p", str(port), "--bind", str(server_ip)])))
    thread.start()
    client = pingpong_cli.main(["--rc", "-s", "2048", "-n", "5", "--chk", "-p", str(port),
                                "--bind", str(client_ip), str(server_ip)])
    thread.join(30)
    assert client == 0 and codes == [0]
    out = capsys.readouterr().out
    assert out.count("5 iters in") == 2 and out.count("5 received messages checked") == 2
    assert f"GID ::ffff:{server_ip}" in out

    thread = threading.Thread(target=lambda: codes.append(perftest_cli.main(
        ["write", "-s", "1024", "-n", "50", "-p", str(port + 1), "--bind", str(server_ip)])))
    thread.start()
    client = perftest_cli.main(["write", "-s", "1024", "-n", "50", "-p", str(port + 1),
                                "--bind", str(client_ip), str(server_ip)])
    thread.join(30)
    assert client == 0 and codes == [0, 0]
    out = capsys.readouterr().out
    assert "netio write client done" in out and "netio write server done" in out
