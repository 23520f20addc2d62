"""The IO API as users meet it: synchronous code, two processes, a hostile or silent
peer on the exchange, descriptors, options checking, closing from anywhere."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import netio
from tests.api.conftest import BACKENDS, Pair, open_pair_contexts, run, soft_addresses

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_synchronous_use_from_plain_code(backend: str) -> None:
    server, client, host = open_pair_contexts(backend)
    with server, client:
        listener = server.listen(f"{host}:0").wait(5)
        accepted = listener.accept(timeout_s=10)
        ep = client.connect(f"{host}:{listener.address[1]}").wait(10)
        peer = accepted.wait(10)
        target = np.zeros(8192, dtype=np.uint8)
        remote = netio.RemoteRegion.from_descriptor(server.register(target).descriptor())
        src = np.arange(8192, dtype=np.uint16).astype(np.uint8)
        op = ep.write(client.register(src), remote.whole())
        completion = op.wait(10)
        assert op.done() and op.result() is completion
        assert np.array_equal(target, src)
        inbox = bytearray(16)
        got = peer.recv(server.register(inbox))
        ep.send(client.register(bytearray(b"sync")), imm=9).wait(10)
        assert got.wait(10).imm_data == 9 and inbox[:4] == b"sync"
        # a handle from the private loop can be awaited from another event loop
        c = asyncio.run(_await(ep.read(client.register(bytearray(16)), remote[0:16])))
        assert c.byte_len == 16
    assert client.closed and server.closed
    client.close()  # idempotent


async def _await(op: netio.Pending[netio.Completion]) -> netio.Completion:
    return await op


def test_wait_on_the_loop_thread_is_refused() -> None:
    async def main() -> None:
        async with netio.open("tcp") as ctx:
            listener = await ctx.listen("127.0.0.1:0")
            with pytest.raises(netio.IoError, match="use 'await'"):
                listener.accept().wait(1)

    asyncio.run(main())


_PEER_SCRIPT = textwrap.dedent("""
    import json, sys, numpy as np, netio
    backend, host = sys.argv[1], sys.argv[2]
    opts = {"local_addr": host} if backend.startswith("soft") else {}
    if backend == "soft-poll":
        backend, opts["progress"] = "soft", "poll"
    with netio.open(backend, **opts) as ctx:
        target = np.zeros(3 << 20, dtype=np.uint8)
        region = ctx.register(target)
        listener = ctx.listen(f"{host}:0").wait(10)
        print(json.dumps({"port": listener.address[1],
                          "descriptor": region.descriptor().hex()}), flush=True)
        ep = listener.accept(timeout_s=30).wait(30)
        inbox = bytearray(8)
        ep.recv(ctx.register(inbox)).wait(60)   # the client says it is done
        expect = np.random.default_rng(42).integers(0, 256, 3 << 20, dtype=np.uint8)
        print(json.dumps({"equal": bool(np.array_equal(target, expect)),
                          "message": inbox.decode()}), flush=True)
""")


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_processes(backend: str) -> None:
    host, client_ip = (soft_addresses() if backend.startswith("soft")
                       else ("127.0.0.1", None))
    proc = subprocess.Popen([sys.executable, "-c", _PEER_SCRIPT, backend, host],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)
    try:
        assert proc.stdout is not None
        hello = json.loads(proc.stdout.readline())
        opts: dict[str, str] = {"local_addr": client_ip} if client_ip else {}
        if backend == "soft-poll":
            backend, opts["progress"] = "soft", "poll"
        with netio.open(backend, **opts) as ctx:
            ep = ctx.connect(f"{host}:{hello['port']}").wait(20)
            remote = netio.RemoteRegion.from_descriptor(bytes.fromhex(hello["descriptor"]))
            src = np.random.default_rng(42).integers(0, 256, 3 << 20, dtype=np.uint8)
            local = ctx.register(src)
            chunk = 1 << 20
            ops = [ep.write(local[i:i + chunk], remote[i:i + chunk])
                   for i in range(0, 3 << 20, chunk)]
            for op in ops:
                op.wait(60)
            ep.send(ctx.register(bytearray(b"done1234"))).wait(30)
        result = json.loads(proc.stdout.readline())
        assert result == {"equal": True, "message": "done1234"}
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()


def _raw_connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    return s


@pytest.mark.parametrize("payload", [
    b"GET / HTTP/1.1\r\n\r\n",                                   # not netio
    struct.pack("!4sBBI", b"NTIO", 99, 1, 2) + b"{}",             # another version
    struct.pack("!4sBBI", b"NTIO", 1, 1, 1 << 30),                # oversized
    struct.pack("!4sBBI", b"NTIO", 1, 1, 5) + b"{bad}",           # malformed JSON
    struct.pack("!4sBBI", b"NTIO", 1, 1, 2) + b"[]",              # not an object
    struct.pack("!4sBBI", b"NTIO", 1, 1, 13) + b'{"address":1}',  # bad address
    b"",                                                          # silent
])
def test_listener_survives_bad_clients(payload: bytes) -> None:
    with netio.open("tcp", timeout_s=0.5) as ctx:
        listener = ctx.listen("127.0.0.1:0").wait(5)
        port = listener.address[1]
        bad = _raw_connect(port)
        bad.sendall(payload)
        deadline = time.monotonic() + 5
        while listener.rejected == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        bad.close()
        assert listener.rejected == 1
        assert listener.errors and "\n" not in listener.errors[-1]
        with netio.open("tcp") as client:  # a real client is still served
            accepted = listener.accept(timeout_s=5)
            client.connect(f"127.0.0.1:{port}").wait(5)
            accepted.wait(5)


def test_silent_server_times_out_naming_the_step() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        with netio.open("tcp", timeout_s=0.3) as ctx:
            t0 = time.monotonic()
            with pytest.raises(netio.Timeout) as info:
                ctx.connect(f"127.0.0.1:{server.getsockname()[1]}").wait(5)
            assert time.monotonic() - t0 < 2
            assert info.value.step == "exchange reply"
    finally:
        server.close()


def test_nothing_listening_is_a_clear_error() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with netio.open("tcp") as ctx, pytest.raises(netio.ConnectFailed) as info:
        ctx.connect(f"127.0.0.1:{port}").wait(5)
    assert info.value.errno == 111  # ECONNREFUSED
    assert "listener" in info.value.hint


def test_transport_mismatch_is_named() -> None:
    server_ip, _ = soft_addresses()
    with netio.open("soft", local_addr=server_ip) as soft, netio.open("tcp") as tcp:
        listener = soft.listen(f"{server_ip}:0").wait(5)
        with pytest.raises(netio.ExchangeMismatch, match=r"tcp.*rocev2"):
            tcp.connect(f"{server_ip}:{listener.address[1]}").wait(5)


def test_path_mtu_is_the_smaller_side() -> None:
    server_ip, client_ip = soft_addresses()
    with netio.open("soft", local_addr=server_ip, mtu=1024) as srv, \
            netio.open("soft", local_addr=client_ip) as cli:
        listener = srv.listen(f"{server_ip}:0").wait(5)
        accepted = listener.accept(timeout_s=5)
        ep = cli.connect(f"{server_ip}:{listener.address[1]}").wait(5)
        assert ep.path.mtu_bytes == 1024 and accepted.wait(5).path.mtu_bytes == 1024
        assert "MTU 1024" in ep.path.text()


def test_descriptor_layout_and_bad_descriptors() -> None:
    with netio.open("tcp") as ctx:
        region = ctx.register(bytearray(5000))
        d = region.descriptor()
        # b"NTMR", version 1, transport 2 (tcp), 2 reserved, addr u64, rkey u32, len u64
        magic, version, transport, _, addr, rkey, length = struct.unpack("!4sBBHQIQ", d)
        assert (magic, version, transport, addr, rkey, length) == (
            b"NTMR", 1, 2, region.addr, region.rkey, 5000)
        remote = netio.RemoteRegion.from_descriptor(d)
        assert remote[100:200].addr == region.addr + 100
        for bad in (d[:-1], b"XXXX" + d[4:], d[:4] + b"\x07" + d[5:]):
            with pytest.raises(netio.IoError, match="region descriptor"):
                netio.RemoteRegion.from_descriptor(bad)
        with pytest.raises(netio.IoError, match="outside"):
            remote[4000:6000]
        private = ctx.register(bytearray(10), netio.Access.LOCAL_WRITE)
        with pytest.raises(netio.RegistrationError, match="no remote access"):
            private.descriptor()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"backend": "rdma"}, "backend 'rdma'"),
    ({"mtu": 1500}, "mtu 1500"),
    ({"retry_count": 8}, "retry_count"),
    ({"traffic_class": 256}, "traffic_class"),
    ({"timeout_s": 0}, "timeout_s"),
])
def test_bad_options_are_one_line_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(netio.IoError, match=match) as info:
        netio.open(**kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_register_refuses_non_contiguous_and_unregistered_buffers() -> None:
    with netio.open("tcp") as ctx:
        with pytest.raises(netio.IoError, match="contiguous"):
            ctx.register(np.zeros((8, 8), dtype=np.uint8)[:, ::2])
        listener = ctx.listen("127.0.0.1:0").wait(5)
        accepted = listener.accept(timeout_s=5)
        ep = ctx.connect(f"127.0.0.1:{listener.address[1]}").wait(5)
        accepted.wait(5)
        with pytest.raises(netio.IoError, match="register it"):
            ep.send(bytearray(4))  # type: ignore[arg-type]


def test_close_from_another_thread_and_at_exit() -> None:
    ctx = netio.open("tcp")
    listener = ctx.listen("127.0.0.1:0").wait(5)
    pending = listener.accept()
    closer = threading.Thread(target=ctx.close)
    closer.start()
    closer.join(10)
    assert not closer.is_alive() and ctx.closed
    assert pending.done()
    # a program that exits with a context open and work in flight ends promptly
    script = textwrap.dedent("""
        import netio
        ctx = netio.open("tcp")
        lst = ctx.listen("127.0.0.1:0").wait(5)
        ep = ctx.connect(f"127.0.0.1:{lst.address[1]}").wait(5)
        ep.recv(ctx.register(bytearray(64)))
        print("exiting", flush=True)
    """)
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=30, cwd=REPO, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr
    assert "exiting" in out.stdout and "Traceback" not in out.stderr
    assert time.monotonic() - t0 < 15


_SIGNAL_SCRIPT = textwrap.dedent("""
    import asyncio, signal, sys, netio
    mode = sys.argv[1]
    if mode == "sync":
        ctx = netio.open("tcp")
        signal.signal(signal.SIGTERM, lambda *_: ctx.close())
        lst = ctx.listen("127.0.0.1:0").wait(5)
        print("ready", flush=True)
        try:
            lst.accept().wait(60)
        except netio.ClosedError as exc:
            print("closed:", exc, flush=True)
    else:
        async def main():
            async with netio.open("tcp") as ctx:
                asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, ctx.close)
                lst = await ctx.listen("127.0.0.1:0")
                print("ready", flush=True)
                try:
                    await lst.accept()
                except netio.ClosedError as exc:
                    print("closed:", exc, flush=True)
        asyncio.run(main())
""")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_close_from_a_signal_handler(mode: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _SIGNAL_SCRIPT, mode], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(15)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert out.startswith("closed: ")  # ClosedError, whether it was waiting yet or not
        assert "Traceback" not in err
    finally:
        proc.kill()
        proc.wait()


def test_soft_rx_mode_takes_its_names_and_refuses_others() -> None:
    server_ip, _ = soft_addresses()
    with netio.open("soft", local_addr=server_ip, rx_mode="udp") as ctx:
        ctx.listen(f"{server_ip}:0").wait(5)
        ctx.endpoint("rc").wait(5)
        driver = ctx.backend.driver_for(server_ip)  # type: ignore[attr-defined]
        assert driver.rx_mode.value == "udp"
    with pytest.raises(netio.IoError, match="rx_mode 'fast' is not one of auto, raw, udp"):
        netio.open("soft", rx_mode="fast")


def test_a_buffer_not_registered_with_the_endpoints_context_is_refused() -> None:
    """A region of another context, or one deregistered, is refused before anything is
    posted, in the single-operation methods and in a batch alike (one line; the batch's
    other requests are not posted either)."""
    message = "a local buffer is not a registered region of this endpoint's context"

    async def scenario(pair: Pair) -> None:
        other = netio.open("tcp")
        try:
            foreign = other.register(bytearray(16))
            gone = pair.client.register(bytearray(16))
            gone.deregister()
            data = bytearray(b"after refusals!!")
            mine = pair.client.register(data)
            for bad in (foreign, gone):
                with pytest.raises(netio.IoError, match=message):
                    await pair.ep.send(bad)
                with pytest.raises(netio.IoError, match=message):
                    await pair.ep.post([netio.WorkRequest.send(mine),
                                        netio.WorkRequest.send(bad)])
            # nothing of the refused batches went: the peer's one receive gets this SEND
            inbox = bytearray(16)
            got = pair.peer.recv(pair.server.register(inbox))
            await pair.ep.send(mine)
            assert (await got).byte_len == 16 and bytes(inbox) == bytes(data)
        finally:
            await other.aclose()

    run("tcp", scenario)
