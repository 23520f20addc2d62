"""Every step of the tools' exchanges has a deadline (issue 8).

Before, a peer that opened the TCP exchange of ``netio pingpong``/``netio perftest``
and then sent nothing kept netio waiting until that peer closed. Here the peers are
raw sockets that connect (or accept) and stay silent for longer than the test runs:
netio must give up after ``--timeout`` and name the step it was waiting in. The
message sizes are the tools' own: 52 bytes for a pingpong address (``sizeof
"0000:000000:000000:" + 32 hex digits``), 16 for perftest's version field.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import random
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from netio.cli import perftest as perftest_cli
from netio.cli import pingpong as pingpong_cli
from netio.cli import soft_options
from netio.errors import ExchangeError
from netio.interop.perftest import (
    PerftestConfig,
    PerftestListener,
    PerftestVerb,
    run_perftest,
)
from netio.interop.pingpong import (
    PingpongAddress,
    PingpongConfig,
    PingpongListener,
    run_pingpong,
)
from netio.roce import QpType

pytestmark = pytest.mark.timeout(120)

TIMEOUT_S = 1.0
#: The run must end within the timeout plus this much (context set-up, a loaded machine).
SLACK_S = 3.0
#: How long the silent peers stay silent: far longer than the bound.
SILENT_S = 30.0


def _loopback_pair() -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    base = random.SystemRandom().randrange(1 << 16) << 8
    return (ipaddress.IPv4Address((127 << 24) | base | 1),
            ipaddress.IPv4Address((127 << 24) | base | 2))


@asynccontextmanager
async def _silent_server(host: str) -> AsyncIterator[int]:
    """A TCP server that accepts and then neither reads nor writes; yields its port."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, host, 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        server.close()


async def _bounded(coro: object, step: str, why: str = "") -> float:
    """Run ``coro`` (a run that must fail at ``step``, saying ``why``); the seconds it
    took."""
    start = time.monotonic()
    with pytest.raises(ExchangeError) as raised:
        await asyncio.wait_for(coro, SILENT_S)  # type: ignore[arg-type]
    took = time.monotonic() - start
    assert raised.value.step == step, raised.value
    assert why in raised.value.reason, raised.value
    assert f"{TIMEOUT_S:g} s" in raised.value.reason
    assert took < TIMEOUT_S + SLACK_S, f"{step}: ended after {took:.1f} s"
    return took


@asynccontextmanager
async def _unanswering_server(host: str) -> AsyncIterator[int]:
    """A listening socket whose accept queue is full: the kernel drops further SYNs, so
    a connect neither succeeds nor fails (for minutes of SYN retries); yields its port."""
    with socket.socket() as listening:
        listening.bind((host, 0))
        listening.listen(0)
        port: int = listening.getsockname()[1]
        queued = []
        try:
            for _ in range(4):  # fill the queue (listen(0) takes one) and then some
                sock = socket.socket()
                sock.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    sock.connect((host, port))
                queued.append(sock)
            await asyncio.sleep(0.2)
            yield port
        finally:
            for sock in queued:
                sock.close()


# -- pingpong ------------------------------------------------------------------------------


def test_pingpong_client_connect_that_is_never_answered_is_bounded() -> None:
    server_ip, client_ip = _loopback_pair()

    async def main() -> None:
        async with _unanswering_server(str(server_ip)) as port:
            config = PingpongConfig(transport=QpType.RC, server=str(server_ip), port=port,
                                    local_ip=client_ip, iters=1, timeout_s=TIMEOUT_S)
            await _bounded(run_pingpong(config), "pingpong connect",
                           "the connection was not answered")

    asyncio.run(main())



def test_pingpong_client_against_a_server_that_accepts_and_sends_nothing() -> None:
    server_ip, client_ip = _loopback_pair()

    async def main() -> None:
        async with _silent_server(str(server_ip)) as port:
            config = PingpongConfig(transport=QpType.RC, server=str(server_ip), port=port,
                                    local_ip=client_ip, iters=1, timeout_s=TIMEOUT_S)
            took = await _bounded(run_pingpong(config), "pingpong server address")
            assert took >= TIMEOUT_S * 0.9  # it did wait for the answer first

    asyncio.run(main())


@pytest.mark.parametrize(("sent", "step"), [
    (0, "pingpong client address"),  # connects and sends nothing
    (20, "pingpong client address"),  # part of the address, then nothing
    (52, "pingpong done"),  # the whole address, but never "done"
])
def test_pingpong_server_against_a_client_that_goes_silent(sent: int, step: str) -> None:
    server_ip, client_ip = _loopback_pair()

    async def main() -> None:
        listener = PingpongListener(TIMEOUT_S)
        await listener.listen(str(server_ip), 0)
        reader, writer = await asyncio.open_connection(str(server_ip), listener.port)
        address = PingpongAddress(0, 0x123, 0x456, ipaddress.IPv6Address(f"::ffff:{client_ip}"))
        writer.write(address.encode()[:sent])
        try:
            config = PingpongConfig(transport=QpType.RC, local_ip=server_ip, iters=1,
                                    timeout_s=TIMEOUT_S)
            await _bounded(run_pingpong(config, listener=listener), step)
        finally:
            writer.close()
        del reader

    asyncio.run(main())


def test_pingpong_server_waits_for_its_client_no_longer_than_the_timeout() -> None:
    server_ip, _ = _loopback_pair()

    async def main() -> None:
        listener = PingpongListener(TIMEOUT_S)
        await listener.listen(str(server_ip), 0)
        config = PingpongConfig(transport=QpType.RC, local_ip=server_ip, timeout_s=TIMEOUT_S)
        await _bounded(run_pingpong(config, listener=listener), "pingpong server")

    asyncio.run(main())


# -- perftest ------------------------------------------------------------------------------


def test_perftest_client_against_a_server_that_accepts_and_sends_nothing() -> None:
    server_ip, client_ip = _loopback_pair()

    async def main() -> None:
        async with _silent_server(str(server_ip)) as port:
            config = PerftestConfig(verb=PerftestVerb.WRITE, server=str(server_ip), port=port,
                                    local_ip=client_ip, timeout_s=TIMEOUT_S)
            await _bounded(run_perftest(config), "perftest version")

    asyncio.run(main())


@pytest.mark.parametrize(("versions", "step"), [
    (False, "perftest version"),  # connects and sends nothing
    (True, "perftest cycle buffer"),  # versions exchanged, then nothing
])
def test_perftest_server_against_a_client_that_goes_silent(versions: bool, step: str) -> None:
    server_ip, _ = _loopback_pair()

    async def main() -> None:
        listener = PerftestListener(TIMEOUT_S)
        await listener.listen(str(server_ip), 0)
        reader, writer = await asyncio.open_connection(str(server_ip), listener.port)
        config = PerftestConfig(verb=PerftestVerb.READ, local_ip=server_ip,
                                timeout_s=TIMEOUT_S)
        run = asyncio.ensure_future(run_perftest(config, listener=listener))
        try:
            if versions:  # ctx_xchg_data: the client writes first, then reads
                writer.write(b"6.06".ljust(16, b"\0"))
                assert (await asyncio.wait_for(reader.readexactly(16), 10)).startswith(b"6.06")
            await _bounded(run, step)
        finally:
            writer.close()

    asyncio.run(main())


# -- the commands: one line naming the step, exit code 1, within the bound --------------------


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def test_commands_name_the_step_a_silent_peer_stalled(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    server_ip, client_ip = _loopback_pair()
    port = _free_port(str(server_ip))
    stop = threading.Event()

    def silent_client() -> None:  # connects once the server listens, then says nothing
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                sock = socket.create_connection((str(server_ip), port), timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        else:
            return
        with sock:
            stop.wait(SILENT_S)

    thread = threading.Thread(target=silent_client)
    thread.start()
    try:
        start = time.monotonic()
        code = pingpong_cli.main(["-p", str(port), "--bind", str(server_ip), "--timeout",
                                  f"{TIMEOUT_S:g}"])
        took = time.monotonic() - start
    finally:
        stop.set()
        thread.join(10)
    assert code == soft_options.EXIT_FAILED
    assert capsys.readouterr().err == (
        "netio pingpong: pingpong client address: nothing received for 1 s (--timeout): the "
        "peer connected but did not send its 52-byte message\n")
    assert took < TIMEOUT_S + SLACK_S

    async def client() -> int:
        async with _silent_server(str(server_ip)) as silent_port:
            return await asyncio.to_thread(perftest_cli.main, [
                "write", "-p", str(silent_port), "--bind", str(client_ip), "--timeout",
                f"{TIMEOUT_S:g}", str(server_ip)])

    start = time.monotonic()
    assert asyncio.run(client()) == soft_options.EXIT_FAILED
    assert time.monotonic() - start < TIMEOUT_S + SLACK_S
    assert capsys.readouterr().err == (
        "netio perftest: perftest version: nothing received for 1 s (--timeout): the peer "
        "connected but did not send its 16-byte message\n")


def test_connect_cut_by_the_deadline_after_refusals_says_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused, refused, then the last attempt gets only the sliver of budget left and
    times out: the reason given is the refusal (what the person can act on), not that
    a connection went unanswered. The timed-out attempt is forced, so this does not
    depend on the machine's speed."""
    from netio.interop import oob

    attempts = []

    async def fake_open_connection(*args: object, **kwargs: object) -> object:
        attempts.append(args)
        if len(attempts) < 3:
            raise ConnectionRefusedError(111, "Connection refused")
        await asyncio.sleep(3600)  # the budget ends during this one
        raise AssertionError("not reached")

    monkeypatch.setattr(oob.asyncio, "open_connection", fake_open_connection)
    monkeypatch.setattr(oob, "RETRY_INTERVAL_S", 0.01)
    with pytest.raises(ExchangeError) as info:
        asyncio.run(oob.connect("127.0.0.1", 1, timeout_s=0.2, step="pingpong connect"))
    assert len(attempts) >= 3
    assert str(info.value).endswith("no server at 127.0.0.1:1 after 0.2 s: Connection refused")


def test_connect_never_answered_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from netio.interop import oob

    async def silent(*args: object, **kwargs: object) -> object:
        await asyncio.sleep(3600)
        raise AssertionError("not reached")

    monkeypatch.setattr(oob.asyncio, "open_connection", silent)
    with pytest.raises(ExchangeError) as info:
        asyncio.run(oob.connect("127.0.0.1", 1, timeout_s=0.1, step="pingpong connect"))
    assert str(info.value).endswith("after 0.1 s: the connection was not answered")
