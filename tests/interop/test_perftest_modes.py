"""``netio perftest`` beyond one QP and one bandwidth size (issue 9): ``-q N``, the
latency tests, ``-a``, ``-o``, and the one line a peer in another mode gets.

netio against netio over the soft backend on loopback; scripted peers speak the
exchange the way perftest 6.06 does (``perftest_communication.c``) where netio has
no mode that would send the same (a duplex peer, a multicast or XRC peer, a newer
perftest). The lab suite runs the same cases against the kernel's perftest."""

from __future__ import annotations

import asyncio
import ipaddress
import random
import struct
from typing import Any

import pytest

from netio.errors import ExchangeError
from netio.interop.perftest import (
    ALL_SIZES_BYTES,
    BwReport,
    LatReport,
    PerftestChannel,
    PerftestConfig,
    PerftestKeys,
    PerftestListener,
    PerftestResult,
    PerftestVerb,
    latency_report,
    run_perftest,
)

pytestmark = pytest.mark.timeout(180)


def _loopback_pair() -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    base = random.SystemRandom().randrange(1 << 16) << 8
    return (ipaddress.IPv4Address((127 << 24) | base | 1),
            ipaddress.IPv4Address((127 << 24) | base | 2))


async def _pair(server: dict[str, Any], client: dict[str, Any],
                ) -> tuple[PerftestResult | BaseException, PerftestResult | BaseException]:
    """Run a netio server and a netio client; each outcome is a result or its error."""
    server_ip, client_ip = _loopback_pair()
    listener = PerftestListener(20.0)
    await listener.listen(str(server_ip), 0)
    served = asyncio.ensure_future(run_perftest(
        PerftestConfig(local_ip=server_ip, **server), listener=listener))
    try:
        ran: PerftestResult | BaseException = await run_perftest(PerftestConfig(
            server=str(server_ip), port=listener.port, local_ip=client_ip, **client))
    except ExchangeError as exc:
        ran = exc
    try:
        got: PerftestResult | BaseException = await served
    except ExchangeError as exc:
        got = exc
    await listener.close()
    return got, ran


def _ok(outcome: PerftestResult | BaseException) -> PerftestResult:
    if isinstance(outcome, BaseException):
        raise AssertionError(f"failed: {outcome}")
    return outcome


@pytest.mark.parametrize("verb", [PerftestVerb.WRITE, PerftestVerb.READ, PerftestVerb.SEND,
                                  PerftestVerb.ATOMIC])
def test_several_qps(verb: PerftestVerb) -> None:
    """-q 3: three endpoints, each paired with the peer's QP of the same rank; the report
    counts every QP's operations (perftest's ``iters * num_of_qps``)."""
    size = None if verb is PerftestVerb.ATOMIC else 2000
    base = dict(verb=verb, size_bytes=size, iters=40, tx_depth=8, rx_depth=16, mtu_bytes=1024,
                timeout_s=20.0, qps=3)
    served, ran = asyncio.run(_pair(base, base))
    server, client = _ok(served), _ok(ran)
    assert client.qps == server.qps == 3
    assert isinstance(client.report, BwReport) and client.report.iters == 120
    if verb is PerftestVerb.SEND:
        assert isinstance(server.report, BwReport) and server.report.iters == 120
    else:
        assert server.peer_report == client.report
    assert server.theirs.qpn == client.mine.qpn and client.theirs.qpn == server.mine.qpn


@pytest.mark.parametrize(("server_qps", "client_qps"), [(1, 4), (4, 1), (2, 3)])
def test_qp_count_mismatch_is_named_on_both_sides(server_qps: int, client_qps: int) -> None:
    base = dict(verb=PerftestVerb.WRITE, size_bytes=1000, iters=10, timeout_s=5.0)
    served, ran = asyncio.run(_pair({**base, "qps": server_qps}, {**base, "qps": client_qps}))
    errors = [o for o in (served, ran) if isinstance(o, ExchangeError)]
    assert errors, "a -q mismatch must not run"
    for exc in errors:
        assert exc.step in ("perftest keys", "perftest hand shake") or "closed" in str(exc)
    assert any("QPs than netio's -q" in str(e) for e in errors), errors


@pytest.mark.parametrize("verb", [PerftestVerb.WRITE, PerftestVerb.SEND, PerftestVerb.READ])
def test_latency_tests(verb: PerftestVerb) -> None:
    base = dict(verb=verb, size_bytes=64, iters=30, mtu_bytes=1024, timeout_s=20.0,
                latency=True)
    served, ran = asyncio.run(_pair(base, base))
    server, client = _ok(served), _ok(ran)
    assert isinstance(client.report, LatReport)
    assert client.report.size_bytes == 64 and client.report.iters == 30
    assert 0 < client.report.t_min_us <= client.report.t_typical_us <= client.report.t_max_us
    if verb is PerftestVerb.READ:
        assert server.report is None  # read_lat's server measures nothing
    else:
        assert isinstance(server.report, LatReport) and server.report.iters == 30


def test_write_lat_lands_in_the_polled_byte() -> None:
    """write_lat: the last byte of each side's announced buffer counts the peer's WRITEs
    (mod 256), so after 300 iterations it holds 300 & 0xff on both sides."""
    base = dict(verb=PerftestVerb.WRITE, size_bytes=100, iters=300, mtu_bytes=1024,
                timeout_s=20.0, latency=True)
    served, ran = asyncio.run(_pair(base, base))
    assert _ok(served).report is not None and _ok(ran).report is not None


def test_latency_statistics_follow_print_report_lat() -> None:
    # posts 10 us apart, one gap of 50 us: 9 gaps, the 2 slowest dropped, RTT halved
    posted = [0]
    for gap in [10_000] * 8 + [50_000]:
        posted.append(posted[-1] + gap)
    rep = latency_report(2, posted, 2)
    assert (rep.iters, rep.t_min_us, rep.t_typical_us, rep.t_avg_us) == (10, 5.0, 5.0, 5.0)
    assert rep.t_max_us == 5.0 and rep.p99_us == 5.0 and rep.t_stdev_us == 0.0
    read = latency_report(2, posted, 1)  # READ: the whole round trip
    assert read.t_typical_us == 10.0
    with pytest.raises(ExchangeError, match="too few"):
        latency_report(2, posted[:3], 1)


@pytest.mark.parametrize("verb", [PerftestVerb.WRITE, PerftestVerb.READ, PerftestVerb.SEND])
def test_all_sizes_bandwidth(verb: PerftestVerb) -> None:
    """-a: every size 2 .. 8 MiB in turn; a WRITE/READ server shows the client's last
    report, a SEND server measures every size (a hand shake after each)."""
    base = dict(verb=verb, iters=2, tx_depth=4, mtu_bytes=4096, timeout_s=60.0,
                all_sizes=True)
    served, ran = asyncio.run(_pair(base, base))
    server, client = _ok(served), _ok(ran)
    assert [r.size_bytes for r in client.reports] == list(ALL_SIZES_BYTES)
    assert client.reports[-1].size_bytes == 8388608
    if verb is PerftestVerb.SEND:
        assert [r.size_bytes for r in server.reports] == list(ALL_SIZES_BYTES)
    else:
        assert server.peer_report == client.reports[-1]


def test_all_sizes_send_lat_small() -> None:
    """-a for send_lat runs every size with a hand shake after posting the receives."""
    base = dict(verb=PerftestVerb.SEND, iters=5, mtu_bytes=4096, timeout_s=60.0,
                all_sizes=True, latency=True)
    served, ran = asyncio.run(_pair(base, base))
    server, client = _ok(served), _ok(ran)
    assert [r.size_bytes for r in client.reports] == list(ALL_SIZES_BYTES)
    assert [r.size_bytes for r in server.reports] == list(ALL_SIZES_BYTES)


def test_out_reads_announced_and_honoured() -> None:
    """-o 2 on the server: it announces 2, and the client keeps at most 2 READs in flight."""
    base = dict(verb=PerftestVerb.READ, size_bytes=512, iters=40, tx_depth=32,
                mtu_bytes=1024, timeout_s=20.0)
    served, ran = asyncio.run(_pair({**base, "out_reads": 2}, base))
    server, client = _ok(served), _ok(ran)
    assert server.mine.out_reads == 2 and client.theirs.out_reads == 2
    assert client.mine.out_reads == 16  # netio's default offer
    write = PerftestConfig(verb=PerftestVerb.WRITE, out_reads=4)
    assert write.offered_out_reads == 1  # perftest's WRITE/SEND tests announce 1


def test_latency_peer_against_bandwidth_peer_is_named() -> None:
    """write_lat against write_bw: the counts of hand shakes differ; neither side hangs
    to its timeout nor prints a report."""
    base = dict(verb=PerftestVerb.WRITE, size_bytes=64, iters=20, mtu_bytes=1024,
                timeout_s=4.0)
    served, ran = asyncio.run(_pair(base, {**base, "latency": True}))
    assert isinstance(served, ExchangeError) and isinstance(ran, ExchangeError)
    assert "another" in str(served)


# -- scripted peers ------------------------------------------------------------------------

_GID = ipaddress.IPv6Address("::ffff:127.0.0.9")


async def _scripted_client(port: int, script: list[bytes], version: str = "6.06") -> None:
    """A perftest client that sends version, system data and MTU like perftest 6.06 and then
    the blobs of ``script`` one at a time, reading an answer of the same size to each."""
    channel = await PerftestChannel.connect("127.0.0.1", port, timeout_s=5.0)
    try:
        await channel.exchange_versions(version)
        await channel.exchange_sys_data()
        await channel.exchange_mtu(1024)
        for blob in script:
            await channel.xchg(blob, "scripted")
    except ExchangeError:
        pass
    finally:
        channel.abort()


async def _netio_server_against(script: list[bytes], *, version: str = "6.06",
                                **options: Any) -> ExchangeError:
    listener = PerftestListener(5.0)
    await listener.listen("127.0.0.1", 0)
    peer = asyncio.ensure_future(_scripted_client(listener.port, script, version))
    config = PerftestConfig(verb=options.pop("verb", PerftestVerb.WRITE), size_bytes=1000,
                            iters=10, timeout_s=5.0, local_ip=ipaddress.IPv4Address("127.0.0.1"),
                            **options)
    try:
        with pytest.raises(ExchangeError) as caught:
            await run_perftest(config, listener=listener)
    finally:
        await asyncio.wait_for(peer, 10)
    return caught.value


def _keys(qpn: int, **fields: Any) -> bytes:
    values: dict[str, Any] = dict(lid=0, out_reads=1, qpn=qpn, psn=0x123, rkey=0x55,
                                  vaddr=0x7000, gid=_GID)
    values.update(fields)
    return PerftestKeys(**values).encode()


def test_duplex_write_client_is_named() -> None:
    """ib_write_bw -b: the client's extra hand shake before its run stands where a one-way
    client ends its run, so no WRITE has reached netio's buffer there."""
    k = _keys(0x11)
    err = asyncio.run(_netio_server_against([k, k, k, k]))
    assert "no WRITE in netio's buffer of QP #1" in str(err) and "duplex (-b)" in str(err)


def test_binary_data_where_keys_are_due_is_named() -> None:
    """A peer whose sequence has a report where netio expects a hand shake (a duplex
    send_bw client after its run) is named by the first bytes that cannot be keys."""
    k = _keys(0x11)
    err = asyncio.run(_netio_server_against([k, k, k, struct.pack(">Q", 1000) + bytes(100)],
                                            verb=PerftestVerb.READ))
    assert err.step == "perftest hand shake at the client's end"
    assert "where its 108-byte keys were due (byte 0)" in str(err)


def test_multicast_and_xrc_peers_are_named() -> None:
    err = asyncio.run(_netio_server_against([_keys(0xFFFFFF, gid=ipaddress.IPv6Address(
        "ff0e::ffff:1"))]))
    assert "multicast" in str(err)
    err = asyncio.run(_netio_server_against([_keys(0x11, srqn=0x22)]))
    assert "XRC or DC" in str(err)


def test_newer_perftest_is_refused() -> None:
    err = asyncio.run(_netio_server_against([], version="6.29"))
    assert err.step == "perftest version" and "negotiates" in str(err)


def test_keys_where_a_report_is_due_are_named() -> None:
    """A client whose sequence has one more hand shake (a latency client) sends keys
    where netio's bandwidth server expects the report."""
    k = _keys(0x11)
    err = asyncio.run(_netio_server_against([k, k, k, k, k[:8]], verb=PerftestVerb.READ))
    assert err.step == "perftest report" and "keys" in str(err)


def test_report_for_another_size_is_named() -> None:
    k = _keys(0x11)
    report = [struct.pack(">Q", 4096), struct.pack(">Q", 10), *(struct.pack(">d", 1.0),) * 3]
    err = asyncio.run(_netio_server_against([k, k, k, k, *report], verb=PerftestVerb.READ))
    assert err.step == "perftest report" and "4096-byte" in str(err)


def test_options_out_of_range() -> None:
    with pytest.raises(ExchangeError, match="QPs"):
        PerftestConfig(verb=PerftestVerb.WRITE, qps=0)
    with pytest.raises(ExchangeError, match="one QP"):
        PerftestConfig(verb=PerftestVerb.WRITE, latency=True, qps=2)
    with pytest.raises(ExchangeError, match="no -a"):
        PerftestConfig(verb=PerftestVerb.ATOMIC, all_sizes=True)
    with pytest.raises(ExchangeError, match=r"iterations \(-n\) 4"):
        PerftestConfig(verb=PerftestVerb.SEND, latency=True, iters=4)
    with pytest.raises(ExchangeError, match="outstanding"):
        PerftestConfig(verb=PerftestVerb.READ, out_reads=0)
