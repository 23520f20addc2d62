"""The out-of-band exchanges of the libibverbs examples and perftest: message
codecs (against the tools' own format strings), fuzzing of what a peer can
send, and netio against netio over loopback in every role, through the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import random
import signal
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netio.cli import perftest as perftest_cli
from netio.cli import pingpong as pingpong_cli
from netio.cli import soft_options
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
    assert pingpong_cli.main(argv) == soft_options.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("netio pingpong:") and len(err.strip().splitlines()) == 1


def test_perftest_cli_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert perftest_cli.main(["atomic", "-s", "16", "127.0.0.1"]) == soft_options.EXIT_USAGE
    err = capsys.readouterr().err
    assert "atomic operations are 8 bytes" in err and len(err.strip().splitlines()) == 1


def test_pingpong_cli_fails_cleanly_without_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    _, client_ip = _loopback_pair()
    code = pingpong_cli.main(["-n", "1", "-p", "1", "--bind", str(client_ip), "--timeout", "1",
                              "127.0.0.1"])
    assert code == soft_options.EXIT_FAILED
    out, err = capsys.readouterr()
    # the person waiting is told why nothing happens, once, and then why it gave up
    assert out.count("waiting for the server at 127.0.0.1:1 (Connection refused") == 1
    assert err == ("netio pingpong: pingpong connect: no server at 127.0.0.1:1 after 1 s: "
                   "Connection refused\n")
    code = perftest_cli.main(["write", "-p", "1", "--timeout", "0.5", "127.0.0.1"])
    assert code == soft_options.EXIT_FAILED
    assert capsys.readouterr().err == ("netio perftest: perftest connect: no server at "
                                       "127.0.0.1:1 after 0.5 s: Connection refused\n")


@pytest.mark.parametrize(("argv", "what"), [
    (["-p", "70000", "127.0.0.1"], "TCP port 70000 is not in 1..65535"),
    (["-p", "0", "127.0.0.1"], "TCP port 0 is not in 1..65535"),
    (["-p", "-1"], "TCP port -1 is not in 0..65535"),
    (["-n", "99999999999999999999", "127.0.0.1"], "iterations (-n) 99999999999999999999"),
    (["-s", "99999999999", "127.0.0.1"], "message size (-s) 99999999999 is not in"),
    (["-r", "100000", "127.0.0.1"], "rx depth (-r) 100000 is not in 2..16384"),
])
def test_pingpong_cli_numbers_out_of_range(argv: list[str], what: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert pingpong_cli.main(argv) == soft_options.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("netio pingpong: pingpong options: ") and what in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("argv", "what"), [
    (["write", "-p", "65536", "127.0.0.1"], "TCP port 65536"),
    (["write", "-n", "0", "127.0.0.1"], "iterations (-n) 0"),
    (["read", "-s", "4294967296", "127.0.0.1"], "message size (-s) 4294967296"),
    (["send", "-t", "0", "127.0.0.1"], "tx depth (-t) 0"),
    (["send", "-r", "99999"], "rx depth (-r) 99999"),
])
def test_perftest_cli_numbers_out_of_range(argv: list[str], what: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert perftest_cli.main(argv) == soft_options.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("netio perftest: perftest options: ") and what in err


@pytest.mark.parametrize("option", [["--timeout", "nan"], ["--timeout", "0"],
                                    ["--timeout", "-3"], ["--delay-us", "-5"],
                                    ["--reorder-us", "x"], ["--drop", "1.5"]])
def test_driver_options_are_checked_by_argparse(option: list[str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    for run in (lambda: pingpong_cli.main([*option, "127.0.0.1"]),
                lambda: perftest_cli.main(["write", *option, "127.0.0.1"])):
        with pytest.raises(SystemExit) as ei:
            run()
        assert ei.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {option[0]}" in err and "Traceback" not in err


def test_port_in_use_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert pingpong_cli.main(["-p", str(port)]) == soft_options.EXIT_FAILED
        assert capsys.readouterr().err == (f"netio pingpong: pingpong server: cannot listen on "
                                           f"TCP port {port}: Address already in use\n")
        assert perftest_cli.main(["read", "-p", str(port)]) == soft_options.EXIT_FAILED
        assert capsys.readouterr().err == (f"netio perftest: perftest server: cannot listen on "
                                           f"TCP port {port}: Address already in use\n")


def test_address_lines_follow_the_tools() -> None:
    gid = ipaddress.IPv6Address("::ffff:10.77.0.2")
    addr = PingpongAddress(lid=0, qpn=0x11, psn=0xABCDE, gid=gid)
    # rc/uc_pingpong: "PSN 0x%06x, GID %s"; ud_pingpong's own line: "PSN 0x%06x: GID %s"
    assert pingpong_cli.address_line("local", addr, QpType.RC) == (
        "  local address:  LID 0x0000, QPN 0x000011, PSN 0x0abcde, GID ::ffff:10.77.0.2")
    assert pingpong_cli.address_line("local", addr, QpType.UD) == (
        "  local address:  LID 0x0000, QPN 0x000011, PSN 0x0abcde: GID ::ffff:10.77.0.2")
    assert pingpong_cli.address_line("remote", addr, QpType.UD) == (
        "  remote address: LID 0x0000, QPN 0x000011, PSN 0x0abcde, GID ::ffff:10.77.0.2")
    keys = PerftestKeys(lid=0, out_reads=16, qpn=0x11, psn=0xABCDE, rkey=0x19E,
                        vaddr=0x7E0000000000, gid=gid)
    gid_line = " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02"
    # BASIC_ADDR_FMT " %s address: LID %#04x QPN %#06x PSN %#06x", READ_FMT " OUT %#04x",
    # RDMA_FMT " RKey %#08x VAddr %#016llx", PERF_GID_FMT with %02d bytes
    assert perftest_cli.keys_lines("local", keys, PerftestVerb.READ) == (
        " local address: LID 0000 QPN 0x0011 PSN 0xabcde OUT 0x10 RKey 0x00019e "
        "VAddr 0x007e0000000000\n" + gid_line)
    assert perftest_cli.keys_lines("remote", keys, PerftestVerb.WRITE) == (
        " remote address: LID 0000 QPN 0x0011 PSN 0xabcde RKey 0x00019e "
        "VAddr 0x007e0000000000\n" + gid_line)
    for verb in (PerftestVerb.SEND, PerftestVerb.ATOMIC):
        assert perftest_cli.keys_lines("local", keys, verb) == (
            " local address: LID 0000 QPN 0x0011 PSN 0xabcde\n" + gid_line)


def test_server_stops_listening_once_its_client_is_accepted() -> None:
    """The tools serve one client: a second one is refused, not left hanging."""
    server_ip, client_ip = _loopback_pair()

    async def main() -> None:
        listener = PingpongListener()
        await listener.listen(str(server_ip), 0)
        port = listener.port
        accepted = asyncio.Event()
        base = dict(transport=QpType.RC, size_bytes=64, iters=200, timeout_s=20.0)
        server = asyncio.ensure_future(run_pingpong(
            PingpongConfig(local_ip=server_ip, **base), listener=listener,  # type: ignore[arg-type]
            on_address=lambda side, _addr: accepted.set() if side == "remote" else None))
        client = asyncio.ensure_future(run_pingpong(PingpongConfig(  # type: ignore[arg-type]
            server=str(server_ip), port=port, local_ip=client_ip, **base)))
        await asyncio.wait_for(accepted.wait(), 20)
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(str(server_ip), port)
        await client
        await server

    asyncio.run(main())


def _spawn(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "netio.cli.main", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _read_until(proc: subprocess.Popen[str], needle: str, timeout_s: float = 30) -> None:
    assert proc.stdout is not None
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if needle in line:
            return
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"{needle!r} not printed")


@pytest.mark.slow
def test_ctrl_c_mid_run_stops_both_commands_with_130() -> None:
    server_ip, client_ip = _loopback_pair()
    port = str(random.SystemRandom().randrange(20000, 30000))
    for cmd in (["pingpong", "-n", "1000000"], ["perftest", "write", "-n", "100000000"]):
        server = _spawn(*cmd, "-p", port, "--bind", str(server_ip))
        client = None
        try:
            _read_until(server, "waiting for a client")
            client = _spawn(*cmd, "-p", port, "--bind", str(client_ip), str(server_ip))
            _read_until(client, "remote address")
            time.sleep(0.5)  # mid-run: completions are arriving
            client.send_signal(signal.SIGINT)
            _, err = client.communicate(timeout=20)
            assert client.returncode == 130 and err.endswith("interrupted\n"), err
            # The server either saw its peer go (4) or is interrupted too (130; or
            # killed by the signal when it arrives as the process exits anyway).
            server.send_signal(signal.SIGINT)
            _, err = server.communicate(timeout=20)
            assert server.returncode in (4, 130, -signal.SIGINT), err
            assert "Traceback" not in err
        finally:
            for proc in (server, client):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.communicate()


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


def test_driver_errors_say_what_to_do() -> None:
    import argparse
    import errno

    from netio.cli.soft_options import driver_error_text
    from netio.errors import DriverSocketError

    refused = DriverSocketError("raw IPv4 socket", OSError(errno.EPERM, "Operation not permitted"))
    assert driver_error_text(refused, argparse.Namespace(rx_mode="raw")) == (
        "raw IPv4 socket: Operation not permitted (--rx-mode raw needs CAP_NET_RAW: run as "
        "root, or use --rx-mode udp)")
    busy = DriverSocketError("UDP socket 127.0.0.1:4791",
                             OSError(errno.EADDRINUSE, "Address already in use"))
    assert driver_error_text(busy, argparse.Namespace(rx_mode="auto")) == (
        "UDP socket 127.0.0.1:4791: Address already in use")


def test_help_texts_name_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    for main, argv in ((pingpong_cli.main, ["--help"]), (perftest_cli.main, ["--help"]),
                       (perftest_cli.main, ["send", "--help"])):
        with pytest.raises(SystemExit) as ei:
            main(argv)
        assert ei.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "0 done; 4 the test failed" in text and "2 bad arguments" in text
        assert "130 interrupted" in text and "141" in text
